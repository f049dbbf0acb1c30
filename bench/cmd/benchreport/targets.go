package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// The targets of issue 22, each judged against nginx in the same run.
const (
	maxPacedCPU     = 1.2  // × nginx's CPU per event, paced pass-through
	maxPacedAddedMs = 0.5  // ms above nginx's p99, paced
	maxToolsCPU     = 1.5  // × nginx's CPU per event, tool-call workload with Redis
	maxToolsAddedMs = 1.0  // ms above nginx's p99, tool-call workload
	maxIdleKiB      = 20.0 // KiB per idle stream
	linearTo        = 10000
	flatWithin      = 0.15 // CPU per event across the sweep: each point within ±15 % of their mean
	sweepFrom       = 100
	sweepTo         = 5000
)

// verdict says whether a target is met; known is false when it was not
// measured.
func verdict(ok, known bool) string {
	switch {
	case !known:
		return "not measured"
	case ok:
		return "**met**"
	default:
		return "**not met**"
	}
}

// writeTargets writes one row per target and aguard column: the figure,
// its ratio to nginx and the verdict.
func writeTargets(w io.Writer, res results, sw sweeps, nofile int) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Targets (issue 22), each against nginx in this run:")
	fmt.Fprintln(w)
	t := table{w: w}
	t.row("target", "aguard", "figure", "nginx", "ratio or difference", "verdict")
	t.row("---", "---", "---:", "---:", "---:", "---")

	nc := res.of("paced", "nginx", procCPU("proxy"))
	n99 := res.of("paced", "nginx", p99)
	for _, a := range aguards {
		ac := res.of("paced", a.key, procCPU("proxy"))
		t.row(fmt.Sprintf("CPU per event, paced pass-through, ≤ %.1f× nginx", maxPacedCPU), a.key,
			ac.fmt("%.2f s/1M"), nc.fmt("%.2f s/1M"), ratio(ac, nc), verdict(ac.v <= maxPacedCPU*nc.v, ac.ok && nc.ok))
	}
	for _, a := range aguards {
		a99 := res.of("paced", a.key, p99)
		t.row(fmt.Sprintf("p99 latency, paced, within %.1f ms of nginx's", maxPacedAddedMs), a.key,
			a99.fmt("%.3f ms"), n99.fmt("%.3f ms"), value{a99.v - n99.v, a99.ok && n99.ok}.fmt("%+.3f ms"),
			verdict(a99.v-n99.v <= maxPacedAddedMs, a99.ok && n99.ok))
	}
	tc := res.of("tools", "nginx", procCPU("proxy"))
	t99 := res.of("tools", "nginx", p99)
	for _, key := range redisUsers {
		ac := res.of("tools", key, procCPU("proxy"))
		t.row(fmt.Sprintf("CPU per event, tool calls with Redis, ≤ %.1f× nginx", maxToolsCPU), key,
			ac.fmt("%.2f s/1M"), tc.fmt("%.2f s/1M"), ratio(ac, tc), verdict(ac.v <= maxToolsCPU*tc.v, ac.ok && tc.ok))
	}
	for _, key := range redisUsers {
		a99 := res.of("tools", key, p99)
		t.row(fmt.Sprintf("p99 latency, tool calls with Redis, within %.0f ms of nginx's", maxToolsAddedMs), key,
			a99.fmt("%.3f ms"), t99.fmt("%.3f ms"), value{a99.v - t99.v, a99.ok && t99.ok}.fmt("%+.3f ms"),
			verdict(a99.v-t99.v <= maxToolsAddedMs, a99.ok && t99.ok))
	}

	// Memory per idle stream: at every count of the idle sweep (the
	// phase's 1,000 streams when there was no sweep).
	ns := counts(sw.idle)
	var figs, nfigs []string
	worst, known := 0.0, len(ns) > 0
	for _, n := range ns {
		v := sw.idleAt("aguard", n)
		known = known && v.ok
		worst = math.Max(worst, v.v)
		figs = append(figs, fmt.Sprintf("%s at %d", v.fmt("%.1f"), n))
		nfigs = append(nfigs, sw.idleAt("nginx", n).fmt("%.1f"))
	}
	if len(ns) > 0 {
		top := ns[len(ns)-1]
		t.row(fmt.Sprintf("memory per idle stream ≤ %.0f KiB", maxIdleKiB), "aguard",
			strings.Join(figs, ", ")+" streams (KiB)", strings.Join(nfigs, ", "),
			ratio(sw.idleAt("aguard", top), sw.idleAt("nginx", top))+" at "+fmt.Sprint(top), verdict(worst <= maxIdleKiB, known))
		lo, hi := sw.idleAt("aguard", ns[0]), sw.idleAt("aguard", top)
		growth := value{(hi.v/lo.v - 1) * 100, lo.ok && hi.ok && lo.v > 0 && len(ns) > 1}
		fig := growth.fmt("%+.1f %%") + fmt.Sprintf(" from %d to %d streams", ns[0], top)
		// Two descriptors per stream: a proxy under an open-file limit of
		// 20,000 holds at most 9,900 streams; that counts as 10,000.
		reached := float64(top) >= 0.99*linearTo
		if !reached {
			fig += fmt.Sprintf(" (not measured up to %d)", linearTo)
		} else if top < linearTo {
			fig += fmt.Sprintf(" (%d: what the open-file limit of %d allows)", top, nofile)
		}
		t.row(fmt.Sprintf("… linear to %d streams: per stream within ±%.0f %% from the fewest to the most", linearTo, flatWithin*100), "aguard",
			fig, dash, dash, verdict(math.Abs(growth.v) <= flatWithin*100, growth.ok && reached))
	}
	for _, a := range aguards {
		am, nm := res.of("idle", a.key, procRSS("proxy")), res.of("idle", "nginx", procRSS("proxy"))
		t.row(fmt.Sprintf("memory per idle stream ≤ %.0f KiB, idle phase (%d streams)", maxIdleKiB, streamsOf(res, "idle")), a.key,
			am.fmt("%.1f KiB"), nm.fmt("%.1f KiB"), ratio(am, nm), verdict(am.v <= maxIdleKiB, am.ok))
	}

	// CPU per event flat across the sweep.
	for _, key := range []string{"aguard", "nginx"} {
		cs := counts(sw.cpu)
		var vals []float64
		ok := len(cs) > 1 && cs[0] <= sweepFrom && cs[len(cs)-1] >= sweepTo
		for _, n := range cs {
			v := sw.cpuAt(key, n)
			ok = ok && v.ok
			vals = append(vals, v.v)
		}
		mean, lo, hi := spread(vals)
		fig := dash
		if len(vals) > 0 {
			fig = fmt.Sprintf("%.2f–%.2f s/1M, %+.0f %% / %+.0f %% of the mean", minOf(vals), maxOf(vals), lo*100, hi*100)
		}
		label := fmt.Sprintf("CPU per event flat (±%.0f %%) from %d to %d streams", flatWithin*100, sweepFrom, sweepTo)
		v := verdict(-lo <= flatWithin && hi <= flatWithin, ok && mean > 0)
		if key == "nginx" {
			label, v = "(the same for nginx, for scale)", dash
		}
		t.row(label, key, fig, dash, dash, v)
	}

	for _, a := range aguards {
		ae, ne := res.of("unpaced", a.key, eps), res.of("unpaced", "nginx", eps)
		t.row("unpaced throughput ≥ nginx's", a.key, ae.fmt("%.0f events/s"), ne.fmt("%.0f events/s"), ratio(ae, ne),
			verdict(ae.v >= ne.v, ae.ok && ne.ok))
	}
}

// spread returns the mean of vs and how far below and above it the
// extremes lie, as fractions of it.
func spread(vs []float64) (mean, lo, hi float64) {
	if len(vs) == 0 {
		return 0, 0, 0
	}
	for _, v := range vs {
		mean += v
	}
	mean /= float64(len(vs))
	if mean == 0 {
		return 0, 0, 0
	}
	return mean, minOf(vs)/mean - 1, maxOf(vs)/mean - 1
}

func minOf(vs []float64) float64 {
	m := math.Inf(1)
	for _, v := range vs {
		m = math.Min(m, v)
	}
	return m
}

func maxOf(vs []float64) float64 {
	m := math.Inf(-1)
	for _, v := range vs {
		m = math.Max(m, v)
	}
	return m
}

package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// sweeps are the results measured at several stream counts: CPU per event
// (sweep-n<N>-<target>.json) and memory per idle stream
// (idle-n<N>-<target>.json), keyed by target and then by count.
type sweeps struct {
	cpu  map[string]map[int]*result
	idle map[string]map[int]*result
}

// loadSweeps reads every sweep file in dir.
func loadSweeps(dir string) (sweeps, error) {
	sw := sweeps{cpu: map[string]map[int]*result{}, idle: map[string]map[int]*result{}}
	for _, kind := range []struct {
		prefix string
		into   map[string]map[int]*result
	}{{"sweep-n", sw.cpu}, {"idle-n", sw.idle}} {
		names, err := filepath.Glob(filepath.Join(dir, kind.prefix+"*.json"))
		if err != nil {
			return sw, err
		}
		for _, name := range names {
			n, target, ok := parseSweepName(strings.TrimPrefix(filepath.Base(name), kind.prefix))
			if !ok {
				continue
			}
			r, err := load(dir, kind.prefix+strconv.Itoa(n), target)
			if err != nil {
				return sw, err
			}
			if kind.into[target] == nil {
				kind.into[target] = map[int]*result{}
			}
			kind.into[target][n] = r
		}
	}
	return sw, nil
}

// parseSweepName splits "<count>-<target>.json". A round's file,
// "<count>-r<round>-<target>.json", is not a count's result: run.sh copies
// each count's median round to "<count>-<target>.json".
func parseSweepName(s string) (n int, target string, ok bool) {
	count, rest, found := strings.Cut(strings.TrimSuffix(s, ".json"), "-")
	if !found || rest == "" || isRound(rest) {
		return 0, "", false
	}
	n, err := strconv.Atoi(count)
	return n, rest, err == nil && n > 0
}

// isRound reports whether s starts with a round's "r<digits>-".
func isRound(s string) bool {
	r, _, found := strings.Cut(s, "-")
	if !found || len(r) < 2 || r[0] != 'r' {
		return false
	}
	_, err := strconv.Atoi(r[1:])
	return err == nil
}

// counts are the stream counts measured for any target, in order.
func counts(m map[string]map[int]*result) []int {
	var ns []int
	for _, byN := range m {
		for n := range byN {
			if !slices.Contains(ns, n) {
				ns = append(ns, n)
			}
		}
	}
	slices.Sort(ns)
	return ns
}

// cpuAt is the proxy's CPU s per 1M events of target at n streams.
func (sw sweeps) cpuAt(target string, n int) value {
	r := sw.cpu[target][n]
	v, _, _, ok := r.proc("proxy")
	return value{v, ok && r.Events > 0}
}

// idleAt is the proxy's RSS per idle stream (KiB) of target at n streams,
// counted only when every stream opened.
func (sw sweeps) idleAt(target string, n int) value {
	r := sw.idle[target][n]
	_, _, v, ok := r.proc("proxy")
	return value{v, ok && r.Opened == n}
}

func writeSweeps(w io.Writer, sw sweeps) {
	t := table{w: w}
	if ns := counts(sw.cpu); len(ns) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "CPU per event against the number of streams (sweep: one total event rate shared by every count of streams; nginx and aguard):")
		fmt.Fprintln(w)
		t.row("streams", "events/s per stream", "events/s delivered, nginx / aguard", "CPU s per 1M events, nginx", "CPU s per 1M events, aguard", "aguard / nginx", "p99 ms, nginx / aguard", "errors, nginx / aguard", "load before (aguard)")
		t.row("---:", "---:", "---:", "---:", "---:", "---:", "---:", "---", "---")
		for _, n := range ns {
			nr, ar := sw.cpu["nginx"][n], sw.cpu["aguard"][n]
			nc, ac := sw.cpuAt("nginx", n), sw.cpuAt("aguard", n)
			perStream := dash
			if r := firstOf(nr, ar); r != nil && r.WindowS > 0 {
				perStream = fmt.Sprintf("%.3g", float64(r.Events)/r.WindowS/float64(n))
			}
			t.row(strconv.Itoa(n), perStream,
				pair(res1(nr, eps), res1(ar, eps), "%.0f"),
				nc.fmt("%.2f"), ac.fmt("%.2f"), ratio(ac, nc),
				pair(res1(nr, p99), res1(ar, p99), "%.3f"),
				errorsOf(nr)+" / "+errorsOf(ar), noiseOf(ar))
		}
	}
	if ns := counts(sw.idle); len(ns) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Memory per idle stream against the number of streams (idlesweep: each count on a freshly started proxy; nginx and aguard):")
		fmt.Fprintln(w)
		t.row("streams", "opened, nginx / aguard", "RSS added, MiB, nginx", "RSS added, MiB, aguard", "per stream, KiB, nginx", "per stream, KiB, aguard", "aguard / nginx", "errors, nginx / aguard")
		t.row("---:", "---:", "---:", "---:", "---:", "---:", "---:", "---")
		for _, n := range ns {
			nr, ar := sw.idle["nginx"][n], sw.idle["aguard"][n]
			ni, ai := sw.idleAt("nginx", n), sw.idleAt("aguard", n)
			t.row(strconv.Itoa(n), openedOf(nr)+" / "+openedOf(ar),
				value{ni.v * float64(n) / 1024, ni.ok}.fmt("%.1f"), value{ai.v * float64(n) / 1024, ai.ok}.fmt("%.1f"),
				ni.fmt("%.1f"), ai.fmt("%.1f"), ratio(ai, ni), errorsOf(nr)+" / "+errorsOf(ar))
		}
	}
}

func firstOf(rs ...*result) *result {
	for _, r := range rs {
		if r != nil {
			return r
		}
	}
	return nil
}

// res1 applies q to r, if there is one.
func res1(r *result, q func(*result) (float64, bool)) value {
	if r == nil {
		return value{}
	}
	v, ok := q(r)
	return value{v, ok}
}

func pair(a, b value, format string) string { return a.fmt(format) + " / " + b.fmt(format) }

func openedOf(r *result) string {
	if r == nil {
		return dash
	}
	return strconv.Itoa(r.Opened)
}

func noiseOf(r *result) string {
	switch {
	case r == nil:
		return dash
	case r.Noise != "":
		return r.Noise
	default:
		return "load " + r.LoadAvgStart
	}
}

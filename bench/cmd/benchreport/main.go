// Command benchreport turns the JSON results that bench/run.sh collected
// with loadgen into one Markdown report: the figures for direct, nginx,
// aguard and aguard with its ledger in Redis side by side, each aguard's
// ratio to nginx, and the targets with whether each is met.
//
//	benchreport -dir /tmp/aguard-bench.X/results -meta /tmp/aguard-bench.X/meta.md -paced-rate 20 -tools-rate 20
//
// The directory holds <phase>-<target>.json for the phases idle, unpaced,
// paced and tools and the targets direct, nginx, aguard, aguard-redis and
// aguard-ledger; sweep-n<streams>-<target>.json (CPU per event against the
// number of streams) and idle-n<streams>-<target>.json (memory per idle
// stream against their number) for nginx and aguard. A missing file shows as
// "—", and a target it decides as "not measured". aguard-ledger is aguardprof
// -redis: the same data plane built in-process with the ledger in Redis.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/aguard/aguard/bench/internal/loadresult"
)

// result is one of loadgen's results, with what run.sh recorded about the
// machine before the run.
type result struct {
	*loadresult.Result
	Noise string
}

// proc returns the watched process named name, if any.
func (r *result) proc(name string) (cpuPerM, cpu, perStream float64, ok bool) {
	if r == nil {
		return 0, 0, 0, false
	}
	p, ok := r.Proc(name)
	return p.CPUPerMEvents, p.CPUSeconds, p.RSSPerStreamKB, ok
}

// target is one column of the report.
type target struct{ key, title string }

var targets = []target{
	{"direct", "direct (no proxy)"},
	{"nginx", "nginx (SSE config)"},
	{"aguard", "aguard (default policy, no Redis)"},
	{"aguard-redis", "aguard + Redis (`serve --redis`)"},
	{"aguard-ledger", "aguard + Redis, ledger wired (aguardprof -redis)"},
}

// aguards are the columns compared with nginx.
var aguards = targets[2:]

var phases = []string{"idle", "unpaced", "paced", "tools"}

func main() {
	dir := flag.String("dir", "", "folder of <phase>-<target>.json files (required)")
	meta := flag.String("meta", "", "Markdown file with the machine description, copied into the report")
	pacedRate := flag.Float64("paced-rate", 20, "events per second per stream of the paced phase (for the offered load)")
	toolsRate := flag.Float64("tools-rate", 20, "events per second per stream of the tool-call phase (for the offered load)")
	nofile := flag.Int("nofile", 0, "the open-file limit the run had (it caps the idle sweep's largest count)")
	flag.Parse()
	if *dir == "" {
		log.Fatal("benchreport: -dir is required")
	}
	res := results{}
	for _, phase := range phases {
		for _, t := range targets {
			r, err := load(*dir, phase, t.key)
			if err != nil {
				log.Fatalf("benchreport: %v", err)
			}
			res[phase+"-"+t.key] = r
		}
	}
	sw, err := loadSweeps(*dir)
	if err != nil {
		log.Fatalf("benchreport: %v", err)
	}
	var metaText string
	if *meta != "" {
		b, err := os.ReadFile(*meta)
		if err != nil {
			log.Fatalf("benchreport: -meta: %v", err)
		}
		metaText = string(b)
	}
	write(os.Stdout, res, sw, metaText, *pacedRate, *toolsRate, *nofile)
}

// load reads one result; a missing file is a nil result.
func load(dir, phase, target string) (*result, error) {
	lr, err := loadresult.Load(filepath.Join(dir, phase+"-"+target+".json"))
	if lr == nil || err != nil {
		return nil, err
	}
	r := &result{Result: lr}
	if n, err := os.ReadFile(filepath.Join(dir, phase+"-"+target+".noise")); err == nil {
		r.Noise = strings.TrimSpace(string(n))
	}
	return r, nil
}

const dash = "—"

// value is one figure that may be missing.
type value struct {
	v  float64
	ok bool
}

func (x value) fmt(format string) string {
	if !x.ok {
		return dash
	}
	return fmt.Sprintf(format, x.v)
}

func ratio(a, b value) string {
	if !a.ok || !b.ok || b.v == 0 {
		return dash
	}
	return fmt.Sprintf("%.2f×", a.v/b.v)
}

// results are keyed "<phase>-<target>".
type results map[string]*result

func (rs results) get(phase, t string) *result { return rs[phase+"-"+t] }

// of applies q to a phase's result for t, if there is one.
func (rs results) of(phase, t string, q func(*result) (float64, bool)) value {
	r := rs.get(phase, t)
	if r == nil {
		return value{}
	}
	v, ok := q(r)
	return value{v, ok}
}

func procCPU(name string) func(*result) (float64, bool) {
	return func(r *result) (float64, bool) {
		v, _, _, ok := r.proc(name)
		return v, ok
	}
}

// procSplit is the user (the process's own code) or, with system, the
// system (the kernel working for it) part of a process's CPU s per 1M
// events; not ok for results from a loadgen that did not split them.
func procSplit(name string, system bool) func(*result) (float64, bool) {
	return func(r *result) (float64, bool) {
		if r == nil {
			return 0, false
		}
		p, ok := r.Proc(name)
		if !ok || p.UserPerMEvents+p.SystemPerMEvents == 0 {
			return 0, false
		}
		if system {
			return p.SystemPerMEvents, true
		}
		return p.UserPerMEvents, true
	}
}

func procRSS(name string) func(*result) (float64, bool) {
	return func(r *result) (float64, bool) {
		_, _, v, ok := r.proc(name)
		return v, ok
	}
}

func lat(q func(*result) float64) func(*result) (float64, bool) {
	return func(r *result) (float64, bool) {
		if r.Latency == nil {
			return 0, false
		}
		return q(r), true
	}
}

var (
	p50  = lat(func(r *result) float64 { return r.Latency.P50 })
	p99  = lat(func(r *result) float64 { return r.Latency.P99 })
	p999 = lat(func(r *result) float64 { return r.Latency.P999 })
	eps  = func(r *result) (float64, bool) { return r.EventsPerSec, true }
	runs = func(r *result) (float64, bool) { return float64(r.RunsDone), true }
	// Connections per run the agent served: what a run costs each side.
	consumerConnsPerRun = func(r *result) (float64, bool) {
		if r.Agent == nil || r.Agent.Runs == 0 {
			return 0, false
		}
		return float64(r.ConsumerConns) / float64(r.Agent.Runs), true
	}
	agentConnsPerRun = func(r *result) (float64, bool) {
		if r.Agent == nil || r.Agent.Runs == 0 {
			return 0, false
		}
		return float64(r.Agent.Connections) / float64(r.Agent.Runs), true
	}
)

func errorsOf(r *result) string {
	if r == nil {
		return dash
	}
	if len(r.Errors) == 0 {
		return "0"
	}
	var parts []string
	for k, v := range r.Errors {
		parts = append(parts, fmt.Sprintf("%d %s", v, k))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// table writes the rows of one Markdown table with a column per target and
// one per aguard/nginx ratio.
type table struct {
	w   io.Writer
	res results
}

func (t table) row(cells ...string) { fmt.Fprintf(t.w, "| %s |\n", strings.Join(cells, " | ")) }

func (t table) header() {
	cells := []string{"measure"}
	align := []string{"---"}
	for _, tg := range targets {
		cells = append(cells, tg.title)
		align = append(align, "---:")
	}
	for _, a := range aguards {
		cells = append(cells, a.key+" / nginx")
		align = append(align, "---:")
	}
	t.row(cells...)
	t.row(align...)
}

// figures writes one row of a phase's figure for the targets in only (all
// when nil), formatted with format, with ratios to nginx when ratios is set.
func (t table) figures(label, phase, format string, q func(*result) (float64, bool), only []string, ratios bool) {
	cells := []string{label}
	vals := map[string]value{}
	for _, tg := range targets {
		if only != nil && !slices.Contains(only, tg.key) {
			cells = append(cells, dash)
			continue
		}
		v := t.res.of(phase, tg.key, q)
		vals[tg.key] = v
		cells = append(cells, v.fmt(format))
	}
	for _, a := range aguards {
		if ratios {
			cells = append(cells, ratio(vals[a.key], vals["nginx"]))
		} else {
			cells = append(cells, dash)
		}
	}
	t.row(cells...)
}

func (t table) errors(label, phase string) {
	cells := []string{label}
	for _, tg := range targets {
		cells = append(cells, errorsOf(t.res.get(phase, tg.key)))
	}
	for range aguards {
		cells = append(cells, dash)
	}
	t.row(cells...)
}

// added writes the added p99 (minus direct) with the difference to nginx's.
func (t table) added(label, phase string) {
	d := t.res.of(phase, "direct", p99)
	n := t.res.of(phase, "nginx", p99)
	cells := []string{label, dash}
	for _, tg := range targets[1:] {
		v := t.res.of(phase, tg.key, p99)
		cells = append(cells, value{v.v - d.v, v.ok && d.ok}.fmt("%.3f"))
	}
	for _, a := range aguards {
		v := t.res.of(phase, a.key, p99)
		cells = append(cells, value{v.v - n.v, v.ok && n.ok}.fmt("%+.3f ms"))
	}
	t.row(cells...)
}

func streamsOf(res results, phase string) int {
	for _, tg := range targets {
		if r := res.get(phase, tg.key); r != nil {
			return r.Streams
		}
	}
	return 0
}

var proxies = []string{"nginx", "aguard", "aguard-redis", "aguard-ledger"}

var redisUsers = []string{"aguard-redis", "aguard-ledger"}

func write(w io.Writer, res results, sw sweeps, meta string, pacedRate, toolsRate float64, nofile int) {
	t := table{w, res}

	fmt.Fprintln(w, "# aguard load benchmark")
	fmt.Fprintln(w)
	if meta != "" {
		fmt.Fprintln(w, strings.TrimSpace(meta))
		fmt.Fprintln(w)
	}
	t.header()

	// Unpaced throughput.
	t.figures(fmt.Sprintf("throughput, unpaced, %d streams: events/s delivered", streamsOf(res, "unpaced")), "unpaced", "%.0f", eps, nil, true)
	t.figures("CPU s of the proxy per 1M events, unpaced", "unpaced", "%.2f", procCPU("proxy"), proxies, true)
	t.figures("… of which user (the proxy's own code), unpaced", "unpaced", "%.2f", procSplit("proxy", false), proxies, true)
	t.figures("… of which system (the kernel working for it), unpaced", "unpaced", "%.2f", procSplit("proxy", true), proxies, true)
	t.figures("(redis-server CPU s per 1M events, unpaced)", "unpaced", "%.2f", procCPU("redis"), redisUsers, false)
	t.figures("(agentsim CPU s per 1M events, unpaced, for scale)", "unpaced", "%.2f", procCPU("agentsim"), nil, false)
	t.errors("errors, unpaced", "unpaced")

	// Paced latency.
	label := fmt.Sprintf("paced, %d streams × %g events/s", streamsOf(res, "paced"), pacedRate)
	t.figures(label+": p50 latency agent→consumer, ms", "paced", "%.3f", p50, nil, true)
	t.figures(label+": p99 latency agent→consumer, ms", "paced", "%.3f", p99, nil, true)
	t.figures(label+": p99.9 latency agent→consumer, ms", "paced", "%.3f", p999, nil, true)
	t.added(label+": added p99 (minus direct), ms", "paced")
	t.figures(fmt.Sprintf("%s: events/s delivered (offered %.0f)", label, float64(streamsOf(res, "paced"))*pacedRate), "paced", "%.0f", eps, nil, true)
	t.figures("CPU s of the proxy per 1M events, paced", "paced", "%.2f", procCPU("proxy"), proxies, true)
	t.figures("… of which user (the proxy's own code), paced", "paced", "%.2f", procSplit("proxy", false), proxies, true)
	t.figures("… of which system (the kernel working for it), paced", "paced", "%.2f", procSplit("proxy", true), proxies, true)
	t.figures("(redis-server CPU s per 1M events, paced)", "paced", "%.2f", procCPU("redis"), redisUsers, false)
	t.figures("(agentsim CPU s per 1M events, paced, for scale)", "paced", "%.2f", procCPU("agentsim"), nil, false)
	t.errors("errors, paced", "paced")

	// Idle memory.
	perMiB := func(r *result) (float64, bool) {
		_, _, v, ok := r.proc("proxy")
		return v * 1000 / 1024, ok
	}
	t.figures(fmt.Sprintf("RSS of the proxy per 1,000 idle open streams, MiB (%d opened)", streamsOf(res, "idle")), "idle", "%.1f", perMiB, proxies, true)
	t.figures("… per idle stream, KiB", "idle", "%.1f", procRSS("proxy"), proxies, true)
	t.figures("(agentsim RSS per idle stream, KiB, for scale)", "idle", "%.1f", procRSS("agentsim"), []string{"direct"}, false)
	t.errors("errors, idle", "idle")

	// The tool-call workload.
	if ts := streamsOf(res, "tools"); ts > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Tool-call workload (frontend calls with their arguments checked by the default policy, left pending at RUN_FINISHED):")
		fmt.Fprintln(w)
		t.header()
		label := fmt.Sprintf("tools, %d streams × %g events/s", ts, toolsRate)
		t.figures(label+": p50 latency agent→consumer, ms", "tools", "%.3f", p50, nil, true)
		t.figures(label+": p99 latency agent→consumer, ms", "tools", "%.3f", p99, nil, true)
		t.figures(label+": p99.9 latency agent→consumer, ms", "tools", "%.3f", p999, nil, true)
		t.added(label+": added p99 (minus direct), ms", "tools")
		t.figures(fmt.Sprintf("%s: events/s delivered (offered %.0f)", label, float64(ts)*toolsRate), "tools", "%.0f", eps, nil, true)
		t.figures("runs completed (RUN_FINISHED received, whole run)", "tools", "%.0f", runs, nil, true)
		t.figures("connections opened per run, consumer side (whole run)", "tools", "%.3f", consumerConnsPerRun, nil, false)
		t.figures("connections accepted per run, agent side (whole run)", "tools", "%.3f", agentConnsPerRun, nil, false)
		t.figures("CPU s of the proxy per 1M events, tools", "tools", "%.2f", procCPU("proxy"), proxies, true)
		t.figures("(redis-server CPU s per 1M events, tools)", "tools", "%.2f", procCPU("redis"), redisUsers, false)
		t.figures("(agentsim CPU s per 1M events, tools, for scale)", "tools", "%.2f", procCPU("agentsim"), nil, false)
		t.errors("errors, tools", "tools")
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "Machine noise before each measurement (1-min load average; CPUs busy over 3 s with the benchmark's processes idle):")
	fmt.Fprintln(w)
	cells := []string{"phase"}
	align := []string{"---"}
	for _, tg := range targets {
		cells = append(cells, tg.key)
		align = append(align, "---")
	}
	t.row(cells...)
	t.row(align...)
	for _, phase := range phases {
		cells := []string{phase}
		for _, tg := range targets {
			r := res.get(phase, tg.key)
			switch {
			case r == nil:
				cells = append(cells, dash)
			case r.Noise != "":
				cells = append(cells, r.Noise)
			default:
				cells = append(cells, "load "+r.LoadAvgStart)
			}
		}
		t.row(cells...)
	}

	writeSweeps(w, sw)
	writeTargets(w, res, sw, nofile)
	for _, c := range []struct {
		phase string
		rate  float64
	}{{"paced", pacedRate}, {"tools", toolsRate}} {
		d := res.of(c.phase, "direct", eps)
		offered := float64(streamsOf(res, c.phase)) * c.rate
		if d.ok && offered > 0 && d.v < 0.9*offered {
			fmt.Fprintf(w, "\nNote: the direct %s run delivered %.0f events/s of the %.0f offered: this machine could not generate the load in full.\n",
				c.phase, d.v, offered)
		}
	}
}

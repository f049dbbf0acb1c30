// Command benchreport turns the JSON results that bench/run.sh collected
// with loadgen into one Markdown report: the figures for direct, nginx and
// aguard side by side, the aguard/nginx ratios, and the targets with
// whether each is met.
//
//	benchreport -dir /tmp/aguard-bench.X/results -meta /tmp/aguard-bench.X/meta.md -paced-rate 20
//
// The directory holds <phase>-<target>.json for the phases idle, unpaced and
// paced and the targets direct, nginx and aguard; a missing file shows as "—".
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// result mirrors the fields of loadgen's JSON output that the report uses.
type result struct {
	Streams      int            `json:"streams"`
	WindowS      float64        `json:"windowSeconds"`
	LoadAvgStart string         `json:"loadAvgStart"`
	Events       int64          `json:"events"`
	EventsPerSec float64        `json:"eventsPerSecond"`
	Errors       map[string]int `json:"errors"`
	Opened       int            `json:"opened"`
	Latency      *struct {
		Samples int     `json:"samples"`
		P50     float64 `json:"p50Ms"`
		P99     float64 `json:"p99Ms"`
		P999    float64 `json:"p999Ms"`
		Max     float64 `json:"maxMs"`
	} `json:"latency"`
	Procs []struct {
		Name           string  `json:"name"`
		CPUSeconds     float64 `json:"cpuSeconds"`
		CPUPerMEvents  float64 `json:"cpuSecondsPerMillionEvents"`
		RSSBeforeKiB   int64   `json:"rssBeforeKiB"`
		RSSAfterKiB    int64   `json:"rssAfterKiB"`
		RSSPerStreamKB float64 `json:"rssPerStreamKiB"`
	} `json:"procs"`
	// Noise is what run.sh recorded about the machine before the run.
	Noise string `json:"-"`
}

// proc returns the watched process named name, if any.
func (r *result) proc(name string) (cpuPerM, cpu, perStream float64, ok bool) {
	if r == nil {
		return 0, 0, 0, false
	}
	for _, p := range r.Procs {
		if p.Name == name {
			return p.CPUPerMEvents, p.CPUSeconds, p.RSSPerStreamKB, true
		}
	}
	return 0, 0, 0, false
}

var targets = []string{"direct", "nginx", "aguard"}

func main() {
	dir := flag.String("dir", "", "folder of <phase>-<target>.json files (required)")
	meta := flag.String("meta", "", "Markdown file with the machine description, copied into the report")
	pacedRate := flag.Float64("paced-rate", 20, "events per second per stream of the paced phase (for the offered load)")
	flag.Parse()
	if *dir == "" {
		log.Fatal("benchreport: -dir is required")
	}
	res := map[string]*result{}
	for _, phase := range []string{"idle", "unpaced", "paced"} {
		for _, t := range targets {
			r, err := load(*dir, phase, t)
			if err != nil {
				log.Fatalf("benchreport: %v", err)
			}
			res[phase+"-"+t] = r
		}
	}
	var metaText string
	if *meta != "" {
		b, err := os.ReadFile(*meta)
		if err != nil {
			log.Fatalf("benchreport: -meta: %v", err)
		}
		metaText = string(b)
	}
	write(os.Stdout, res, metaText, *pacedRate)
}

// load reads one result; a missing file is a nil result.
func load(dir, phase, target string) (*result, error) {
	path := filepath.Join(dir, phase+"-"+target+".json")
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if n, err := os.ReadFile(filepath.Join(dir, phase+"-"+target+".noise")); err == nil {
		r.Noise = strings.TrimSpace(string(n))
	}
	return &r, nil
}

const dash = "—"

func f(format string, v float64, ok bool) string {
	if !ok {
		return dash
	}
	return fmt.Sprintf(format, v)
}

func ratio(a, b float64, ok bool) string {
	if !ok || b == 0 {
		return dash
	}
	return fmt.Sprintf("%.2f×", a/b)
}

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

func write(w io.Writer, res map[string]*result, meta string, pacedRate float64) {
	get := func(k string) *result { return res[k] }
	row := func(cells ...string) { fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | ")) }

	fmt.Fprintln(w, "# aguard load benchmark")
	fmt.Fprintln(w)
	if meta != "" {
		fmt.Fprintln(w, strings.TrimSpace(meta))
		fmt.Fprintln(w)
	}
	row("measure", "direct (no proxy)", "nginx (SSE config)", "aguard (default policy, no Redis)", "aguard / nginx")
	row("---", "---:", "---:", "---:", "---:")

	// Unpaced throughput.
	u := func(t string) *result { return get("unpaced-" + t) }
	streams := 0
	if r := u("aguard"); r != nil {
		streams = r.Streams
	}
	tp := func(t string) (float64, bool) {
		if r := u(t); r != nil {
			return r.EventsPerSec, true
		}
		return 0, false
	}
	dv, dok := tp("direct")
	nv, nok := tp("nginx")
	av, aok := tp("aguard")
	row(fmt.Sprintf("throughput, unpaced, %d streams: events/s delivered", streams),
		f("%.0f", dv, dok), f("%.0f", nv, nok), f("%.0f", av, aok), ratio(av, nv, aok && nok))
	cpuRow := func(phase, label string) (float64, float64, bool) {
		nc, _, _, nok := get(phase + "-nginx").proc("proxy")
		ac, _, _, aok := get(phase + "-aguard").proc("proxy")
		row(label, dash, f("%.2f", nc, nok), f("%.2f", ac, aok), ratio(ac, nc, aok && nok))
		return ac, nc, aok && nok
	}
	cpuRow("unpaced", "CPU s of the proxy per 1M events, unpaced")
	simRow := func(phase, label string) {
		var cells []string
		for _, t := range targets {
			v, _, _, ok := get(phase + "-" + t).proc("agentsim")
			cells = append(cells, f("%.2f", v, ok))
		}
		row(append([]string{label}, append(cells, dash)...)...)
	}
	simRow("unpaced", "(agentsim CPU s per 1M events, unpaced, for scale)")
	row(append([]string{"errors, unpaced"}, errorsOf(u("direct")), errorsOf(u("nginx")), errorsOf(u("aguard")), dash)...)

	// Paced latency.
	p := func(t string) *result { return get("paced-" + t) }
	pStreams := 0
	if r := p("aguard"); r != nil {
		pStreams = r.Streams
	}
	lat := func(t string, q func(r *result) float64) (float64, bool) {
		r := p(t)
		if r == nil || r.Latency == nil {
			return 0, false
		}
		return q(r), true
	}
	p50 := func(r *result) float64 { return r.Latency.P50 }
	p99 := func(r *result) float64 { return r.Latency.P99 }
	p999 := func(r *result) float64 { return r.Latency.P999 }
	label := fmt.Sprintf("paced, %d streams × %g events/s", pStreams, pacedRate)
	for _, q := range []struct {
		name string
		fn   func(*result) float64
	}{{"p50", p50}, {"p99", p99}, {"p99.9", p999}} {
		d, dok := lat("direct", q.fn)
		n, nok := lat("nginx", q.fn)
		a, aok := lat("aguard", q.fn)
		row(label+": "+q.name+" latency agent→consumer, ms", f("%.3f", d, dok), f("%.3f", n, nok), f("%.3f", a, aok), ratio(a, n, aok && nok))
	}
	d99, dok := lat("direct", p99)
	n99, nok := lat("nginx", p99)
	a99, aok := lat("aguard", p99)
	row(label+": added p99 (minus direct), ms", dash, f("%.3f", n99-d99, nok && dok), f("%.3f", a99-d99, aok && dok),
		f("%+.3f ms", a99-n99, aok && nok))
	delivered := func(t string) (float64, bool) {
		if r := p(t); r != nil {
			return r.EventsPerSec, true
		}
		return 0, false
	}
	dd, ddok := delivered("direct")
	nd, ndok := delivered("nginx")
	ad, adok := delivered("aguard")
	row(fmt.Sprintf("%s: events/s delivered (offered %.0f)", label, float64(pStreams)*pacedRate),
		f("%.0f", dd, ddok), f("%.0f", nd, ndok), f("%.0f", ad, adok), ratio(ad, nd, adok && ndok))
	acPaced, ncPaced, cpuOK := cpuRow("paced", "CPU s of the proxy per 1M events, paced")
	simRow("paced", "(agentsim CPU s per 1M events, paced, for scale)")
	row(append([]string{"errors, paced"}, errorsOf(p("direct")), errorsOf(p("nginx")), errorsOf(p("aguard")), dash)...)

	// Idle memory.
	i := func(t string) *result { return get("idle-" + t) }
	iStreams := 0
	if r := i("aguard"); r != nil {
		iStreams = r.Streams
	}
	mem := func(t, name string) (float64, bool) {
		_, _, v, ok := i(t).proc(name)
		return v, ok
	}
	nm, nmok := mem("nginx", "proxy")
	am, amok := mem("aguard", "proxy")
	row(fmt.Sprintf("RSS of the proxy per 1,000 idle open streams, MiB (%d opened)", iStreams), dash,
		f("%.1f", nm*1000/1024, nmok), f("%.1f", am*1000/1024, amok), ratio(am, nm, amok && nmok))
	row("… per idle stream, KiB", dash, f("%.1f", nm, nmok), f("%.1f", am, amok), ratio(am, nm, amok && nmok))
	sm, smok := mem("direct", "agentsim")
	row("(agentsim RSS per idle stream, KiB, for scale)", f("%.1f", sm, smok), dash, dash, dash)
	row(append([]string{"errors, idle"}, errorsOf(i("direct")), errorsOf(i("nginx")), errorsOf(i("aguard")), dash)...)
	row("aguard with Redis (ledger)", dash, dash, "**not yet measurable (no `--redis` flag)**", dash)

	fmt.Fprintln(w)
	fmt.Fprintln(w, "Machine noise before each measurement (1-min load average; CPUs busy over 3 s with the benchmark's processes idle):")
	fmt.Fprintln(w)
	row("phase", "direct", "nginx", "aguard")
	row("---", "---", "---", "---")
	for _, phase := range []string{"idle", "unpaced", "paced"} {
		var cells []string
		for _, t := range targets {
			r := get(phase + "-" + t)
			switch {
			case r == nil:
				cells = append(cells, dash)
			case r.Noise != "":
				cells = append(cells, r.Noise)
			default:
				cells = append(cells, "load "+r.LoadAvgStart)
			}
		}
		row(append([]string{phase}, cells...)...)
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "Targets (from the issue):")
	fmt.Fprintln(w)
	met := func(ok, known bool) string {
		switch {
		case !known:
			return "not measured"
		case ok:
			return "**met**"
		default:
			return "**missed**"
		}
	}
	fmt.Fprintf(w, "- aguard CPU per event ≤ 1.5× nginx on pass-through traffic (paced load): %s — %s\n",
		ratio(acPaced, ncPaced, cpuOK), met(cpuOK && acPaced <= 1.5*ncPaced, cpuOK))
	au, _, _, uok1 := get("unpaced-aguard").proc("proxy")
	nu, _, _, uok2 := get("unpaced-nginx").proc("proxy")
	fmt.Fprintf(w, "  - at the unpaced load: %s — %s\n", ratio(au, nu, uok1 && uok2), met(uok1 && uok2 && au <= 1.5*nu, uok1 && uok2))
	fmt.Fprintf(w, "- added p99 latency at the paced load within 1 ms of nginx's: %s — %s\n",
		f("%+.3f ms", a99-n99, aok && nok), met(aok && nok && a99-n99 <= 1, aok && nok))
	fmt.Fprintf(w, "- memory per idle stream under 32 KiB: %s — %s\n", f("%.1f KiB", am, amok), met(amok && am < 32, amok))
	if ddok && pStreams > 0 && dd < 0.9*float64(pStreams)*pacedRate {
		fmt.Fprintf(w, "\nNote: the direct paced run delivered %.0f events/s of the %.0f offered: this machine could not generate the paced load in full.\n",
			dd, float64(pStreams)*pacedRate)
	}
}

// Command benchplot draws the figures of a bench/run.sh run as PNG images
// beside its raw results (gonum.org/v1/plot):
//
//   - latency-cdf-paced.png, latency-cdf-tools.png: the distribution of the
//     latency agent→consumer of each target in the paced pass-through phase
//     and the tool-call workload, its tail on a scale of nines;
//   - cpu-per-event-vs-streams.png: each proxy's CPU per event against the
//     number of streams sharing one event rate (the sweep phase);
//   - idle-rss-vs-streams.png: each proxy's memory against the number of
//     idle streams held open (the idlesweep phase), with the 20 KiB per
//     stream target drawn for reference.
//
// A figure whose results are missing is not drawn.
//
//	benchplot -dir bench/results/2026-11-30
package main

import (
	"errors"
	"flag"
	"fmt"
	"image/color"
	"log"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/aguard/aguard/bench/internal/loadresult"
)

// result is one of loadgen's results, with the figures drawn from it.
type result struct{ *loadresult.Result }

func (r *result) proxyCPU() (float64, bool) {
	for _, p := range r.Procs {
		if p.Name == "proxy" && r.Events > 0 {
			return p.CPUPerMEvents, true
		}
	}
	return 0, false
}

// proxyRSSAddedMiB is the proxy's RSS with the streams open minus before.
func (r *result) proxyRSSAddedMiB() (float64, bool) {
	for _, p := range r.Procs {
		if p.Name == "proxy" && r.Opened == r.Streams {
			return float64(p.RSSAfterKiB-p.RSSBeforeKiB) / 1024, true
		}
	}
	return 0, false
}

var targets = []string{"direct", "nginx", "aguard", "aguard-redis", "aguard-ledger"}

func main() {
	dir := flag.String("dir", "", "folder of run.sh's raw results (required); the images are written there")
	flag.Parse()
	if *dir == "" {
		log.Fatal("benchplot: -dir is required")
	}
	var drawn []string
	for _, f := range []struct {
		name string
		draw func(dir string) (*plot.Plot, error)
	}{
		{"latency-cdf-paced.png", func(d string) (*plot.Plot, error) {
			return latencyCDF(d, "paced", "Latency agent→consumer, paced pass-through")
		}},
		{"latency-cdf-tools.png", func(d string) (*plot.Plot, error) {
			return latencyCDF(d, "tools", "Latency agent→consumer, tool-call workload")
		}},
		{"cpu-per-event-vs-streams.png", cpuVsStreams},
		{"idle-rss-vs-streams.png", idleVsStreams},
	} {
		p, err := f.draw(*dir)
		if errors.Is(err, errNoData) {
			continue
		}
		if err != nil {
			log.Fatalf("benchplot: %s: %v", f.name, err)
		}
		out := filepath.Join(*dir, f.name)
		if err := p.Save(16*vg.Centimeter, 10*vg.Centimeter, out); err != nil {
			log.Fatalf("benchplot: %v", err)
		}
		drawn = append(drawn, f.name)
	}
	fmt.Fprintf(os.Stderr, "benchplot: drew %s in %s\n", strings.Join(drawn, ", "), *dir)
}

var errNoData = errors.New("no results for this figure")

func load(path string) (*result, error) {
	lr, err := loadresult.Load(path)
	if lr == nil || err != nil {
		return nil, err
	}
	return &result{lr}, nil
}

// nines maps a quantile to −log10(1 − q): 90 % is 1, 99 % is 2, and so on.
func nines(q float64) float64 { return -math.Log10(1 - q) }

// latencyCDF draws one line per target: latency (log scale) against the
// quantile on a scale of nines, the maximum at 1 − 1/samples.
func latencyCDF(dir, phase, title string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "latency, ms (log scale)"
	p.Y.Label.Text = "share of events at most this late"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Tick.Marker = plot.ConstantTicks{
		{Value: nines(0.5), Label: "50 %"}, {Value: 1, Label: "90 %"}, {Value: 2, Label: "99 %"},
		{Value: 3, Label: "99.9 %"}, {Value: 4, Label: "99.99 %"}, {Value: 5, Label: "99.999 %"},
	}
	p.Legend.Top, p.Legend.Left = true, true
	var lines []any
	for _, t := range targets {
		r, err := load(filepath.Join(dir, phase+"-"+t+".json"))
		if err != nil {
			return nil, err
		}
		if r == nil || r.Latency == nil || len(r.Latency.CDF) == 0 {
			continue
		}
		var xys plotter.XYs
		for _, pt := range r.Latency.CDF {
			y := 0.0
			switch {
			case pt.Q >= 1:
				y = math.Log10(float64(r.Latency.Samples))
			case pt.Q > 0:
				y = nines(pt.Q)
			}
			xys = append(xys, plotter.XY{X: math.Max(pt.Ms, 1e-3), Y: y})
		}
		lines = append(lines, t, xys)
	}
	if len(lines) == 0 {
		return nil, errNoData
	}
	return p, plotutil.AddLines(p, lines...)
}

// sweep reads prefix-n<count>-<target>.json for the given targets: count →
// result, per target.
func sweep(dir, prefix string, ts []string) (map[string]map[int]*result, []int, error) {
	names, err := filepath.Glob(filepath.Join(dir, prefix+"-n*.json"))
	if err != nil {
		return nil, nil, err
	}
	out := map[string]map[int]*result{}
	var ns []int
	for _, name := range names {
		count, target, ok := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(name), prefix+"-n"), ".json"), "-")
		n, err := strconv.Atoi(count)
		if !ok || err != nil || !slices.Contains(ts, target) {
			continue
		}
		r, err := load(name)
		if err != nil {
			return nil, nil, err
		}
		if out[target] == nil {
			out[target] = map[int]*result{}
		}
		out[target][n] = r
		if !slices.Contains(ns, n) {
			ns = append(ns, n)
		}
	}
	slices.Sort(ns)
	return out, ns, nil
}

// cpuVsStreams draws each proxy's CPU per event against the stream count,
// with ±15 % of aguard's mean dashed (the target's band).
func cpuVsStreams(dir string) (*plot.Plot, error) {
	byT, ns, err := sweep(dir, "sweep", []string{"nginx", "aguard"})
	if err != nil {
		return nil, err
	}
	p := plot.New()
	p.Title.Text = "Proxy CPU per event against open streams (one total event rate)"
	p.X.Label.Text = "streams (log scale)"
	p.Y.Label.Text = "CPU s per 1M events"
	p.X.Scale = plot.LogScale{}
	var ticks plot.ConstantTicks
	for _, n := range ns {
		ticks = append(ticks, plot.Tick{Value: float64(n), Label: strconv.Itoa(n)})
	}
	p.X.Tick.Marker = ticks
	p.Y.Min = 0
	p.Legend.Top, p.Legend.Left = false, false
	var lines []any
	var aguard []float64
	for _, t := range []string{"nginx", "aguard"} {
		var xys plotter.XYs
		for _, n := range ns {
			if r := byT[t][n]; r != nil {
				if v, ok := r.proxyCPU(); ok {
					xys = append(xys, plotter.XY{X: float64(n), Y: v})
					if t == "aguard" {
						aguard = append(aguard, v)
					}
				}
			}
		}
		if len(xys) > 0 {
			lines = append(lines, t, xys)
		}
	}
	if len(lines) == 0 {
		return nil, errNoData
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return nil, err
	}
	if len(aguard) > 0 && len(ns) > 1 {
		mean := 0.0
		for _, v := range aguard {
			mean += v
		}
		mean /= float64(len(aguard))
		for i, f := range []float64{0.85, 1.15} {
			l, err := plotter.NewLine(plotter.XYs{{X: float64(ns[0]), Y: mean * f}, {X: float64(ns[len(ns)-1]), Y: mean * f}})
			if err != nil {
				return nil, err
			}
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			l.Color = color.Gray{Y: 128}
			p.Add(l)
			if i == 0 {
				p.Legend.Add("aguard mean ±15 %", l)
			}
		}
	}
	return p, nil
}

// idleVsStreams draws each proxy's added RSS against the idle streams held
// open, with 20 KiB per stream dashed (the target).
func idleVsStreams(dir string) (*plot.Plot, error) {
	byT, ns, err := sweep(dir, "idle", []string{"nginx", "aguard"})
	if err != nil {
		return nil, err
	}
	p := plot.New()
	p.Title.Text = "Proxy memory against idle streams held open"
	p.X.Label.Text = "idle streams"
	p.Y.Label.Text = "RSS added, MiB"
	p.X.Min, p.Y.Min = 0, 0
	p.Legend.Top, p.Legend.Left = true, true
	var ticks plot.ConstantTicks
	for _, n := range append([]int{0}, ns...) {
		ticks = append(ticks, plot.Tick{Value: float64(n), Label: strconv.Itoa(n)})
	}
	p.X.Tick.Marker = ticks
	var lines []any
	for _, t := range []string{"nginx", "aguard"} {
		xys := plotter.XYs{{X: 0, Y: 0}}
		for _, n := range ns {
			if r := byT[t][n]; r != nil {
				if v, ok := r.proxyRSSAddedMiB(); ok {
					xys = append(xys, plotter.XY{X: float64(n), Y: v})
				}
			}
		}
		if len(xys) > 1 {
			lines = append(lines, t, xys)
		}
	}
	if len(lines) == 0 {
		return nil, errNoData
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return nil, err
	}
	top := float64(ns[len(ns)-1])
	l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: top, Y: top * 20 / 1024}})
	if err != nil {
		return nil, err
	}
	l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	l.Color = color.Gray{Y: 128}
	p.Add(l)
	p.Legend.Add("20 KiB per stream (target)", l)
	return p, nil
}

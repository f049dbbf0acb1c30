// Command loadgen drives AG-UI event streams against a URL and measures what
// the consumer sees.
//
// Stream mode (the default) keeps -streams runs open at once: each POSTs a
// RunAgentInput (protocolVersion "1.0", advertising -tools), reads the SSE
// frames, and starts a new run when one ends, until -duration has passed or
// -max-runs runs were started. It reports the events delivered per second,
// errors, and the latency of each TEXT_MESSAGE_CONTENT whose delta starts with
// agentsim's send stamp "t=<unix nanos>;" (receive time minus send time, one
// clock: run everything on one machine) as quantiles, and as a CDF (a
// quantile list, log-spaced in its tail) for plotting. Only events received
// inside the measuring window (after -ramp and -warmup) count.
//
// Idle mode (-idle) opens -streams streams whose agent stays silent (the URL
// should ask agentsim for idle=true), waits until each has received its
// first event, lets the processes settle, and reports the resident memory of
// the -watch processes before and with the streams open.
//
// -watch name=pid (repeatable) accounts a process and its direct children:
// CPU seconds over the window, and RSS.
//
// Every mode counts the connections loadgen opens (what runs cost a
// consumer, or the ingress in front of the proxy); with -agent-stats
// (agentsim's GET /stats) it also counts those the agent accepted and the
// runs it served meanwhile (what they cost the agent). -pause leaves a gap
// between a stream's runs, as bursty traffic does.
//
//	loadgen -url 'http://127.0.0.1:18402/agent?events=1000000' -streams 50 -duration 10s
//	loadgen -url 'http://127.0.0.1:18402/agent?idle=true' -idle -streams 1000 -watch proxy=1234
//	loadgen -url 'http://127.0.0.1:18403/agent?events=20' -streams 20 -pause 2s -agent-stats http://127.0.0.1:18401/stats
//
// Only loopback URLs are accepted.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aguard/aguard/bench/internal/loadresult"
)

// options are loadgen's flags.
type options struct {
	url      string
	streams  int
	duration time.Duration
	warmup   time.Duration
	ramp     time.Duration
	maxRuns  int64
	tools    string
	legacy   bool
	idle     bool
	settle   time.Duration
	openWait time.Duration
	hold     time.Duration
	ready    string
	label    string
	threads  string // threadId prefix
	jsonOut  bool
	watch    []watched
	pause    time.Duration
	agent    string // agentsim's /stats URL
}

func main() {
	var o options
	flag.StringVar(&o.url, "url", "http://127.0.0.1:18401/agent", "AG-UI endpoint (loopback only); query parameters shape agentsim's runs")
	flag.IntVar(&o.streams, "streams", 50, "concurrent streams")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "measuring window (stream mode)")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "time after the ramp before the window opens")
	flag.DurationVar(&o.ramp, "ramp", time.Second, "stream starts are spread over this time")
	flag.Int64Var(&o.maxRuns, "max-runs", 1_000_000, "most runs started in all")
	flag.StringVar(&o.tools, "tools", "bench_frontend_tool", "comma-separated tool names advertised in the RunAgentInput")
	flag.BoolVar(&o.legacy, "legacy", false, "omit protocolVersion (a 0.x consumer)")
	flag.BoolVar(&o.idle, "idle", false, "idle mode: open -streams silent streams and measure memory")
	flag.DurationVar(&o.settle, "settle", 2*time.Second, "idle mode: wait after the last stream opened before sampling memory")
	flag.DurationVar(&o.openWait, "open-timeout", 60*time.Second, "idle mode: longest wait for all streams to open")
	flag.DurationVar(&o.hold, "hold", 0, "idle mode: keep the streams open this long after sampling memory")
	flag.StringVar(&o.ready, "ready-file", "", "idle mode: create this file once memory was sampled with the streams open")
	flag.StringVar(&o.label, "label", "", "label carried into the output")
	flag.StringVar(&o.threads, "thread-prefix", "loadgen-thread-", "threadId of run n is this prefix and n: another prefix keeps a second run of loadgen off the threads (and pending calls) of the first")
	flag.BoolVar(&o.jsonOut, "json", false, "write the result as JSON instead of a table")
	flag.DurationVar(&o.pause, "pause", 0, "stream mode: wait this long between a stream's runs")
	flag.StringVar(&o.agent, "agent-stats", "", "agentsim's /stats URL (loopback only): count the connections the agent accepted and the runs it served")
	flag.Func("watch", "name=pid of a process to account (with its direct children); repeatable", func(s string) error {
		w, err := parseWatch(s)
		if err == nil {
			o.watch = append(o.watch, w)
		}
		return err
	})
	flag.Parse()

	if err := checkURL(o.url); err != nil {
		log.Fatalf("loadgen: -url: %v", err)
	}
	if o.agent != "" {
		if err := checkURL(o.agent); err != nil {
			log.Fatalf("loadgen: -agent-stats: %v", err)
		}
	}
	if o.streams <= 0 {
		log.Fatal("loadgen: -streams must be positive")
	}
	var res *loadresult.Result
	var err error
	if o.idle {
		res, err = runIdle(&o)
	} else {
		res, err = runStreams(&o)
	}
	if err != nil {
		log.Fatalf("loadgen: %v", err)
	}
	if o.jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			log.Fatalf("loadgen: writing the result: %v", err)
		}
		return
	}
	printTable(os.Stdout, res)
}

// checkURL accepts http URLs on loopback only.
func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "http" {
		return fmt.Errorf("%q: want an http URL", s)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback address", host)
	}
	return nil
}

// readAgentStats reads agentsim's counts.
func readAgentStats(url string) (loadresult.AgentStats, error) {
	var a loadresult.AgentStats
	resp, err := http.Get(url)
	if err != nil {
		return a, fmt.Errorf("-agent-stats: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return a, fmt.Errorf("-agent-stats: %s answered %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return a, fmt.Errorf("-agent-stats: %w", err)
	}
	return a, nil
}

// countConns counts the connections a run opens: the consumer's own, and
// with -agent-stats, the agent's.
type countConns struct {
	url    string
	dialed atomic.Int64
	agent0 loadresult.AgentStats
}

func (c *countConns) begin() error {
	if c.url == "" {
		return nil
	}
	var err error
	c.agent0, err = readAgentStats(c.url)
	return err
}

func (c *countConns) end(res *loadresult.Result) error {
	res.ConsumerConns = c.dialed.Load()
	if c.url == "" {
		return nil
	}
	a, err := readAgentStats(c.url)
	if err != nil {
		return err
	}
	res.Agent = &loadresult.AgentStats{Connections: a.Connections - c.agent0.Connections, Runs: a.Runs - c.agent0.Runs}
	return nil
}

// cdfQuantiles are the quantiles a latency's CDF is given at: every 5 % of
// its body, then log-spaced in 1 − q (ten points per decade) down to
// 1 − q = 10⁻⁵, so the tail is drawn as finely as the body.
var cdfQuantiles = func() []float64 {
	qs := []float64{0.001, 0.01}
	for p := 5; p < 90; p += 5 {
		qs = append(qs, float64(p)/100)
	}
	for k := 10; k <= 50; k++ {
		qs = append(qs, 1-math.Pow(10, -float64(k)/10))
	}
	return qs
}()

// sampler reads the watched processes at the window's edges.
type sampler struct {
	procs  []loadresult.Proc
	cpu0   []cpuTime
	self   bool
	selfT0 float64
}

func newSampler(ws []watched) *sampler {
	s := &sampler{}
	for _, w := range ws {
		s.procs = append(s.procs, loadresult.Proc{Name: w.name, PIDs: family(w.pid)})
	}
	s.procs = append(s.procs, loadresult.Proc{Name: "loadgen", PIDs: []int{os.Getpid()}})
	return s
}

func (s *sampler) begin() error {
	s.cpu0 = s.cpu0[:0]
	for i := range s.procs {
		c, err := cpuTimes(s.procs[i].PIDs)
		if err != nil {
			return err
		}
		r, err := rssKiB(s.procs[i].PIDs)
		if err != nil {
			return err
		}
		s.cpu0 = append(s.cpu0, c)
		s.procs[i].RSSBeforeKiB = r
	}
	return nil
}

func (s *sampler) end(events int64, streams int) error {
	for i := range s.procs {
		p := &s.procs[i]
		c, err := cpuTimes(p.PIDs)
		if err != nil {
			return err
		}
		r, err := rssKiB(p.PIDs)
		if err != nil {
			return err
		}
		c0 := s.cpu0[i]
		p.CPUSeconds = c.total() - c0.total()
		p.UserSeconds, p.SystemSeconds = c.user-c0.user, c.system-c0.system
		if events > 0 {
			p.CPUPerMEvents = p.CPUSeconds / float64(events) * 1e6
			p.UserPerMEvents = p.UserSeconds / float64(events) * 1e6
			p.SystemPerMEvents = p.SystemSeconds / float64(events) * 1e6
		}
		p.RSSAfterKiB = r
		if streams > 0 {
			p.RSSPerStreamKB = float64(r-p.RSSBeforeKiB) / float64(streams)
		}
	}
	return nil
}

// counters are shared by all streams.
type counters struct {
	mu      sync.Mutex
	errors  map[string]int
	samples []int64 // latency in ns, window only

	runsStarted atomic.Int64
	runsDone    atomic.Int64
	events      atomic.Int64
	eventsTotal atomic.Int64
}

func (c *counters) fail(kind string) {
	c.mu.Lock()
	c.errors[kind]++
	c.mu.Unlock()
}

// runBody builds the RunAgentInput of run n.
func runBody(o *options, n int64) []byte {
	var tools []map[string]any
	for name := range strings.SplitSeq(o.tools, ",") {
		if name = strings.TrimSpace(name); name != "" {
			tools = append(tools, map[string]any{"name": name, "description": "loadgen tool", "parameters": map[string]any{"type": "object"}})
		}
	}
	in := map[string]any{
		"threadId": o.threads + strconv.FormatInt(n, 10), "runId": "loadgen-run-" + strconv.FormatInt(n, 10),
		"messages": []any{map[string]any{"id": "u1", "role": "user", "content": "go"}},
		"tools":    tools, "context": []any{}, "state": map[string]any{}, "forwardedProps": map[string]any{},
	}
	if tools == nil {
		in["tools"] = []any{}
	}
	if !o.legacy {
		in["protocolVersion"] = "1.0"
	}
	b, _ := json.Marshal(in)
	return b
}

func newClient(streams int, cc *countConns) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err == nil {
				cc.dialed.Add(1)
			}
			return c, err
		},
		MaxIdleConns:        streams,
		MaxIdleConnsPerHost: streams,
		DisableCompression:  true,
		// Headers within 30 s; the body is read as long as the run lasts.
		ResponseHeaderTimeout: 30 * time.Second,
	}}
}

// window is the measuring window, fixed before the streams start.
type window struct{ start, end time.Time }

func (w window) in(t time.Time) bool { return !t.Before(w.start) && t.Before(w.end) }

// runStreams is stream mode.
func runStreams(o *options) (*loadresult.Result, error) {
	c := &counters{errors: map[string]int{}}
	cc := &countConns{url: o.agent}
	if err := cc.begin(); err != nil {
		return nil, err
	}
	client := newClient(o.streams, cc)
	s := newSampler(o.watch)
	t0 := time.Now()
	win := window{start: t0.Add(o.ramp + o.warmup)}
	win.end = win.start.Add(o.duration)
	ctx, cancel := context.WithDeadline(context.Background(), win.end)
	defer cancel()
	res := &loadresult.Result{Label: o.label, Mode: "streams", URL: o.url, Streams: o.streams, WindowS: o.duration.Seconds(), LoadAvgStart: loadAvg()}

	var wg sync.WaitGroup
	for i := range o.streams {
		delay := time.Duration(int64(o.ramp) * int64(i) / int64(o.streams))
		wg.Go(func() {
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return
			}
			var local []int64
			for first := true; ctx.Err() == nil; first = false {
				if !first && o.pause > 0 {
					select {
					case <-time.After(o.pause):
					case <-ctx.Done():
						continue
					}
				}
				n := c.runsStarted.Add(1)
				if n > o.maxRuns {
					break
				}
				local = streamOnce(ctx, o, client, c, n, win, local, nil)
			}
			c.mu.Lock()
			c.samples = append(c.samples, local...)
			c.mu.Unlock()
		})
	}

	time.Sleep(time.Until(win.start))
	if err := s.begin(); err != nil {
		cancel()
		wg.Wait()
		return nil, err
	}
	<-ctx.Done()
	err := s.end(c.events.Load(), 0)
	res.LoadAvgEnd = loadAvg()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	res.RunsStarted = min(c.runsStarted.Load(), o.maxRuns)
	res.RunsDone = c.runsDone.Load()
	res.Events, res.EventsTotal = c.events.Load(), c.eventsTotal.Load()
	res.EventsPerSec = float64(res.Events) / o.duration.Seconds()
	res.Errors = c.errors
	res.Latency = summarise(c.samples)
	res.Procs = s.procs
	client.CloseIdleConnections()
	return res, cc.end(res)
}

// runIdle is idle mode.
func runIdle(o *options) (*loadresult.Result, error) {
	c := &counters{errors: map[string]int{}}
	cc := &countConns{url: o.agent}
	if err := cc.begin(); err != nil {
		return nil, err
	}
	client := newClient(o.streams, cc)
	s := newSampler(o.watch)
	res := &loadresult.Result{Label: o.label, Mode: "idle", URL: o.url, Streams: o.streams, LoadAvgStart: loadAvg()}
	// Let the processes' memory settle from whatever came before.
	time.Sleep(o.settle)
	if err := s.begin(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.ramp+o.openWait+o.settle+o.hold+30*time.Second)
	defer cancel()
	var opened sync.WaitGroup
	var nOpened atomic.Int64
	opened.Add(o.streams)
	var wg sync.WaitGroup
	for i := range o.streams {
		delay := time.Duration(int64(o.ramp) * int64(i) / int64(o.streams))
		wg.Go(func() {
			var once sync.Once
			first := func() { once.Do(func() { nOpened.Add(1); opened.Done() }) }
			defer once.Do(opened.Done) // failed before its first event
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return
			}
			c.runsStarted.Add(1)
			streamOnce(ctx, o, client, c, int64(i), window{}, nil, first)
		})
	}
	done := make(chan struct{})
	go func() { opened.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(o.ramp + o.openWait):
	}
	time.Sleep(o.settle)
	res.Opened = int(nOpened.Load())
	err := s.end(0, res.Opened)
	res.LoadAvgEnd = loadAvg()
	if o.ready != "" {
		if werr := os.WriteFile(o.ready, []byte(strconv.Itoa(res.Opened)+"\n"), 0o644); werr != nil && err == nil {
			err = fmt.Errorf("-ready-file: %w", werr)
		}
	}
	time.Sleep(o.hold)
	cancel()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	res.RunsStarted = c.runsStarted.Load()
	res.EventsTotal = c.eventsTotal.Load()
	res.Errors = c.errors
	res.Procs = s.procs
	return res, cc.end(res)
}

var (
	stampKey    = []byte(`"delta":"t=`)
	typeError   = []byte(`"type":"RUN_ERROR"`)
	typeFinish  = []byte(`"type":"RUN_FINISHED"`)
	dataPrefix  = []byte("data:")
	codePattern = []byte(`"code":"`)
)

// streamOnce runs one stream to its end or to ctx's. It appends the window's
// latency samples to samples and returns it; first, if set, is called on the
// first event.
func streamOnce(ctx context.Context, o *options, client *http.Client, c *counters, n int64, win window, samples []int64, first func()) []int64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.url, bytes.NewReader(runBody(o, n)))
	if err != nil {
		c.fail("request: " + err.Error())
		return samples
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			c.fail("connect")
		}
		return samples
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		c.fail("status " + strconv.Itoa(resp.StatusCode))
		return samples
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	finished := false
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// An event larger than the buffer: count it, skip the rest.
			err = skipLine(br)
			if err == nil && bytes.HasPrefix(line, dataPrefix) {
				c.eventsTotal.Add(1)
				if win.in(time.Now()) {
					c.events.Add(1)
				}
				continue
			}
		}
		if err != nil {
			switch {
			case ctx.Err() != nil:
			case errors.Is(err, io.EOF) && finished:
				c.runsDone.Add(1)
			case errors.Is(err, io.EOF):
				c.fail("stream ended without RUN_FINISHED")
			default:
				c.fail("read: " + err.Error())
			}
			return samples
		}
		if !bytes.HasPrefix(line, dataPrefix) {
			continue // blank line ending a frame, or a ": ping" comment
		}
		now := time.Now()
		c.eventsTotal.Add(1)
		if first != nil {
			first()
		}
		if !win.in(now) {
			if bytes.Contains(line, typeFinish) {
				finished = true
			}
			continue
		}
		c.events.Add(1)
		if i := bytes.Index(line, stampKey); i >= 0 {
			if sent, ok := parseStamp(line[i+len(stampKey):]); ok {
				samples = append(samples, now.UnixNano()-sent)
			}
			continue
		}
		switch {
		case bytes.Contains(line, typeFinish):
			finished = true
		case bytes.Contains(line, typeError):
			code := "?"
			if j := bytes.Index(line, codePattern); j >= 0 {
				rest := line[j+len(codePattern):]
				if k := bytes.IndexByte(rest, '"'); k >= 0 {
					code = string(rest[:k])
				}
			}
			c.fail("RUN_ERROR " + code)
		}
	}
}

// skipLine consumes the rest of an over-long line.
func skipLine(br *bufio.Reader) error {
	for {
		_, err := br.ReadSlice('\n')
		if !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}

// parseStamp reads the decimal digits up to ';'.
func parseStamp(b []byte) (int64, bool) {
	var v int64
	for i, ch := range b {
		switch {
		case ch >= '0' && ch <= '9':
			v = v*10 + int64(ch-'0')
		case ch == ';' && i > 0:
			return v, true
		default:
			return 0, false
		}
	}
	return 0, false
}

func summarise(ns []int64) *loadresult.Latency {
	if len(ns) == 0 {
		return nil
	}
	slices.Sort(ns)
	q := func(p float64) float64 {
		i := int(p * float64(len(ns)-1))
		return float64(ns[i]) / 1e6
	}
	l := &loadresult.Latency{Samples: len(ns), P50: q(0.50), P90: q(0.90), P99: q(0.99), P999: q(0.999), Max: float64(ns[len(ns)-1]) / 1e6}
	for _, p := range cdfQuantiles {
		// A quantile finer than the samples can resolve is left out.
		if (1-p)*float64(len(ns)) >= 1 {
			l.CDF = append(l.CDF, loadresult.CDFPoint{Q: p, Ms: q(p)})
		}
	}
	l.CDF = append(l.CDF, loadresult.CDFPoint{Q: 1, Ms: l.Max})
	return l
}

func printTable(w io.Writer, r *loadresult.Result) {
	fmt.Fprintf(w, "%s %s  streams=%d  load %s -> %s\n", r.Mode, r.URL, r.Streams, r.LoadAvgStart, r.LoadAvgEnd)
	if r.Mode == "idle" {
		fmt.Fprintf(w, "opened %d of %d\n", r.Opened, r.Streams)
	} else {
		fmt.Fprintf(w, "runs started %d, completed %d; events in window %d (%.0f/s), in all %d\n",
			r.RunsStarted, r.RunsDone, r.Events, r.EventsPerSec, r.EventsTotal)
	}
	if l := r.Latency; l != nil {
		fmt.Fprintf(w, "latency ms: p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f  (%d samples)\n", l.P50, l.P90, l.P99, l.P999, l.Max, l.Samples)
	}
	for k, v := range r.Errors {
		fmt.Fprintf(w, "error %q: %d\n", k, v)
	}
	fmt.Fprintf(w, "connections opened by the consumer: %d", r.ConsumerConns)
	if a := r.Agent; a != nil {
		fmt.Fprintf(w, "; accepted by the agent: %d, for %d runs", a.Connections, a.Runs)
		if a.Runs > 0 {
			fmt.Fprintf(w, " (per run: consumer %.3f, agent %.3f)", float64(r.ConsumerConns)/float64(a.Runs), float64(a.Connections)/float64(a.Runs))
		}
	}
	fmt.Fprintln(w)
	for _, p := range r.Procs {
		fmt.Fprintf(w, "%-10s pids %v  cpu %.2f s (%.2f s per 1M events; user %.2f, system %.2f)  rss %d -> %d KiB", p.Name, p.PIDs, p.CPUSeconds, p.CPUPerMEvents, p.UserPerMEvents, p.SystemPerMEvents, p.RSSBeforeKiB, p.RSSAfterKiB)
		if r.Mode == "idle" {
			fmt.Fprintf(w, "  (%.1f KiB per stream)", p.RSSPerStreamKB)
		}
		fmt.Fprintln(w)
	}
}

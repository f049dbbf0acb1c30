// Command aguardprof runs aguard's data plane in-process, built as aguard
// serve builds it (proxy.New with the built-in default policy, Prometheus
// metrics, a JSON log written in batches, GOMAXPROCS fitted to the load), with
// runtime/pprof profiles: aguard itself has no pprof endpoint.
// bench/profile.sh drives it with agentsim and loadgen.
//
//	aguardprof -upstream http://127.0.0.1:18401 -listen 127.0.0.1:18403 -cpuprofile cpu.pprof
//
// The CPU profile runs from start to SIGTERM/SIGINT. SIGUSR1 writes a heap
// profile to -memprofile and a line of runtime figures (goroutines, heap and
// stack in use) to stderr: send it while idle streams are open to see what
// one stream holds. Listens on loopback only.
//
// -trace FILE writes an execution trace (runtime/trace, read with go tool
// trace) of -trace-for, starting -trace-after the start: which goroutines
// ran when, and when the process had nothing to run.
//
// -ledger wires the tool-call ledger (state.Open, in-process LRU) into the
// proxy as proxy.Options.State, as aguard serve always does, and -redis URL
// puts it in front of that Redis, as aguard serve --redis does: the profile
// then shows the ledger's share.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"syscall"
	"time"

	"github.com/aguard/aguard/internal/logging"
	"github.com/aguard/aguard/internal/procs"
	"github.com/aguard/aguard/policy"
	"github.com/aguard/aguard/proxy"
	"github.com/aguard/aguard/state"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

func main() {
	upstream := flag.String("upstream", "http://127.0.0.1:18401", "agent server base URL")
	listen := flag.String("listen", "127.0.0.1:18403", "data-plane address (loopback only)")
	cpuPath := flag.String("cpuprofile", "", "write a CPU profile here (start to exit)")
	memPath := flag.String("memprofile", "", "write a heap profile here on SIGUSR1")
	logPath := flag.String("log", "", "JSON log file (default: discarded)")
	ledger := flag.Bool("ledger", false, "keep the tool-call ledger (in-process LRU) in the proxy")
	redisURL := flag.String("redis", "", "redis://127.0.0.1:PORT/DB: keep the ledger in front of this Redis (implies -ledger; loopback only)")
	tracePath := flag.String("trace", "", "write an execution trace here (runtime/trace)")
	traceAfter := flag.Duration("trace-after", 15*time.Second, "start the -trace this long after the start")
	traceFor := flag.Duration("trace-for", 8*time.Second, "how long the -trace runs")
	memRate := flag.Int("memprofilerate", runtime.MemProfileRate, "bytes per sampled allocation in the heap profile (1: every allocation, to count what one idle stream holds)")
	flag.Parse()
	runtime.MemProfileRate = *memRate

	host, _, err := net.SplitHostPort(*listen)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		log.Fatalf("aguardprof: -listen %q: want a loopback address", *listen)
	}
	var logw io.Writer = io.Discard
	if *logPath != "" {
		f, err := os.Create(*logPath)
		if err != nil {
			log.Fatalf("aguardprof: -log: %v", err)
		}
		defer f.Close()
		logw = f
	}
	// As aguard serve writes its log: JSON lines, in batches.
	batch := logging.Batch(logw)
	defer batch.Close()
	logger := logging.New("json", batch)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	engine, err := policy.New(ctx, policy.Options{Logger: logger})
	if err != nil {
		log.Fatalf("aguardprof: policy: %v", err)
	}
	popt := proxy.Options{Upstream: *upstream, Policy: engine, Logger: logger, Metrics: proxy.NewMetrics(reg)}
	if *ledger || *redisURL != "" {
		if *redisURL != "" {
			if err := checkRedisURL(*redisURL); err != nil {
				log.Fatalf("aguardprof: -redis: %v", err)
			}
		}
		store, err := state.Open(ctx, state.Options{RedisURL: *redisURL, Logger: logger, Registerer: reg})
		if err != nil {
			log.Fatalf("aguardprof: state: %v", err)
		}
		defer store.Close()
		popt.State = store
	}
	p, err := proxy.New(popt)
	if err != nil {
		log.Fatalf("aguardprof: %v", err)
	}
	// GOMAXPROCS fitted to the load, as aguard serve does.
	defer procs.Start(procs.Options{Wakeups: p.Wakeups, Logger: logger}).Stop()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("aguardprof: %v", err)
	}
	if *tracePath != "" {
		f, err := os.Create(*tracePath)
		if err != nil {
			log.Fatalf("aguardprof: -trace: %v", err)
		}
		go traceWindow(f, *traceAfter, *traceFor)
	}
	if *cpuPath != "" {
		f, err := os.Create(*cpuPath)
		if err != nil {
			log.Fatalf("aguardprof: -cpuprofile: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatalf("aguardprof: CPU profile: %v", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	go p.Serve(ln)
	log.Printf("aguardprof listening on %s, upstream %s", ln.Addr(), *upstream)

	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	for {
		select {
		case <-usr1:
			snapshot(*memPath)
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			p.Drain(dctx)
			cancel()
			p.Close()
			return
		}
	}
}

// checkRedisURL accepts redis:// URLs on loopback only.
func checkRedisURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "redis" {
		return fmt.Errorf("%q: want a redis:// URL", s)
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback address", u.Hostname())
	}
	return nil
}

// snapshot reports the runtime's figures and writes a heap profile. It
// collects twice first, as aguard serve's memtidy does once a burst is
// over: what sync.Pools held through the first collection goes at the
// second, so the profile shows what the streams hold, not the pools.
func snapshot(memPath string) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	fmt.Fprintf(os.Stderr, "aguardprof: goroutines %d, heap in use %d KiB, stack in use %d KiB, heap objects %d, sys %d KiB\n",
		runtime.NumGoroutine(), m.HeapInuse>>10, m.StackInuse>>10, m.HeapObjects, m.Sys>>10)
	if memPath == "" {
		return
	}
	f, err := os.Create(memPath)
	if err != nil {
		log.Printf("aguardprof: -memprofile: %v", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		log.Printf("aguardprof: heap profile: %v", err)
	}
	g, err := os.Create(memPath + ".goroutines")
	if err != nil {
		log.Printf("aguardprof: goroutine dump: %v", err)
		return
	}
	defer g.Close()
	if err := pprof.Lookup("goroutine").WriteTo(g, 1); err != nil {
		log.Printf("aguardprof: goroutine dump: %v", err)
	}
}

// traceWindow writes an execution trace of the window [after, after+d)
// from now to f, and closes it.
func traceWindow(f *os.File, after, d time.Duration) {
	defer f.Close()
	time.Sleep(after)
	if err := trace.Start(f); err != nil {
		log.Printf("aguardprof: -trace: %v", err)
		return
	}
	time.Sleep(d)
	trace.Stop()
	log.Printf("aguardprof: execution trace of %s written to %s", d, f.Name())
}

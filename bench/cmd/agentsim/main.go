// Command agentsim is a synthetic AG-UI 1.0 agent server for load tests.
//
// Every POST (any path) with a RunAgentInput is answered with a valid event
// stream: RUN_STARTED, text messages whose TEXT_MESSAGE_CONTENT deltas start
// with "t=<send time in Unix nanoseconds>;", optional tool calls, and
// RUN_FINISHED with the frontend calls left pending. The flags set the
// default shape; a request may override each with a query parameter of the
// same name (events, rate, delta, tools, args, frontend, idle). POST /hook
// is a webhook receiver: it reads the body and answers 204. GET /stats
// answers {"connections":N,"runs":M,"webhooks":W}: the connections
// accepted, the runs served and the webhooks received since the start, for
// counting what a run costs.
//
//	agentsim -listen 127.0.0.1:18401 -events 1000 -rate 20
//	agentsim -print -tools 2 -args 1024 -frontend   # write one run to stdout
//
// It listens on loopback only.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aguard/aguard/bench/internal/sim"
)

func main() {
	var cfg sim.Config
	listen := flag.String("listen", "127.0.0.1:18401", "address to listen on (must be loopback)")
	flag.IntVar(&cfg.Events, "events", 1000, "TEXT_MESSAGE_CONTENT events per run")
	flag.Float64Var(&cfg.Rate, "rate", 0, "events per second per stream (0: unpaced)")
	flag.IntVar(&cfg.Delta, "delta", 64, "bytes per content delta, send stamp included")
	flag.IntVar(&cfg.Tools, "tools", 0, "tool calls per run")
	flag.IntVar(&cfg.Args, "args", 1024, "bytes of JSON arguments per tool call")
	flag.BoolVar(&cfg.Frontend, "frontend", false, "make tool calls frontend calls ("+sim.FrontendTool+", left pending) instead of the agent's own")
	flag.BoolVar(&cfg.Idle, "idle", false, "send RUN_STARTED, then stay silent until the consumer leaves or -idle-hold runs out")
	flag.DurationVar(&cfg.IdleHold, "idle-hold", 10*time.Minute, "longest time an idle stream is held open")
	print := flag.Bool("print", false, "write one run to stdout (threadId t-1, runId r-1, unpaced) and exit")
	flag.Parse()

	if *print {
		cfg.Rate, cfg.Idle = 0, false
		w := bufio.NewWriter(os.Stdout)
		sim.Run(&printSink{w: w}, cfg, "t-1", "r-1")
		if err := w.Flush(); err != nil {
			log.Fatalf("agentsim: writing the run: %v", err)
		}
		return
	}

	if err := checkLoopback(*listen); err != nil {
		log.Fatalf("agentsim: -listen: %v", err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("agentsim: %v", err)
	}
	var conns, runs, hooks atomic.Int64
	runsHandler := sim.Handler(cfg)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"connections":%d,"runs":%d,"webhooks":%d}`+"\n", conns.Load(), runs.Load(), hooks.Load())
	})
	mux.HandleFunc("POST /hook", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		hooks.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			runs.Add(1)
		}
		runsHandler.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(c net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		}}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		srv.Close()
	}()
	log.Printf("agentsim listening on %s (events=%d rate=%g delta=%d tools=%d args=%d frontend=%v)",
		ln.Addr(), cfg.Events, cfg.Rate, cfg.Delta, cfg.Tools, cfg.Args, cfg.Frontend)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("agentsim: %v", err)
	}
}

// checkLoopback refuses to listen anywhere but on a loopback address.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback address", host)
	}
	return nil
}

// printSink writes a run's frames to a writer, unpaced.
type printSink struct{ w *bufio.Writer }

func (p *printSink) Frame(ev []byte) bool {
	p.w.WriteString("data: ")
	p.w.Write(ev)
	_, err := p.w.WriteString("\n\n")
	return err == nil
}

func (p *printSink) Wait() bool              { return true }
func (p *printSink) Idle(hold time.Duration) {}

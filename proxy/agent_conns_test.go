package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/valyala/fasthttp"
)

// idleClosingAgent is an agent server that closes keep-alive connections
// idle for longer than its own timeout, as Node, uvicorn and gunicorn do, and
// counts every run it receives by runId.
type idleClosingAgent struct {
	srv      *httptest.Server
	idle     time.Duration
	accepted atomic.Int64
	mu       sync.Mutex
	runs     map[string]int
}

func newIdleClosingAgent(t *testing.T, idle time.Duration) *idleClosingAgent {
	a := &idleClosingAgent{idle: idle, runs: map[string]int{}}
	a.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		run := between(string(b), `"runId":"`, `"`)
		a.mu.Lock()
		a.runs[run]++
		a.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, frame(`{"type":"RUN_STARTED","threadId":"t","runId":"`+run+`"}`))
		io.WriteString(w, frame(`{"type":"RUN_FINISHED","threadId":"t","runId":"`+run+`"}`))
	}))
	a.srv.Config.IdleTimeout = idle
	a.srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			a.accepted.Add(1)
		}
	}
	a.srv.Start()
	t.Cleanup(a.srv.Close)
	return a
}

// startProxy runs aguard with opt on loopback and returns its base URL.
func startProxy(t *testing.T, opt Options) (*Proxy, string) {
	t.Helper()
	if opt.Metrics == nil {
		opt.Metrics = NewMetrics(prometheus.NewRegistry())
	}
	p, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	t.Cleanup(func() { p.Close() })
	return p, "http://" + ln.Addr().String()
}

// runOnce posts one run and reports what went wrong, if anything.
func runOnce(client *http.Client, url, run string) error {
	resp, err := client.Post(url, "application/json", strings.NewReader(runInput("t", run)))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("run %s: reading the stream: %w", run, err)
	}
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"type":"RUN_FINISHED","threadId":"t","runId":"`+run+`"`) {
		return fmt.Errorf("run %s: %d %s", run, resp.StatusCode, b)
	}
	return nil
}

// TestNoRequestLostToAgentIdleClose runs aguard in front of agents that close
// idle keep-alive connections after 200 ms, 1 s and 2 s, and sends 1,000 runs
// with random gaps around those timeouts, some just before an agent closes
// an idle connection and some just after. No run may fail, and every agent
// must see every run exactly once.
//
// Each consumer has a route (and so a connection pool) of its own, so the
// gaps it leaves are the gaps its agent connections see. Half the consumers
// go through an aguard with the default --upstream-keepalive-timeout, half
// through one that keeps idle connections for 10 s (longer than every
// agent's timeout), where only noticing the agent's close protects them.
func TestNoRequestLostToAgentIdleClose(t *testing.T) {
	type group struct {
		idle      time.Duration
		consumers int
		runs      int // per consumer
	}
	groups := []group{{200 * time.Millisecond, 10, 50}, {time.Second, 20, 15}, {2 * time.Second, 25, 8}}
	agents := make([]*idleClosingAgent, len(groups))
	for i, g := range groups {
		agents[i] = newIdleClosingAgent(t, g.idle)
	}
	// Routes /c<consumer> to its group's agent, on both proxies.
	var routes []Route
	type consumer struct {
		route string
		agent *idleClosingAgent
		runs  int
	}
	var consumers []consumer
	for i, g := range groups {
		for range g.consumers {
			path := fmt.Sprintf("/c%d", len(consumers))
			routes = append(routes, Route{Path: path, Upstream: agents[i].srv.URL})
			consumers = append(consumers, consumer{path, agents[i], g.runs})
		}
	}
	pDefaults, defaults := startProxy(t, Options{Upstream: agents[0].srv.URL, Routes: routes})
	pLong, long := startProxy(t, Options{Upstream: agents[0].srv.URL, Routes: routes, UpstreamKeepalive: 10 * time.Second})

	var failures, total atomic.Int64
	var mu sync.Mutex
	var firstErrs []string
	sent := make(map[*idleClosingAgent]int)
	var wg sync.WaitGroup
	for i, c := range consumers {
		base := defaults
		if i%2 == 1 {
			base = long
		}
		mu.Lock()
		sent[c.agent] += c.runs
		mu.Unlock()
		wg.Go(func() {
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			for n := range c.runs {
				if n > 0 {
					// Around the agent's timeout: from half of it to half again.
					time.Sleep(time.Duration(float64(c.agent.idle) * (0.5 + rand.Float64())))
				}
				total.Add(1)
				if err := runOnce(client, base+c.route+"/run", fmt.Sprintf("%s-%d", c.route, n)); err != nil {
					failures.Add(1)
					mu.Lock()
					if len(firstErrs) < 5 {
						firstErrs = append(firstErrs, err.Error())
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if total.Load() != 1000 {
		t.Fatalf("sent %d runs, want 1000", total.Load())
	}
	if n := failures.Load(); n > 0 {
		t.Errorf("%d of 1000 runs failed; the first: %s", n, strings.Join(firstErrs, "\n"))
	}
	for i, a := range agents {
		a.mu.Lock()
		dup := 0
		for _, n := range a.runs {
			if n != 1 {
				dup++
			}
		}
		if len(a.runs) != sent[a] || dup > 0 {
			t.Errorf("agent closing after %s: got %d distinct runs of %d sent, %d of them more than once", a.idle, len(a.runs), sent[a], dup)
		}
		t.Logf("agent closing after %s: %d runs over %d connections", groups[i].idle, len(a.runs), a.accepted.Load())
		a.mu.Unlock()
	}
	for name, p := range map[string]*Proxy{"default keep-alive bound": pDefaults, "10 s keep-alive bound": pLong} {
		t.Logf("aguard with the %s: connections %s", name, connCounts(p.m))
	}
}

// connCounts renders aguard_upstream_connections_total and
// aguard_upstream_resends_total.
func connCounts(m *Metrics) string {
	var b strings.Builder
	for _, e := range connEvents {
		fmt.Fprintf(&b, "%s %v, ", e, counterValue(m.upstreamConns[e]))
	}
	fmt.Fprintf(&b, "resent %v", counterValue(m.upstreamResends))
	return b.String()
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	c.Write(&m)
	return m.GetCounter().GetValue()
}

// nodeAgent is a plain Node HTTP server with Node's default keep-alive
// timeout (5 s): it answers each run and counts them by runId; GET answers
// the counts.
const nodeAgent = `
const http = require('http');
const runs = {};
let accepted = 0;
const server = http.createServer((req, res) => {
  let body = '';
  req.on('data', (c) => { body += c; });
  req.on('end', () => {
    if (req.method === 'GET') {
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify({ runs, accepted }));
      return;
    }
    const m = /"runId":"([^"]*)"/.exec(body);
    const run = m ? m[1] : '?';
    runs[run] = (runs[run] || 0) + 1;
    res.writeHead(200, { 'Content-Type': 'text/event-stream' });
    res.write('data: {"type":"RUN_STARTED","threadId":"t","runId":"' + run + '"}\n\n');
    res.end('data: {"type":"RUN_FINISHED","threadId":"t","runId":"' + run + '"}\n\n');
  });
});
server.on('connection', () => { accepted++; });
server.listen(0, '127.0.0.1', () => { console.log(server.address().port); });
`

// TestNodeAgentIdleClose runs aguard in front of a real Node HTTP server,
// what most agent servers are, with Node's default keep-alive timeout, and
// sends runs with gaps around it. aguard keeps idle connections for a
// minute here, so only what it learns from Node (its Keep-Alive header, its
// closes) keeps a run off a connection Node has closed.
func TestNodeAgentIdleClose(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: the interop tests need it too")
	}
	script := filepath.Join(t.TempDir(), "agent.js")
	if err := os.WriteFile(script, []byte(nodeAgent), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, script)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	port, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("node did not start: %v", err)
	}
	agentURL := "http://127.0.0.1:" + strings.TrimSpace(port)

	gaps := []time.Duration{4500 * time.Millisecond, 4900 * time.Millisecond, 5100 * time.Millisecond, 5500 * time.Millisecond, 6500 * time.Millisecond}
	var routes []Route
	for i := range gaps {
		routes = append(routes, Route{Path: fmt.Sprintf("/g%d", i), Upstream: agentURL})
	}
	p, base := startProxy(t, Options{Upstream: agentURL, Routes: routes, UpstreamKeepalive: time.Minute})
	errs := make(chan error, 3*len(gaps))
	var wg sync.WaitGroup
	for i, gap := range gaps {
		wg.Go(func() {
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			for n := range 3 {
				if n > 0 {
					time.Sleep(gap)
				}
				if err := runOnce(client, fmt.Sprintf("%s/g%d/run", base, i), fmt.Sprintf("g%d-%d", i, n)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	resp, err := http.Get(agentURL + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var stats struct {
		Runs     map[string]int
		Accepted int
	}
	if err := json.NewDecoder(resp.Body).Decode(&stats); err != nil {
		t.Fatal(err)
	}
	if len(stats.Runs) != 3*len(gaps) {
		t.Errorf("node saw %d runs, want %d", len(stats.Runs), 3*len(gaps))
	}
	for run, n := range stats.Runs {
		if n != 1 {
			t.Errorf("node saw run %s %d times", run, n)
		}
	}
	t.Logf("node: %d runs over %d connections (one of them the test's own); aguard: %s", len(stats.Runs), stats.Accepted, connCounts(p.m))
}

// TestRunTheAgentMayHaveReadIsNotSentTwice pins the other side of retrying:
// an agent that reads a run and then closes the connection without a word
// may have acted on it, so the run is not sent again; the consumer gets 502.
func TestRunTheAgentMayHaveReadIsNotSentTwice(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var received atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				io.ReadAll(req.Body)
				received.Add(1)
			}()
		}
	}()
	_, base := startProxy(t, Options{Upstream: "http://" + ln.Addr().String()})
	resp, err := http.Post(base+"/agent", "application/json", strings.NewReader(runInput("t", "r")))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 502 {
		t.Fatalf("status %d, want 502", resp.StatusCode)
	}
	if n := received.Load(); n != 1 {
		t.Fatalf("the agent received the run %d times", n)
	}
}

// TestUnreadRequestToldFromReadOne pins how aguard tells whether an agent
// can have read a request that failed: a request written on a connection the
// agent had already closed (the race no check before reuse can close) was
// acknowledged by no one and is known unread; one the agent read before
// closing without an answer is not.
func TestUnreadRequestToldFromReadOne(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the proof reads Linux's TCP_INFO; elsewhere no run is ever resent")
	}
	for _, tc := range []struct {
		name       string
		readSecond bool
	}{{"closed before the request", false}, {"read, then closed without an answer", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			closed := make(chan struct{})
			go func() {
				defer close(closed)
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.ReadAll(req.Body)
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				if tc.readSecond {
					if req, err = http.ReadRequest(br); err == nil {
						io.ReadAll(req.Body)
					}
				}
			}()
			p := newPool(ln.Addr().String(), nil, 4, &keepalive{max: time.Minute}, NewMetrics(prometheus.NewRegistry()))
			defer p.close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req := fasthttp.AcquireRequest()
			defer fasthttp.ReleaseRequest(req)
			req.Header.SetMethod("POST")
			req.SetRequestURI("/run")
			req.Header.SetHost("agent")
			req.SetBodyString(runInput("t", "r"))

			c, err := p.get(ctx)
			if err != nil {
				t.Fatal(err)
			}
			resp := fasthttp.AcquireResponse()
			br, err := c.roundTrip(ctx, req, resp)
			if err != nil {
				t.Fatal(err)
			}
			r := &reply{resp: resp, conn: c, br: br, body: resp.BodyStream()}
			io.Copy(io.Discard, r)
			r.release()

			// The connection is taken for the next request as if every check
			// had passed; then the agent closes it (or reads the request and
			// then closes it).
			c = p.pop()
			if c == nil {
				t.Fatal("the connection was not kept for reuse")
			}
			if !tc.readSecond {
				<-closed
				await.Within(t, 5*time.Second, "the agent's close to arrive", func() bool { return peerClosed(c.tcp) })
			}
			resp = fasthttp.AcquireResponse()
			defer fasthttp.ReleaseResponse(resp)
			_, err = c.roundTrip(ctx, req, resp)
			var e *exchangeError
			if !errors.As(err, &e) {
				t.Fatalf("second request: %v, want an exchange error", err)
			}
			if !e.unanswered || e.unreceived == tc.readSecond {
				t.Fatalf("unanswered %v, unreceived %v (err %v)", e.unanswered, e.unreceived, e.err)
			}
		})
	}
}

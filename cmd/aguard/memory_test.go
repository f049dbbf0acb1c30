package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aguard/aguard/internal/await"
)

// procStatusMiB reads a "<field>: <n> kB" line of /proc/<pid>/status (VmRSS,
// VmHWM) in MiB.
func procStatusMiB(t *testing.T, pid int, field string) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read the status of aguard: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", field, line, err)
			}
			return kb / 1024
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

// metric returns the value of the sample named exactly series (name and
// labels as /metrics writes them), or -1 when absent.
func metric(t *testing.T, admin, series string) float64 {
	t.Helper()
	_, body := get(t, "http://"+admin+"/metrics")
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %q", series, line)
			}
			return f
		}
	}
	return -1
}

// deadURL is an http URL on a loopback port where nothing listens.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr + "/hooks"
}

// runOnce posts a RunAgentInput for thread/run and reads the whole stream.
func runOnce(t *testing.T, listen, thread, run string) string {
	t.Helper()
	input := `{"threadId":"` + thread + `","runId":"` + run + `","protocolVersion":"1.0","messages":[]}`
	resp, err := http.Post("http://"+listen+"/agent", "application/json", strings.NewReader(input))
	if err != nil {
		t.Error(err)
		return ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Error(err)
	}
	return string(b)
}

// bigArgsAgent answers every run with one agent-side tool call whose
// arguments are a JSON object of argBytes bytes, its result, and
// RUN_FINISHED.
func bigArgsAgent(argBytes int) *httptest.Server {
	pad := strings.Repeat("a", argBytes-len(`{"blob":""}`))
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		thread, run := field(b, "threadId"), field(b, "runId")
		w.Header().Set("Content-Type", "text/event-stream")
		bw := bufio.NewWriterSize(w, 64<<10)
		fmt.Fprintf(bw, "data: {\"type\":\"RUN_STARTED\",\"threadId\":%q,\"runId\":%q}\n\n", thread, run)
		fmt.Fprintf(bw, "data: {\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"c-%s\",\"toolCallName\":\"backend_tool\"}\n\n", run)
		fmt.Fprintf(bw, "data: {\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"c-%s\",\"delta\":\"{\\\"blob\\\":\\\"%s\\\"}\"}\n\n", run, pad)
		fmt.Fprintf(bw, "data: {\"type\":\"TOOL_CALL_END\",\"toolCallId\":\"c-%s\"}\n\n", run)
		fmt.Fprintf(bw, "data: {\"type\":\"TOOL_CALL_RESULT\",\"messageId\":\"m-%s\",\"toolCallId\":\"c-%s\",\"content\":\"done\"}\n\n", run, run)
		fmt.Fprintf(bw, "data: {\"type\":\"RUN_FINISHED\",\"threadId\":%q,\"runId\":%q}\n\n", thread, run)
		bw.Flush()
	}))
}

// TestWebhookQueueBoundedInBytes runs the binary with its only webhook
// receiver down and 400 tool calls of 1 MiB of arguments through it: the
// deliveries waiting for the receiver are bounded by --webhook-queue-bytes
// (64 MiB by default), not held one per event, and those dropped are
// counted; with the default budgets, the process grows by less than 320 MiB.
func TestWebhookQueueBoundedInBytes(t *testing.T) {
	const (
		calls    = 400
		argBytes = 1<<20 - 64 // under the 1 MiB a policy still inspects
		parallel = 4
	)
	bin := buildAguard(t)
	agent := bigArgsAgent(argBytes)
	defer agent.Close()
	// Every budget at its default: the webhook queue's (64 MiB), and the
	// ledger's cache (--ledger-cache-bytes, 32 MiB), which keeps the
	// answered records, arguments included. Go's collector lets the heap
	// grow to about twice what is live (README, "Memory to expect").
	a := startAguard(t, bin, "--upstream", agent.URL, "--webhook", deadURL(t))
	pid := a.cmd.Process.Pid

	runOnce(t, a.listen, "warm", "warm") // first-use allocations out of the figure
	before := procStatusMiB(t, pid, "VmRSS")
	var wg sync.WaitGroup
	next := make(chan int)
	for range parallel {
		wg.Go(func() {
			for i := range next {
				// A machine too busy to evaluate 1 MiB of arguments within
				// the policy's 100 ms denies the call: it ends too.
				out := runOnce(t, a.listen, fmt.Sprintf("t-%d", i), fmt.Sprintf("r-%d", i))
				if !strings.Contains(out, "RUN_FINISHED") && !strings.Contains(out, "AGUARD_POLICY_DENIED") {
					t.Errorf("run %d did not end: %.300s", i, out)
				}
			}
		})
	}
	for i := range calls {
		next <- i
	}
	close(next)
	wg.Wait()
	after := procStatusMiB(t, pid, "VmRSS")
	peak := procStatusMiB(t, pid, "VmHWM")
	dropped := metric(t, a.admin, `aguard_webhook_deliveries_total{result="dropped"}`)
	queued := metric(t, a.admin, `aguard_webhook_queue_depth`)
	queuedBytes := metric(t, a.admin, `aguard_webhook_queue_bytes`)
	t.Logf("RSS %.0f MiB before, %.0f MiB after %d calls of %d bytes of arguments (growth %.0f MiB, peak %.0f MiB); deliveries queued %.0f (%.1f MiB), dropped %.0f; ledger memory %.1f MiB; heap in use %.0f MiB",
		before, after, calls, argBytes, after-before, peak, queued, queuedBytes/(1<<20), dropped,
		metric(t, a.admin, "aguard_state_cache_bytes")/(1<<20), metric(t, a.admin, "go_memstats_heap_inuse_bytes")/(1<<20))
	if growth := after - before; growth >= 320 {
		t.Errorf("RSS grew by %.0f MiB with the receiver down; want under 320 MiB", growth)
	}
	if dropped <= 0 {
		t.Errorf("no delivery counted as dropped (aguard_webhook_deliveries_total{result=\"dropped\"} = %v)", dropped)
	}
}

// hugeEventAgent answers every run with RUN_STARTED, then events of about
// size bytes of the given kind, then waits for release before RUN_FINISHED.
func hugeEventAgent(kind string, size, events int, release <-chan struct{}) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		thread, run := field(b, "threadId"), field(b, "runId")
		w.Header().Set("Content-Type", "text/event-stream")
		bw := bufio.NewWriterSize(w, 64<<10)
		fmt.Fprintf(bw, "data: {\"type\":\"RUN_STARTED\",\"threadId\":%q,\"runId\":%q}\n\n", thread, run)
		switch kind {
		case "text":
			fmt.Fprintf(bw, "data: {\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\",\"role\":\"assistant\"}\n\n")
		case "args":
			fmt.Fprintf(bw, "data: {\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"c\",\"toolCallName\":\"backend_tool\"}\n\n")
		}
		for range events {
			bw.WriteString(hugeEvent(kind, size))
			bw.WriteString("\n\n")
			bw.Flush()
			w.(http.Flusher).Flush()
		}
		switch kind {
		case "text":
			fmt.Fprintf(bw, "data: {\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m\"}\n\n")
		}
		bw.Flush()
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprintf(bw, "data: {\"type\":\"RUN_FINISHED\",\"threadId\":%q,\"runId\":%q}\n\n", thread, run)
		bw.Flush()
	}))
}

// hugeEvent is one SSE data line of about size bytes.
func hugeEvent(kind string, size int) string {
	var sb strings.Builder
	sb.Grow(size + 64)
	switch kind {
	case "text":
		sb.WriteString(`data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"`)
		for sb.Len() < size-2 {
			sb.WriteString("lorem ipsum ")
		}
		sb.WriteString(`"}`)
	case "args":
		sb.WriteString(`data: {"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"`)
		for sb.Len() < size-2 {
			sb.WriteString("lorem ipsum ")
		}
		sb.WriteString(`"}`)
	case "state": // many small members: a large parse tree
		sb.WriteString(`data: {"type":"STATE_SNAPSHOT","snapshot":{"items":[`)
		for i := 0; sb.Len() < size-8; i++ {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(`{"k":1}`)
		}
		sb.WriteString(`]}}`)
	case "spaced": // not compact: compacted before it is forwarded
		sb.WriteString(`data: {"type": "STATE_SNAPSHOT", "snapshot": {"text": "`)
		for sb.Len() < size-3 {
			sb.WriteString("lorem ipsum ")
		}
		sb.WriteString(`"} }`)
	case "messages":
		sb.WriteString(`data: {"type":"MESSAGES_SNAPSHOT","messages":[`)
		for i := 0; sb.Len() < size-200; i++ {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `{"id":"m%d","role":"assistant","content":"%s"}`, i, strings.Repeat("lorem ipsum ", 80))
		}
		sb.WriteString(`]}`)
	default:
		panic("unknown kind " + kind)
	}
	return sb.String()
}

// gcLive follows the GC trace (GODEBUG=gctrace=1) of an aguard's stderr
// and keeps the largest heap a collection found live.
type gcLive struct {
	mu   sync.Mutex
	max  float64 // MiB
	done chan struct{}
}

var gcTraceLive = regexp.MustCompile(`(\d+)->(\d+)->(\d+) MB`)

func followGC(lines <-chan string) *gcLive {
	g := &gcLive{done: make(chan struct{})}
	go func() {
		defer close(g.done)
		for line := range lines {
			if m := gcTraceLive.FindStringSubmatch(line); m != nil {
				live, _ := strconv.ParseFloat(m[3], 64)
				g.mu.Lock()
				g.max = max(g.max, live)
				g.mu.Unlock()
			}
		}
	}()
	return g
}

func (g *gcLive) peak() float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.max
}

// openStreams opens n streams through aguard at listen and returns once
// each has received events big events (frames over 1 MiB); the streams
// stay open until the agent finishes them.
func openStreams(t *testing.T, listen string, n, events int, wg *sync.WaitGroup) {
	t.Helper()
	got := make(chan int, n)
	for i := range n {
		wg.Go(func() {
			// The tool is advertised: the default policy holds a call to a
			// tool the input did not, and these events are to be forwarded.
			input := fmt.Sprintf(`{"threadId":"t%d","runId":"r%d","protocolVersion":"1.0","messages":[],"tools":[{"name":"backend_tool"}]}`, i, i)
			resp, err := http.Post("http://"+listen+"/agent", "application/json", strings.NewReader(input))
			if err != nil {
				t.Error(err)
				got <- 0
				return
			}
			defer resp.Body.Close()
			br := bufio.NewReaderSize(resp.Body, 64<<10)
			seen, long := 0, 0
			for {
				line, err := br.ReadSlice('\n')
				long += len(line)
				if err == bufio.ErrBufferFull {
					continue
				}
				if long > 1<<20 {
					if seen++; seen == events {
						got <- seen
					}
				}
				long = 0
				if err != nil {
					if seen < events {
						got <- seen
					}
					return
				}
			}
		})
	}
	for range n {
		if k := <-got; k != events {
			t.Errorf("a stream carried %d big events, want %d", k, events)
		}
	}
}

// TestStreamMemoryPerEventByteBounded runs streams carrying events just
// under --max-event (16 MiB) through the binary, of several shapes, and reads
// aguard's memory: the largest heap its GC found live and its peak resident
// size, with 10 streams handling such events at once, and with 10 streams
// opened one after the other, each left open after its events (what a
// stream keeps of an event it has handled). An event of N bytes costs at
// most about 2×N while it is handled, and nothing of it is kept after.
func TestStreamMemoryPerEventByteBounded(t *testing.T) {
	const (
		streams = 10
		size    = 16<<20 - 1024
		events  = 2
	)
	bin := buildAguard(t)
	t.Setenv("GODEBUG", "gctrace=1")
	for _, kind := range []string{"text", "args", "spaced", "state", "messages"} {
		t.Run(kind, func(t *testing.T) {
			for _, phase := range []string{"at once", "one after the other"} {
				release := make(chan struct{})
				agent := hugeEventAgent(kind, size, events, release)
				a := startAguard(t, bin, "--upstream", agent.URL)
				gc := followGC(a.stderrLines)
				pid := a.cmd.Process.Pid
				base := procStatusMiB(t, pid, "VmRSS")
				var wg sync.WaitGroup
				if phase == "at once" {
					openStreams(t, a.listen, streams, events, &wg)
				} else {
					for range streams {
						openStreams(t, a.listen, 1, events, &wg)
					}
				}
				peak := procStatusMiB(t, pid, "VmHWM")
				close(release)
				wg.Wait()
				agent.Close()
				a.cmd.Process.Kill()
				a.cmd.Wait()
				<-gc.done
				live := gc.peak()
				t.Logf("%s, %d streams %s, %d events of %d bytes each: largest live heap %.0f MiB (%.1f MiB per stream); RSS %.0f MiB at start, peak %.0f MiB (+%.1f MiB per stream)",
					kind, streams, phase, events, size, live, live/streams, base, peak, (peak-base)/streams)
				// About 2×N per event at work — 3×N at the moment an event
				// that must be compacted is written (the read buffer, the
				// compacted event, the frame) — with room for the GC's
				// timing: the largest live heap a collection finds depends on
				// when it runs, and 10 streams at once measured 370–530 MiB
				// over seventeen runs on a 2-CPU host, later 418–562 MiB
				// (text events, nine runs of this build and the one before
				// it, which handle them alike): 4× for them at once. One after the other,
				// only the stream at work holds its event (and the one before
				// it, still letting its event go as the next starts: 82 MiB
				// once, 50 usually), and the others keep little (2 MiB each
				// at most); keeping every event would be 160 MiB. A messages
				// snapshot is checked message by message on a tree of them,
				// about 100 bytes per JSON value: its messages of 1 KiB cost
				// more: the parser keeps its own copy of the event (fastjson
				// copies what it parses) and the tree of the messages
				// (about 26 MiB allocated for one of 16 MiB), so that 10 at
				// once measured 440–790 MiB over twelve runs (4.9× at most).
				eventMiB := float64(size) / (1 << 20)
				factor := 3.5
				if kind == "messages" {
					factor = 5.5
				}
				limit := streams * max(factor, 4) * eventMiB
				if phase == "one after the other" {
					limit = (factor+1)*eventMiB + streams*2
				}
				if live > limit {
					t.Errorf("%s, %s: largest live heap %.0f MiB; want at most %.0f MiB", kind, phase, live, limit)
				}
			}
		})
	}
}

// holdingAgent answers a run whose runId starts with "hold" with RUN_STARTED
// and the first partMiB MiB of a large TEXT_MESSAGE_CONTENT, which aguard
// must hold until the rest comes, and sends the rest and RUN_FINISHED once
// release is closed; every other run it answers at once. sent receives a
// value once a held part is written; requests counts the runs it received.
func holdingAgent(partMiB int, release <-chan struct{}, sent chan<- struct{}, requests *atomic.Int64) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		b, _ := io.ReadAll(r.Body)
		thread, run := field(b, "threadId"), field(b, "runId")
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"type\":\"RUN_STARTED\",\"threadId\":%q,\"runId\":%q}\n\n", thread, run)
		if strings.HasPrefix(run, "hold") {
			fmt.Fprintf(w, "data: {\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\",\"role\":\"assistant\"}\n\n")
			io.WriteString(w, `data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"`)
			w.Write(bytes.Repeat([]byte("x"), partMiB<<20))
			w.(http.Flusher).Flush()
			sent <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			io.WriteString(w, "the end\"}\n\n")
			fmt.Fprintf(w, "data: {\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m\"}\n\n")
		}
		fmt.Fprintf(w, "data: {\"type\":\"RUN_FINISHED\",\"threadId\":%q,\"runId\":%q}\n\n", thread, run)
	}))
}

// TestMaxMemoryRefusesNewRuns runs the binary with a small --max-memory and
// streams that each hold a large event half received: once memory in use is
// past 90 % of the budget, a new run gets 503 overloaded (nothing reaches the
// agent), the streams already running finish, and once they have, runs are
// taken again.
func TestMaxMemoryRefusesNewRuns(t *testing.T) {
	const partMiB = 10
	bin := buildAguard(t)
	release, sent := make(chan struct{}), make(chan struct{}, 64)
	var requests atomic.Int64
	agent := holdingAgent(partMiB, release, sent, &requests)
	defer agent.Close()
	a := startAguard(t, bin, "--upstream", agent.URL, "--max-memory", "128MiB")
	var logged strings.Builder
	var logMu sync.Mutex
	go func() {
		for line := range a.stderrLines {
			logMu.Lock()
			logged.WriteString(line + "\n")
			logMu.Unlock()
		}
	}()
	post := func(run string) *http.Response {
		input := `{"threadId":"t-` + run + `","runId":"` + run + `","protocolVersion":"1.0","messages":[]}`
		resp, err := http.Post("http://"+a.listen+"/agent", "application/json", strings.NewReader(input))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	// Open streams holding 10 MiB each, and try a short run after each,
	// until aguard refuses a new run.
	var held []*http.Response
	var refused *http.Response
	tryRun := func(run string) bool {
		before := requests.Load()
		resp := post(run)
		if resp.StatusCode != http.StatusServiceUnavailable {
			if !strings.HasPrefix(run, "hold") {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			} else {
				held = append(held, resp)
				<-sent
			}
			return false
		}
		refused = resp
		if requests.Load() != before {
			t.Error("a refused run reached the agent")
		}
		return true
	}
	for i := 0; i < 24; i++ {
		if tryRun(fmt.Sprintf("hold-%d", i)) || tryRun(fmt.Sprintf("short-%d", i)) {
			break
		}
	}
	if refused == nil {
		t.Fatalf("%d streams holding %d MiB each and no run refused (memory in use %.0f MiB)",
			len(held), partMiB, metric(t, a.admin, "aguard_memory_used_bytes")/(1<<20))
	}
	body, _ := io.ReadAll(refused.Body)
	refused.Body.Close()
	if !strings.Contains(string(body), `"code":"overloaded"`) || refused.Header.Get("Retry-After") == "" {
		t.Fatalf("refusal: %s, Retry-After %q", body, refused.Header.Get("Retry-After"))
	}
	if n := metric(t, a.admin, "aguard_overload_refusals_total"); n < 1 {
		t.Errorf("aguard_overload_refusals_total = %v", n)
	}
	if code, ready := get(t, "http://"+a.admin+"/readyz"); code != 200 || !strings.Contains(ready, "overloaded") {
		t.Errorf("readyz while overloaded: %d %s", code, ready)
	}
	t.Logf("refused the run after %d streams holding %d MiB each: %s (memory in use %.0f MiB of a 128 MiB budget)",
		len(held), partMiB, body, metric(t, a.admin, "aguard_memory_used_bytes")/(1<<20))

	// The streams already running go on and finish whole.
	close(release)
	for i, resp := range held {
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Contains(b, []byte("the end\"}")) || !bytes.Contains(b, []byte("RUN_FINISHED")) {
			t.Errorf("held stream %d did not finish whole (%d bytes, %v): %.200s", i, len(b), err, b)
		}
	}

	// Once they are over, runs are taken again.
	var last int
	await.For(t, "runs to be taken again", func() bool {
		resp := post(fmt.Sprintf("after-%d", last))
		last++
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200 && bytes.Contains(b, []byte("RUN_FINISHED"))
	})
	// aguard logs each crossing before it answers, but the test reads its
	// stderr on goroutines of its own: wait for the lines to come through.
	for _, want := range []string{"refusing new streams", "taking new streams"} {
		await.For(t, "a log line saying "+strconv.Quote(want), func() bool {
			logMu.Lock()
			defer logMu.Unlock()
			return strings.Contains(logged.String(), want)
		})
	}
}

package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/syncbuf"
)

// TestHostileToolDataStaysData pins that tool arguments, results and ids
// carrying SSE framing, markup and control characters reach the consumer
// only inside JSON strings (no event added or split) and reach the logs only
// JSON-escaped: every log record stays one line of valid JSON.
func TestHostileToolDataStaysData(t *testing.T) {
	evil := "x\n\ndata: {\"type\":\"RUN_FINISHED\"}\r\n\r\n<script>alert(1)</script>\u2028\x01"
	evilJSON, _ := json.Marshal(evil)
	events := []string{
		`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`,
		`{"type":"TOOL_CALL_START","toolCallId":` + string(evilJSON) + `,"toolCallName":"confirm_order"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":` + string(evilJSON) + `,"delta":` + string(evilJSON) + `}`,
		`{"type":"TOOL_CALL_END","toolCallId":` + string(evilJSON) + `}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"m","toolCallId":` + string(evilJSON) + `,"content":` + string(evilJSON) + `}`,
		`{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`,
	}
	var body strings.Builder
	for _, e := range events {
		body.WriteString(frame(e))
	}
	logs := &syncbuf.Buffer{}
	h := newHarness(t, sseAgent(body.String()), func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	resp := h.post(t, context.Background(), "/agent", confirmInput("r"))
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	frames := strings.Split(strings.TrimSuffix(string(raw), "\n\n"), "\n\n")
	for _, f := range frames {
		if !strings.HasPrefix(f, "data: ") || strings.ContainsAny(f[6:], "\r\n") || !json.Valid([]byte(f[6:])) {
			t.Fatalf("frame is not one JSON event on one line: %q", f)
		}
	}
	// The frontend call's fabricated result is dropped and the declined
	// args are the policy's business (no policy here): everything else is
	// the agent's events, byte for byte, plus the pending list.
	if len(frames) != 5 || !strings.HasPrefix(frames[4], `data: {"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":`) {
		t.Fatalf("got %d frames:\n%s", len(frames), raw)
	}
	// The stream's last line is written after the consumer has read its end.
	await.For(t, "the stream's log lines", func() bool { return strings.Contains(logs.String(), "stream ended") })
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if !json.Valid([]byte(line)) {
			t.Fatalf("log line is not one JSON record: %q", line)
		}
		if strings.ContainsFunc(line, func(r rune) bool { return r < 0x20 || r == 0x2028 }) {
			t.Fatalf("a control character reached the log unescaped: %q", line)
		}
	}
}

// TestOversizedAndNestedInput pins the limits on what a consumer sends and
// what an agent sends: headers, deeply nested JSON in both directions.
func TestOversizedAndNestedInput(t *testing.T) {
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	h := newHarness(t, sseAgent(frame(`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`)+
		frame(`{"type":"STATE_SNAPSHOT","snapshot":`+deep+`}`)), func(o *Options) { o.MaxBody = 1 << 20 })

	req, _ := http.NewRequest("POST", h.url+"/agent", strings.NewReader(runInput("t", "r")))
	req.Header.Set("X-Big", strings.Repeat("a", 10<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if e := decodeError(t, resp); resp.StatusCode != 431 || e.Error.Code != "headers_too_large" {
		t.Fatalf("oversized headers: %d %+v", resp.StatusCode, e)
	}
	resp.Body.Close()

	resp = h.post(t, context.Background(), "/agent", `{"threadId":"t","runId":"r","messages":[],"state":`+deep+`}`)
	if e := decodeError(t, resp); resp.StatusCode != 400 || e.Error.Code != "invalid_run_input" {
		t.Fatalf("deeply nested input: %d %+v", resp.StatusCode, e)
	}
	resp.Body.Close()

	resp = h.post(t, context.Background(), "/agent", runInput("t", "r"))
	got := readAll(t, resp.Body)
	resp.Body.Close()
	if len(got) != 2 || field(t, got[1], "code") != "AGUARD_PROTOCOL_VIOLATION" {
		t.Fatalf("deeply nested event: %q", got)
	}
}

// TestThousandConsumersLeaveAtOnce opens 1,000 streams on a silent agent and
// drops every consumer at once: every stream is released and the agent sees
// every request cancelled (goleak in TestMain checks nothing is left).
func TestThousandConsumersLeaveAtOnce(t *testing.T) {
	const n = 1000
	var mu sync.Mutex
	open := 0
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, frame(`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`))
		w.(http.Flusher).Flush()
		mu.Lock()
		open++
		mu.Unlock()
		<-r.Context().Done()
		mu.Lock()
		open--
		mu.Unlock()
	}, func(o *Options) { o.Heartbeat = time.Hour })
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: n}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ready sync.WaitGroup // consumers that have read their first event
	ready.Add(n)
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "POST", h.url+"/agent", strings.NewReader(runInput(fmt.Sprint("t", i), "r")))
			resp, err := client.Do(req)
			if err != nil {
				errs <- err
				ready.Done()
				return
			}
			defer resp.Body.Close()
			line, err := bufio.NewReader(resp.Body).ReadString('\n')
			if err != nil || !strings.Contains(line, "RUN_STARTED") {
				errs <- fmt.Errorf("stream %d: %q %v", i, line, err)
			}
			ready.Done()
			<-ctx.Done()
		}()
	}
	ready.Wait()
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	client.CloseIdleConnections()
	await.Within(t, 10*time.Second, "every stream to be released", func() bool { return h.p.inFlight() == 0 })
	await.Within(t, 10*time.Second, "the agent to see every request cancelled", func() bool { mu.Lock(); defer mu.Unlock(); return open == 0 })
}

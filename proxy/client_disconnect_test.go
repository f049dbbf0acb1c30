package proxy

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
)

// TestClientDisconnectCancelsUpstream pins that a consumer leaving a silent
// stream cancels the agent's request promptly: the agent sends nothing after
// the first event, so only watching the consumer's connection can notice.
// Both watchers are pinned: the shared epoll set (Linux) and the goroutine
// per stream (other platforms, or a connection without a descriptor).
func TestClientDisconnectCancelsUpstream(t *testing.T) {
	for _, tc := range []struct {
		name       string
		perStream  bool
		shareConns bool
	}{
		{"shared watcher", false, false},
		{"goroutine per stream", true, false},
		{"on the server's connection", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cancelled := make(chan time.Time, 1)
			h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, frame(`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`))
				w.(http.Flusher).Flush()
				<-r.Context().Done()
				cancelled <- time.Now()
			}, func(o *Options) { o.Heartbeat = time.Hour })
			if tc.perStream {
				h.p.mu.Lock()
				h.p.hangupsTried = true // as if the shared watcher could not start
				h.p.mu.Unlock()
			}
			h.p.shareConns.Store(tc.shareConns)
			ctx, cancel := context.WithCancel(context.Background())
			resp := h.post(t, ctx, "/agent", runInput("t", "r"))
			f := &frames{r: bufio.NewReader(resp.Body)}
			if _, err := f.next(); err != nil {
				t.Fatal(err)
			}
			if shared := h.p.hangupSet() != nil; shared == tc.perStream && runtime.GOOS == "linux" {
				t.Fatalf("shared watcher running = %v, want %v", shared, !tc.perStream)
			}
			left := time.Now()
			cancel()
			resp.Body.Close()
			select {
			case at := <-cancelled:
				t.Logf("agent saw the cancellation %s after the consumer left", at.Sub(left))
			case <-time.After(5 * time.Second):
				t.Fatal("the agent's request was not cancelled after the consumer left")
			}
			await.Within(t, 5*time.Second, "the stream to be released", func() bool { return h.p.inFlight() == 0 })
		})
	}
}

// TestHeartbeatInSilence pins the ": ping" comment while the agent is silent.
func TestHeartbeatInSilence(t *testing.T) {
	release := make(chan struct{})
	h := newHarness(t, waitingAgent(release), func(o *Options) { o.Heartbeat = 20 * time.Millisecond })
	resp := h.post(t, context.Background(), "/agent", runInput("t", "r"))
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	var lines []string
	for len(lines) < 6 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, line)
	}
	close(release)
	want := []string{"data: {\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\"}\n", "\n", ": ping\n", "\n", ": ping\n", "\n"}
	for i := range want {
		if lines[i] != want[i] {
			t.Fatalf("line %d = %q, want %q (all: %q)", i, lines[i], want[i], lines)
		}
	}
	rest := readAll(t, r)
	if len(rest) != 1 || field(t, rest[0], "type") != "RUN_FINISHED" {
		t.Fatalf("rest = %q", rest)
	}
}

// TestSilentAgentEndsAtTheIdleLimit pins the idle limit: an agent that stalls
// sends heartbeats to the consumer until it has been silent for the limit,
// then the consumer gets RUN_ERROR AGUARD_UPSTREAM_LOST and the agent's
// request is cancelled. Comments from the agent count as activity.
func TestSilentAgentEndsAtTheIdleLimit(t *testing.T) {
	cancelled := make(chan struct{})
	commented := make(chan struct{}) // the agent sent its last comment
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, frame(`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`))
		w.(http.Flusher).Flush()
		// Comments keep it alive past the limit (800ms of them, one every
		// 100ms against a limit of 600ms)…
		for range 8 {
			time.Sleep(100 * time.Millisecond)
			io.WriteString(w, ": agent keep-alive\n\n")
			w.(http.Flusher).Flush()
		}
		close(commented)
		// …then it stalls.
		<-r.Context().Done()
		close(cancelled)
	}, func(o *Options) { o.Heartbeat = 20 * time.Millisecond; o.UpstreamIdleTimeout = 600 * time.Millisecond })
	resp := h.post(t, context.Background(), "/agent", runInput("t", "r"))
	defer resp.Body.Close()
	got := readAll(t, resp.Body)
	if len(got) != 2 || field(t, got[1], "code") != "AGUARD_UPSTREAM_LOST" || !strings.Contains(field(t, got[1], "message"), "sent nothing for") {
		t.Fatalf("got %q", got)
	}
	select {
	case <-commented:
	default:
		t.Fatal("the stream ended while the agent was still sending comments: they did not count as activity")
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the stalled agent's request was not cancelled")
	}
}

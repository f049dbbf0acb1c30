package proxy

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
)

// watching counts the streams the set watches (it also watches agent
// connections).
func (h *hangups) watching() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, w := range h.watchers {
		if _, ok := w.(*stream); ok {
			n++
		}
	}
	return n
}

// TestHangupSetTracksEveryStream pins the shared watcher's bookkeeping: each
// running stream is registered once, a consumer leaving ends only its own
// stream, every stream that ends is unregistered (its descriptor may be
// reused at once), and an event for an id no longer registered is ignored.
func TestHangupSetTracksEveryStream(t *testing.T) {
	release := make(chan struct{})
	cancelled := make(chan string, 3)
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, frame(`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`))
		w.(http.Flusher).Flush()
		select {
		case <-release:
			io.WriteString(w, frame(`{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`))
		case <-r.Context().Done():
			cancelled <- r.URL.Query().Get("n")
		}
	}, func(o *Options) { o.Heartbeat = time.Hour })

	var bodies []io.ReadCloser
	var leave []context.CancelFunc
	for _, n := range []string{"1", "2", "3"} {
		ctx, cancel := context.WithCancel(context.Background())
		resp := h.post(t, ctx, "/agent?n="+n, runInput("t", "r"))
		if _, err := (&frames{r: bufio.NewReader(resp.Body)}).next(); err != nil {
			t.Fatal(err)
		}
		bodies, leave = append(bodies, resp.Body), append(leave, cancel)
	}
	set := h.p.hangupSet()
	if set == nil {
		t.Fatal("no shared watcher")
	}
	await.Within(t, 5*time.Second, "3 streams watched", func() bool { return set.watching() == 3 })
	set.hungUp(1 << 40) // never registered: nothing happens

	leave[1]()
	bodies[1].Close()
	select {
	case n := <-cancelled:
		if n != "2" {
			t.Fatalf("the agent's request %s was cancelled, want 2", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the request of the consumer that left was not cancelled")
	}
	await.Within(t, 5*time.Second, "2 streams watched", func() bool { return set.watching() == 2 })

	close(release)
	for i, b := range []io.ReadCloser{bodies[0], bodies[2]} {
		if got := readAll(t, b); len(got) != 1 || field(t, got[0], "type") != "RUN_FINISHED" {
			t.Fatalf("stream %d: got %q", i, got)
		}
		b.Close()
		leave[i]()
	}
	await.Within(t, 5*time.Second, "no stream watched", func() bool { return set.watching() == 0 })
	select {
	case n := <-cancelled:
		t.Fatalf("request %s was cancelled though its consumer stayed", n)
	default:
	}
}

package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
)

// TestDrain pins SIGTERM's behaviour: new requests get 503 shutting_down, a
// stream that finishes within the drain timeout completes normally, and one
// still running when it runs out ends with RUN_ERROR AGUARD_SHUTDOWN.
func TestDrain(t *testing.T) {
	finish := make(chan struct{})
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, frame(`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`))
		w.(http.Flusher).Flush()
		if between(string(b), `"runId":"`, `"`) == "quick" {
			<-finish
			io.WriteString(w, frame(`{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`))
			return
		}
		<-r.Context().Done() // never finishes by itself
	})

	open := func(run string) (*http.Response, *frames) {
		resp := h.post(t, context.Background(), "/agent", runInput("t", run))
		f := &frames{r: bufio.NewReader(resp.Body)}
		if _, err := f.next(); err != nil {
			t.Fatal(err)
		}
		return resp, f
	}
	quick, quickFrames := open("quick")
	defer quick.Body.Close()
	slow, slowFrames := open("slow")
	defer slow.Body.Close()

	// The drain timeout runs out once the quick stream has finished: a
	// timeout of a fixed length could run out before, on a busy machine.
	timeout := newDrainTimeout()
	drained := make(chan error, 1)
	go func() { drained <- h.p.Drain(timeout) }()
	await.For(t, "draining to start", func() bool { ok, _ := h.p.Ready(); return !ok })

	resp := h.post(t, context.Background(), "/agent", runInput("t", "late"))
	if e := decodeError(t, resp); resp.StatusCode != 503 || e.Error.Code != "shutting_down" {
		t.Fatalf("request while draining: got %d %+v", resp.StatusCode, e)
	}
	resp.Body.Close()

	close(finish)
	if ev, err := quickFrames.next(); err != nil || field(t, ev, "type") != "RUN_FINISHED" {
		t.Fatalf("quick stream: %q %v", ev, err)
	}
	timeout.runOut()
	ev, err := slowFrames.next()
	if err != nil || field(t, ev, "type") != "RUN_ERROR" || field(t, ev, "code") != "AGUARD_SHUTDOWN" {
		t.Fatalf("slow stream: %q %v", ev, err)
	}
	if _, err := slowFrames.next(); err != io.EOF {
		t.Fatalf("slow stream did not end after RUN_ERROR: %v", err)
	}
	if err := <-drained; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain = %v, want the deadline error", err)
	}
}

// drainTimeout is a drain's context whose timeout runs out when the test
// says (runOut): Done closes and Err is context.DeadlineExceeded, as with
// context.WithTimeout.
type drainTimeout struct {
	context.Context
	done chan struct{}
}

func newDrainTimeout() *drainTimeout {
	return &drainTimeout{Context: context.Background(), done: make(chan struct{})}
}

func (d *drainTimeout) runOut() { close(d.done) }

func (d *drainTimeout) Done() <-chan struct{} { return d.done }

func (d *drainTimeout) Err() error {
	select {
	case <-d.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// TestCloseEndsRunningStreams pins Close without a drain: a stream still
// running ends with RUN_ERROR AGUARD_SHUTDOWN and its agent request is
// cancelled, although the stream's connection is its own (not the server's).
func TestCloseEndsRunningStreams(t *testing.T) {
	cancelled := make(chan struct{})
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, frame(`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(cancelled)
	})
	resp := h.post(t, context.Background(), "/agent", runInput("t", "r"))
	defer resp.Body.Close()
	f := &frames{r: bufio.NewReader(resp.Body)}
	if _, err := f.next(); err != nil {
		t.Fatal(err)
	}
	h.p.Close()
	ev, err := f.next()
	if err != nil || field(t, ev, "type") != "RUN_ERROR" || field(t, ev, "code") != "AGUARD_SHUTDOWN" {
		t.Fatalf("after Close: %q %v", ev, err)
	}
	if _, err := f.next(); err != io.EOF {
		t.Fatalf("stream did not end after RUN_ERROR: %v", err)
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the agent's request was not cancelled")
	}
}

// TestDrainAbandonsRequestsTheAgentHasNotAnswered pins that the drain
// timeout ends a request whose agent still holds its response headers: the
// consumer gets 503 shutting_down and the agent's request is cancelled,
// rather than the drain (and the shutdown after it) waiting for
// --upstream-timeout.
func TestDrainAbandonsRequestsTheAgentHasNotAnswered(t *testing.T) {
	arrived := make(chan struct{}, 1)
	cancelled := make(chan struct{}, 1)
	release := make(chan struct{})
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
			cancelled <- struct{}{}
		case <-release: // the test is over
		}
	}, func(o *Options) { o.UpstreamTimeout = time.Hour })
	t.Cleanup(func() { close(release) })
	answered := make(chan *http.Response, 1)
	go func() { answered <- h.post(t, context.Background(), "/agent", runInput("t", "r")) }()
	<-arrived
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := h.p.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain = %v, want the deadline error", err)
	}
	select {
	case resp := <-answered:
		defer resp.Body.Close()
		if e := decodeError(t, resp); resp.StatusCode != 503 || e.Error.Code != "shutting_down" {
			t.Fatalf("got %d %+v", resp.StatusCode, e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the consumer got no answer after the drain timeout")
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent's request was not cancelled")
	}
}

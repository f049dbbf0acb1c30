package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
)

// runAgent answers every run with RUN_STARTED and RUN_FINISHED for its runId.
func runAgent(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	run := between(string(b), `"runId":"`, `"`)
	w.Header().Set("Content-Type", "text/event-stream")
	io.WriteString(w, frame(`{"type":"RUN_STARTED","threadId":"t","runId":"`+run+`"}`))
	io.WriteString(w, frame(`{"type":"RUN_FINISHED","threadId":"t","runId":"`+run+`"}`))
}

// TestConsumerKeepsItsConnection pins that an HTTP/1.1 consumer's
// connection outlives a stream: several runs, one after the other, over one
// connection, each a complete stream, and the connection still open after
// the last.
func TestConsumerKeepsItsConnection(t *testing.T) {
	h := newHarness(t, runAgent)
	rc := dialRaw(t, h.url)
	for i := range 4 {
		run := fmt.Sprint("r", i)
		rc.post(t, "/agent", runInput("t", run), "")
		resp, body := rc.response(t)
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("run %d: status %d, Connection: close %v", i, resp.StatusCode, resp.Close)
		}
		if !strings.Contains(body, `"type":"RUN_FINISHED","threadId":"t","runId":"`+run+`"`) {
			t.Fatalf("run %d: body %q", i, body)
		}
	}
	// A request that is not a run still works on the same connection.
	rc.send(t, "GET /info HTTP/1.1\r\nHost: aguard\r\n\r\n")
	if resp, _ := rc.response(t); resp.StatusCode != 200 {
		t.Fatalf("GET after the runs: %d", resp.StatusCode)
	}
}

// TestConnectionCloseStillCloses pins that a consumer asking for
// Connection: close gets it: the stream says so and the connection ends
// after it. An HTTP/1.0 consumer (whose stream runs to the close) too.
func TestConnectionCloseStillCloses(t *testing.T) {
	h := newHarness(t, runAgent)
	rc := dialRaw(t, h.url)
	rc.post(t, "/agent", runInput("t", "r"), "Connection: close\r\n")
	resp, body := rc.response(t)
	if resp.StatusCode != 200 || !resp.Close || !strings.Contains(body, "RUN_FINISHED") {
		t.Fatalf("status %d, Connection: close %v, body %q", resp.StatusCode, resp.Close, body)
	}
	if !rc.closed(t) {
		t.Fatal("the connection stayed open after a stream the consumer asked to close")
	}

	rc = dialRaw(t, h.url)
	body10 := runInput("t", "r10")
	rc.send(t, fmt.Sprintf("POST /agent HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s", len(body10), body10))
	resp, body = rc.response(t)
	if resp.StatusCode != 200 || !strings.Contains(body, "RUN_FINISHED") {
		t.Fatalf("HTTP/1.0: status %d, body %q", resp.StatusCode, body)
	}
	if !rc.closed(t) {
		t.Fatal("the connection stayed open after an HTTP/1.0 stream")
	}
}

// TestConsumerLeavingBeforeHeadersCancelsTheAgent pins that a consumer who
// leaves while the agent still holds its response headers is noticed at
// once: the agent's request is cancelled then (not when --upstream-timeout
// runs out, set to an hour here), and a drain does not wait for it.
func TestConsumerLeavingBeforeHeadersCancelsTheAgent(t *testing.T) {
	arrived := make(chan struct{}, 1)
	cancelled := make(chan struct{}, 1)
	release := make(chan struct{})
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		arrived <- struct{}{}
		select { // holds its headers until aguard gives up
		case <-r.Context().Done():
			cancelled <- struct{}{}
		case <-release: // the test is over
		}
	}, func(o *Options) { o.UpstreamTimeout = time.Hour })
	t.Cleanup(func() { close(release) })
	rc := dialRaw(t, h.url)
	rc.post(t, "/agent", runInput("t", "r"), "")
	<-arrived
	rc.c.Close()
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent's request was not cancelled after the consumer left")
	}
	await.Within(t, 10*time.Second, "the request to be released", func() bool { return h.p.inFlight() == 0 })
}

// TestBareLFAnsweredAtOnce pins that a request whose line or headers end in
// a bare LF is answered 400 at once, not left waiting for the read timeout,
// and never reaches the agent.
func TestBareLFAnsweredAtOnce(t *testing.T) {
	var calls atomic.Int32
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) { calls.Add(1); runAgent(w, r) })
	body := runInput("t", "r")
	for name, req := range map[string]string{
		"every line":       "POST /agent HTTP/1.1\nHost: aguard\nContent-Length: %d\n\n%s",
		"the request line": "POST /agent HTTP/1.1\nHost: aguard\r\nContent-Length: %d\r\n\r\n%s",
		"one header":       "POST /agent HTTP/1.1\r\nHost: aguard\nContent-Length: %d\r\n\r\n%s",
		"the blank line":   "POST /agent HTTP/1.1\r\nHost: aguard\r\nContent-Length: %d\r\n\n%s",
	} {
		t.Run(name, func(t *testing.T) {
			rc := dialRaw(t, h.url)
			rc.send(t, fmt.Sprintf(req, len(body), body))
			resp, b := rc.response(t)
			if resp.StatusCode != 400 || !strings.Contains(b, `"code":"bad_request"`) {
				t.Fatalf("got %d %s", resp.StatusCode, b)
			}
		})
	}
	// A body may hold bare LFs: only the head is held to CRLF.
	rc := dialRaw(t, h.url)
	pretty := "{\n\"threadId\": \"t\",\n\n\"runId\": \"pretty\", \"messages\": []}\n"
	rc.post(t, "/agent", pretty, "")
	if resp, b := rc.response(t); resp.StatusCode != 200 || !strings.Contains(b, "RUN_FINISHED") {
		t.Fatalf("a body with bare LFs: %d %s", resp.StatusCode, b)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the agent was called %d times, want 1", n)
	}
}

// acceptCounter wraps a listener and counts the connections it accepts.
type acceptCounter struct {
	net.Listener
	n atomic.Int64
}

func (l *acceptCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

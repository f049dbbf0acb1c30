package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives the tests: a stream
// pump, a reader, a consumer watcher or a connection left behind. Two fasthttp
// housekeeping goroutines are exempt: they sleep on a fixed 10 s tick and exit
// at the next one after shutdown, holding nothing; and so is the clock
// goroutine fasthttp starts once per process.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	)
}

// harness is aguard in front of a scripted agent, both on loopback.
type harness struct {
	p     *Proxy
	url   string // aguard's base URL
	agent *httptest.Server
}

func newHarness(t testing.TB, agent http.HandlerFunc, opts ...func(*Options)) *harness {
	t.Helper()
	ag := httptest.NewServer(agent)
	t.Cleanup(ag.Close)
	opt := Options{Upstream: ag.URL, Metrics: NewMetrics(prometheus.NewRegistry())}
	for _, o := range opts {
		o(&opt)
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
	return &harness{p: p, url: "http://" + ln.Addr().String(), agent: ag}
}

// runInput is a minimal valid RunAgentInput for thread and run.
func runInput(thread, run string) string {
	return fmt.Sprintf(`{"threadId":%q,"runId":%q,"protocolVersion":"1.0","messages":[],"tools":[],"context":[],"state":{},"forwardedProps":{}}`, thread, run)
}

// post sends a run to aguard and returns the response; the caller closes it.
func (h *harness) post(t *testing.T, ctx context.Context, path, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", h.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// frames reads a consumer stream as aguard frames it: every frame must be
// exactly "data: <one line>\n\n" or ": ping\n\n".
type frames struct {
	r *bufio.Reader
}

// next returns the next data frame's JSON, skipping pings; io.EOF at the end.
func (f *frames) next() (string, error) {
	for {
		line, err := f.r.ReadString('\n')
		if err != nil {
			if err == io.EOF && line != "" {
				return "", fmt.Errorf("stream ended inside a frame: %q", line)
			}
			return "", err
		}
		blank, err := f.r.ReadString('\n')
		if err != nil || blank != "\n" {
			return "", fmt.Errorf("frame %q not followed by a blank line (got %q, %v)", line, blank, err)
		}
		if line == ": ping\n" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			return "", fmt.Errorf("unexpected frame line %q", line)
		}
		return strings.TrimSuffix(data, "\n"), nil
	}
}

// readAll reads every data frame until the end of the stream.
func readAll(t *testing.T, body io.Reader) []string {
	t.Helper()
	f := &frames{r: bufio.NewReader(body)}
	var out []string
	for {
		ev, err := f.next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("after %d events: %v", len(out), err)
		}
		out = append(out, ev)
	}
}

// sseAgent answers every POST with the given raw SSE body chunks, flushing
// each, and records the last request.
func sseAgent(chunks ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range chunks {
			io.WriteString(w, c)
			w.(http.Flusher).Flush()
		}
	}
}

func frame(json string) string { return "data: " + json + "\n\n" }

// waitingAgent starts run r of thread t, then waits: it finishes the run
// once release is closed, and returns if the request ends first.
func waitingAgent(release <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, frame(`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, frame(`{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`))
	}
}

// field returns a top-level string field of an event.
func field(t *testing.T, event, name string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(event), &m); err != nil {
		t.Fatalf("event %q is not JSON: %v", event, err)
	}
	s, _ := m[name].(string)
	return s
}

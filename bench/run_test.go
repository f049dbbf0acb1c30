package bench_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aguard/aguard/policy"
	"github.com/aguard/aguard/proxy"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkRun is one whole run through aguard over loopback sockets: the
// consumer's POST, the agent's request, and a stream of RUN_STARTED, 20
// text events, an agent-side tool call (decided twice by the default
// policy) and its result, RUN_FINISHED. It is the unit tracing adds its
// spans to (README, "Tracing"), measured with tracing off here and, with
// the exporter aguard serve uses, on at 100 % sampling in
// BenchmarkRunTraced.
//
//	go test -run '^$' -bench 'Run$|RunTraced' -benchmem -count 6 ./bench/
func BenchmarkRun(b *testing.B) { benchRun(b, nil) }

// runAgent answers every run with the stream BenchmarkRun describes.
func runAgent() http.Handler {
	var events strings.Builder
	events.WriteString("data: {\"type\":\"RUN_STARTED\",\"threadId\":\"t-1\",\"runId\":\"r-1\"}\n\n")
	events.WriteString("data: {\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m-1\",\"role\":\"assistant\"}\n\n")
	for range 20 {
		events.WriteString("data: {\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m-1\",\"delta\":\"" + strings.Repeat("x", 64) + "\"}\n\n")
	}
	events.WriteString("data: {\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m-1\"}\n\n")
	events.WriteString("data: {\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"c-1\",\"toolCallName\":\"lookup\"}\n\n")
	events.WriteString("data: {\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"c-1\",\"delta\":\"{\\\"q\\\":\\\"x\\\"}\"}\n\n")
	events.WriteString("data: {\"type\":\"TOOL_CALL_END\",\"toolCallId\":\"c-1\"}\n\n")
	events.WriteString("data: {\"type\":\"TOOL_CALL_RESULT\",\"messageId\":\"m-2\",\"toolCallId\":\"c-1\",\"content\":\"found\"}\n\n")
	events.WriteString("data: {\"type\":\"RUN_FINISHED\",\"threadId\":\"t-1\",\"runId\":\"r-1\"}\n\n")
	body := events.String()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, body)
	})
}

// benchRun runs b.N runs through a proxy with opts applied.
func benchRun(b *testing.B, set func(*proxy.Options)) {
	agent := httptest.NewServer(runAgent())
	defer agent.Close()
	engine, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	opt := proxy.Options{Upstream: agent.URL, Policy: engine, Metrics: proxy.NewMetrics(prometheus.NewRegistry())}
	if set != nil {
		set(&opt)
	}
	url, stop := serveProxy(b, opt)
	defer stop()
	input := `{"threadId":"t-1","runId":"r-1","protocolVersion":"1.0","messages":[],"tools":[],"context":[],"state":{},"forwardedProps":{}}`
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequest("POST", url, strings.NewReader(input))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(out), "RUN_FINISHED") {
			b.Fatalf("stream: %s", out)
		}
	}
}

// serveProxy serves a proxy built with opt on a loopback listener and
// returns its agent endpoint's URL, and the function that closes it.
func serveProxy(b *testing.B, opt proxy.Options) (url string, stop func()) {
	b.Helper()
	p, err := proxy.New(opt)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go p.Serve(ln)
	return "http://" + ln.Addr().String() + "/agent", func() { p.Close() }
}

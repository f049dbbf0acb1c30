package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/bench/internal/sim"
	"github.com/aguard/aguard/internal/redistest"
	"github.com/aguard/aguard/policy"
	"github.com/aguard/aguard/proxy"
	"github.com/aguard/aguard/state"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkToolRun is one run of bench/run.sh's tool-call workload through
// aguard over loopback sockets, unpaced: a RunAgentInput advertising
// bench_frontend_tool on a thread of its own, and the agent's answer of
// RUN_STARTED, 200 text events in three messages, two frontend calls of
// 1 KiB arguments (four TOOL_CALL_ARGS each) decided by the default policy,
// and RUN_FINISHED with both calls pending. Without a ledger, with the
// ledger in-process (aguard serve without --redis) and in front of a
// throwaway redis-server (--redis). The JSON logger writes to io.Discard,
// so what logging costs is counted.
//
//	go test -run '^$' -bench ToolRun -benchmem -benchtime 2000x ./bench/
func BenchmarkToolRun(b *testing.B) {
	b.Run("ledger=none", func(b *testing.B) { benchToolRun(b, nil) })
	b.Run("ledger=memory", func(b *testing.B) { benchToolRun(b, &state.Options{}) })
	b.Run("ledger=redis", func(b *testing.B) {
		benchToolRun(b, &state.Options{RedisURL: redistest.Start(b).URL()})
	})
}

// toolAgent answers every run with the tool-call workload's stream, sent
// in one write, on the thread and run the input names.
func toolAgent(b *testing.B) http.Handler {
	cfg := sim.Config{Events: 200, Delta: 64, Tools: 2, Args: 1024, Frontend: true}
	var run frames
	sim.Run(&run, cfg, "@thread@", "@run@")
	body := run.Bytes()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			ThreadID string `json:"threadId"`
			RunID    string `json:"runId"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			b.Errorf("agent: %v", err)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		out := bytes.ReplaceAll(bytes.ReplaceAll(body, []byte(`"@thread@"`), strconv.AppendQuote(nil, in.ThreadID)),
			[]byte(`"@run@"`), strconv.AppendQuote(nil, in.RunID))
		w.Write(out)
	})
}

// frames is a sim.Sink collecting a run's SSE frames, unpaced.
type frames struct{ bytes.Buffer }

func (f *frames) Frame(ev []byte) bool {
	f.WriteString("data: ")
	f.Write(ev)
	f.WriteString("\n\n")
	return true
}
func (f *frames) Wait() bool              { return true }
func (f *frames) Idle(hold time.Duration) {}

// benchToolRun runs b.N tool-call runs through a proxy, with a ledger
// opened with ledger when it is not nil.
func benchToolRun(b *testing.B, ledger *state.Options) {
	agent := httptest.NewServer(toolAgent(b))
	defer agent.Close()
	ctx := context.Background()
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	engine, err := policy.New(ctx, policy.Options{Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	opt := proxy.Options{Upstream: agent.URL, Policy: engine, Logger: logger, Metrics: proxy.NewMetrics(prometheus.NewRegistry())}
	if ledger != nil {
		ledger.Logger = logger
		s, err := state.Open(ctx, *ledger)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		opt.State = s
	}
	url, stop := serveProxy(b, opt)
	defer stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		n++
		input := `{"threadId":"bench-thread-` + strconv.Itoa(n) + `","runId":"bench-run-` + strconv.Itoa(n) + `",` +
			`"protocolVersion":"1.0","messages":[{"id":"u1","role":"user","content":"go"}],` +
			`"tools":[{"name":"` + sim.FrontendTool + `","description":"loadgen tool","parameters":{"type":"object"}}],` +
			`"context":[],"state":{},"forwardedProps":{}}`
		req, _ := http.NewRequest("POST", url, strings.NewReader(input))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.Contains(out, []byte(`"pendingToolCallIds":["c-0","c-1"]`)) {
			b.Fatalf("stream: %s", out)
		}
	}
}

package bench_test

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/agui"
	"github.com/aguard/aguard/policy"
	"github.com/aguard/aguard/proxy"
)

// The pipeline benchmarks run single upstream events through
// proxy.NewPipeline with the policy engine's default policy deciding tool
// calls, as aguard serve does: the per-event cost of aguard's checks without
// any I/O. The cost of the policy decision alone is BenchmarkDecide in
// package policy (go test -run '^$' -bench Decide -benchmem ./policy/).
//
//	go test -run '^$' -bench Pipeline -benchmem ./bench/

// benchInput advertises the frontend tool the tool-call benchmarks call,
// with a schema the default policy checks the arguments against.
func benchInput(legacy bool) string {
	pv := `"protocolVersion":"1.0",`
	if legacy {
		pv = ""
	}
	return `{"threadId":"t-1","runId":"r-1",` + pv + `"messages":[{"id":"u1","role":"user","content":"hi"}],` +
		`"tools":[{"name":"render","description":"render a document","parameters":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}],` +
		`"context":[],"state":{},"forwardedProps":{}}`
}

// newPipeline returns a pipeline past RUN_STARTED and an open text message
// m-1, deciding with engine.
func newPipeline(tb testing.TB, engine *policy.Engine, input string) *proxy.Pipeline {
	tb.Helper()
	in, err := agui.ParseRunInput([]byte(input))
	if err != nil {
		tb.Fatalf("ParseRunInput: %v", err)
	}
	opts := agui.Options{Decider: proxy.NewDecider(engine, in, "bench", policy.RequestInfo{Headers: map[string]string{}}, nil, time.Minute)}
	p := proxy.NewPipeline(in, opts)
	for _, ev := range []string{
		`{"type":"RUN_STARTED","threadId":"t-1","runId":"r-1"}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"m-1","role":"assistant"}`,
	} {
		if out := p.Feed(context.Background(), []byte(ev)); out.Done || len(out.Notes) != 0 {
			tb.Fatalf("setup event %s: %+v", ev, out)
		}
	}
	return p
}

func newEngine(tb testing.TB) *policy.Engine {
	tb.Helper()
	e, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		tb.Fatalf("policy.New: %v", err)
	}
	return e
}

// BenchmarkPipelineTextContent is the hot path: a 64-byte-delta
// TEXT_MESSAGE_CONTENT of an open message, forwarded byte for byte. It is
// expected to allocate nothing.
func BenchmarkPipelineTextContent(b *testing.B) {
	p := newPipeline(b, newEngine(b), benchInput(false))
	ev := []byte(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m-1","delta":"t=1795975658713590856;` + strings.Repeat("x", 42) + `"}`)
	b.SetBytes(int64(len(ev)))
	b.ReportAllocs()
	for b.Loop() {
		out := p.Feed(context.Background(), ev)
		if len(out.Events) != 1 || out.Done {
			b.Fatalf("output %+v", out)
		}
	}
}

// BenchmarkPipelineToolCall runs one frontend tool-call group per iteration:
// TOOL_CALL_START, the arguments in 256-byte TOOL_CALL_ARGS, and
// TOOL_CALL_END, where the default policy decides the call (schema check
// included) and allows it. Calls stay pending (the application answers
// them), so every 1,000 calls the run is replaced by a fresh one outside
// the timer.
func BenchmarkPipelineToolCall(b *testing.B) {
	for _, size := range []int{1 << 10, 10 << 10} {
		b.Run(strconv.Itoa(size>>10)+"KB", func(b *testing.B) {
			engine := newEngine(b)
			input := benchInput(false)
			args := `{"text":"` + strings.Repeat("a", size-len(`{"text":""}`)) + `"}`
			var chunks [][]byte
			for off := 0; off < len(args); off += 256 {
				chunks = append(chunks, []byte(strconv.Quote(args[off:min(off+256, len(args))])))
			}
			var buf []byte
			event := func(parts ...string) []byte {
				buf = buf[:0]
				for _, s := range parts {
					buf = append(buf, s...)
				}
				return buf
			}
			var p *proxy.Pipeline
			b.SetBytes(int64(len(args)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if i%1000 == 0 {
					b.StopTimer()
					p = newPipeline(b, engine, input)
					b.StartTimer()
				}
				id := "c-" + strconv.Itoa(i)
				p.Feed(context.Background(), event(`{"type":"TOOL_CALL_START","toolCallId":"`, id, `","toolCallName":"render","parentMessageId":"m-1"}`))
				for _, c := range chunks {
					buf = append(append(append(append(buf[:0], `{"type":"TOOL_CALL_ARGS","toolCallId":"`...), id...), `","delta":`...), c...)
					buf = append(buf, '}')
					p.Feed(context.Background(), buf)
				}
				out := p.Feed(context.Background(), event(`{"type":"TOOL_CALL_END","toolCallId":"`, id, `"}`))
				if len(out.Events) != 1 || out.Done || len(out.Notes) != 0 {
					b.Fatalf("TOOL_CALL_END: %+v", out)
				}
			}
		})
	}
}

// BenchmarkPipelineLegacyResult is the 0.x bridge: a consumer whose
// RunAgentInput has no protocolVersion, and an agent's TOOL_CALL_RESULT whose
// content is a list of text parts, flattened to one string.
func BenchmarkPipelineLegacyResult(b *testing.B) {
	p := newPipeline(b, newEngine(b), benchInput(true))
	for _, ev := range []string{
		`{"type":"TEXT_MESSAGE_END","messageId":"m-1"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"c-1","toolCallName":"search","parentMessageId":"m-1"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"c-1","delta":"{\"q\":\"weather\"}"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"c-1"}`,
	} {
		out := p.Feed(context.Background(), []byte(ev))
		// The default policy holds the agent's call to its own tool (not
		// one the application advertised) until its result, and says so
		// as the call starts.
		held := len(out.Notes) == 1 && out.Notes[0].Kind == "held" && out.Notes[0].ID == "c-1"
		if out.Done || len(out.Notes) != 0 && !(held && strings.Contains(ev, "TOOL_CALL_START")) {
			b.Fatalf("setup event %s: %+v", ev, out)
		}
	}
	ev := []byte(`{"type":"TOOL_CALL_RESULT","messageId":"tm-1","toolCallId":"c-1","content":[` +
		`{"type":"text","text":"Sunny, 21 degrees "},{"type":"text","text":"in Lisbon; "},{"type":"text","text":"light wind from the north."}]}`)
	want := []byte(`"content":"Sunny, 21 degrees in Lisbon; light wind from the north."`)
	// The first result releases the held call with it.
	if out := p.Feed(context.Background(), ev); len(out.Events) != 4 || out.Done {
		b.Fatalf("first result: %+v", out)
	}
	b.SetBytes(int64(len(ev)))
	b.ReportAllocs()
	for b.Loop() {
		out := p.Feed(context.Background(), ev)
		if len(out.Events) != 1 || out.Done || !bytes.Contains(out.Events[0].JSON, want) {
			b.Fatalf("output %+v", out)
		}
	}
}

// TODO(state): a benchmark of state writes (STATE_SNAPSHOT / STATE_DELTA
// through the state package) belongs here once that package lands.

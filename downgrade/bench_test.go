package downgrade

import (
	"testing"

	"github.com/aguard/aguard/agui"
)

func BenchmarkBridgeTextPassThrough(b *testing.B) {
	br := New()
	br.Event(agui.Event{Type: "RUN_STARTED", JSON: []byte(runStarted)}, nil, nil)
	ev := agui.Event{Type: "TEXT_MESSAGE_CONTENT", JSON: []byte(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"msg_01H8","delta":"The quick brown fox jumps over the lazy dog. "}`)}
	out := make([]agui.Event, 0, 4)
	notes := make([]agui.Note, 0, 4)
	b.ReportAllocs()
	b.SetBytes(int64(len(ev.JSON)))
	for b.Loop() {
		out, notes = br.Event(ev, out[:0], notes[:0])
	}
}

func BenchmarkBridgeFlatten(b *testing.B) {
	br := New()
	br.Event(agui.Event{Type: "RUN_STARTED", JSON: []byte(runStarted)}, nil, nil)
	ev := agui.Event{Type: "TOOL_CALL_RESULT", JSON: []byte(`{"type":"TOOL_CALL_RESULT","messageId":"tm_01","toolCallId":"call_01","content":[` +
		`{"type":"text","text":"Found 3 results for \"aguard\":\n"},` +
		`{"type":"image","source":{"type":"url","value":"https://example.com/chart.png","mimeType":"image/png"}},` +
		`{"type":"text","text":"1. Reverse proxy for AG-UI\n2. Policy engine\n3. Legacy bridge\n"},` +
		`{"type":"document","source":{"type":"file","value":"file-abc123","provider":"openai"},"metadata":{"filename":"report.pdf"}},` +
		`{"type":"text","text":"End of results."}],"role":"tool"}`)}
	out := make([]agui.Event, 0, 4)
	notes := make([]agui.Note, 0, 4)
	b.ReportAllocs()
	b.SetBytes(int64(len(ev.JSON)))
	for b.Loop() {
		out, notes = br.Event(ev, out[:0], notes[:0])
	}
}

package downgrade

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/aguard/aguard/agui"
)

// FuzzBridge feeds arbitrary event JSON to a Bridge, inside and outside a run,
// and to Input: nothing panics, and every event out is a compact JSON object
// whose type is the Event's Type.
func FuzzBridge(f *testing.F) {
	for _, s := range []string{
		runStarted, runFinished,
		result(`[` + text(`"a"`) + `,` + img + `,` + text(`"\u00e9\\"`) + `]`),
		result(`[{"type":"text","text":5}]`),
		snap(`{"id":"t1","role":"tool","toolCallId":"c1","content":[`+doc+`]}`, `{"id":"u","role":"user","content":[`+imgFile+`]}`),
		`{"type":"RUN_STARTED","protocolVersion":"1.0","threadId":"t","runId":"r","input":{"messages":[{"id":"t","role":"tool","content":[]}]}}`,
		finished(`{"type":"success","pendingToolCallIds":["c"]}`),
		finished(`{"type":"cancelled"}`),
		finished(`{"type":"interrupt","interrupts":[],"x":1}`),
		`{"type":"SUBAGENT_STARTED","subagentRunId":"s","name":"n"}`,
		`{"type":"TEXT_MESSAGE_CHUNK","delta":"x"}`,
		`{"type":"TOOL_CALL_RESULT","content":[{"type":"text","text":"a"}],"content":[{"type":"te\u0078t","text":"b"}]}`,
		`{"threadId":"t","messages":[{"role":"tool","content":[{"type":"text","text":"x"},{"type":"image"}]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if out, _, err := Input(data); err == nil && !json.Valid(out) {
			t.Fatalf("Input(%s) = invalid JSON %s", data, out)
		}
		var c bytes.Buffer
		if json.Compact(&c, data) != nil || c.Len() == 0 || c.Bytes()[0] != '{' {
			return // Bridge takes compact JSON objects, as agui delivers them
		}
		var head struct {
			Type any `json:"type"`
		}
		_ = json.Unmarshal(c.Bytes(), &head)
		typ, _ := head.Type.(string)
		ev := agui.Event{Type: typ, JSON: c.Bytes()}

		inRun := New()
		inRun.Event(agui.Event{Type: "RUN_STARTED", JSON: []byte(runStarted)}, nil, nil)
		inRun.Event(agui.Event{Type: "TEXT_MESSAGE_CHUNK", JSON: []byte(`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m"}`)}, nil, nil)
		for _, b := range []*Bridge{New(), inRun} {
			out, notes := b.Event(ev, nil, nil)
			out, notes = b.Event(agui.Event{Type: "RUN_FINISHED", JSON: []byte(runFinished)}, out, notes)
			for _, o := range out {
				var oc bytes.Buffer
				if err := json.Compact(&oc, o.JSON); err != nil || !bytes.Equal(oc.Bytes(), o.JSON) || o.JSON[0] != '{' {
					t.Fatalf("event %s gave output that is not a compact JSON object: %s", data, o.JSON)
				}
				var oh struct {
					Type any `json:"type"`
				}
				if err := json.Unmarshal(o.JSON, &oh); err != nil || oh.Type != any(o.Type) && !(o.Type == typ && head.Type == nil) {
					t.Fatalf("output %s has Type %q", o.JSON, o.Type)
				}
			}
			for _, n := range notes {
				if n.Kind != "downgrade" || n.Message == "" {
					t.Fatalf("note %+v", n)
				}
			}
		}
	})
}

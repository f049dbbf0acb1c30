package agui

import (
	"strings"
	"testing"
)

// TestPendingList pins RUN_FINISHED's outcome.pendingToolCallIds: exactly the
// calls started in this run and not answered by a forwarded TOOL_CALL_RESULT,
// in first-START order (https://docs.ag-ui.com, Tool Calls, Frontend tools).
func TestPendingList(t *testing.T) {
	const (
		startA = `{"type":"TOOL_CALL_START","toolCallId":"a","toolCallName":"confirm"}`
		endA   = `{"type":"TOOL_CALL_END","toolCallId":"a"}`
		startB = `{"type":"TOOL_CALL_START","toolCallId":"b","toolCallName":"search"}`
		endB   = `{"type":"TOOL_CALL_END","toolCallId":"b"}`
		resB   = `{"type":"TOOL_CALL_RESULT","messageId":"tb","toolCallId":"b","content":"x"}`
		startQ = `{"type":"TOOL_CALL_START","toolCallId":"q\"\n<","toolCallName":"other"}`
		endQ   = `{"type":"TOOL_CALL_END","toolCallId":"q\"\n<"}`
	)
	fin := func(rest string) string { return `{"type":"RUN_FINISHED","threadId":"t1","runId":"r1"` + rest + `}` }
	tests := []struct {
		name   string
		events []string
		want   string // the RUN_FINISHED the consumer gets
		note   string // the note kind expected, "" for none
	}{
		{"added when omitted", []string{startA, endA, startB, endB, fin(`,"usage":[{"inputTokens":3}]`)},
			fin(`,"usage":[{"inputTokens":3}],"outcome":{"type":"success","pendingToolCallIds":["a","b"]}`), "pending_added"},
		{"added to a success outcome without list", []string{startB, endB, startA, endA, fin(`,"outcome":{"type":"success","v":1}`)},
			fin(`,"outcome":{"type":"success","v":1,"pendingToolCallIds":["b","a"]}`), "pending_added"},
		{"null outcome replaced", []string{startA, endA, fin(`,"outcome":null`)},
			fin(`,"outcome":{"type":"success","pendingToolCallIds":["a"]}`), "pending_added"},
		{"wrong list replaced", []string{startA, endA, startB, endB, resB, fin(`,"outcome":{"type":"success","pendingToolCallIds":["b","a"]},"result":1`)},
			fin(`,"outcome":{"type":"success","pendingToolCallIds":["a"]},"result":1`), "pending_rewritten"},
		{"wrong order replaced", []string{startA, endA, startB, endB, fin(`,"outcome":{"type":"success","pendingToolCallIds":["b","a"]}`)},
			fin(`,"outcome":{"type":"success","pendingToolCallIds":["a","b"]}`), "pending_rewritten"},
		{"right list left", []string{startA, endA, startB, endB, resB, fin(`,"outcome":{"type":"success","pendingToolCallIds":["a"]}`)},
			fin(`,"outcome":{"type":"success","pendingToolCallIds":["a"]}`), ""},
		{"nothing pending, absent list left", []string{startB, endB, resB, fin(`,"outcome":{"type":"success"}`)},
			fin(`,"outcome":{"type":"success"}`), ""},
		{"nothing pending, empty list left", []string{fin(`,"outcome":{"type":"success","pendingToolCallIds":[]}`)},
			fin(`,"outcome":{"type":"success","pendingToolCallIds":[]}`), ""},
		{"nothing pending, no outcome left", []string{fin(``)}, fin(``), ""},
		{"nothing pending, wrong list becomes []", []string{startB, endB, resB, fin(`,"outcome":{"type":"success","pendingToolCallIds":["b"]}`)},
			fin(`,"outcome":{"type":"success","pendingToolCallIds":[]}`), "pending_rewritten"},
		{"reopened call counted once", []string{startA, endA, startA, endA, fin(``)},
			fin(`,"outcome":{"type":"success","pendingToolCallIds":["a"]}`), "pending_added"},
		{"ids are escaped", []string{startQ, endQ, fin(``)},
			fin(`,"outcome":{"type":"success","pendingToolCallIds":["q\"\n<"]}`), "pending_added"},
		{"cancelled left", []string{startA, endA, fin(`,"outcome":{"type":"cancelled"}`)}, fin(`,"outcome":{"type":"cancelled"}`), ""},
		{"unknown outcome left", []string{startA, endA, fin(`,"outcome":{"type":"later"}`)}, fin(`,"outcome":{"type":"later"}`), ""},
		{"interrupt with frontend call pending", []string{startA, endA, fin(`,"outcome":{"type":"interrupt","interrupts":[{"id":"i","reason":"x"}]}`)},
			fin(`,"outcome":{"type":"interrupt","interrupts":[{"id":"i","reason":"x"}]}`), "interrupt_frontend"},
	}
	in := mustInput(t, inputJSON)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			events := append([]string{runStarted}, tt.events...)
			r := feed(t, in, Options{}, true, events...)
			if got := r.last(); got != tt.want {
				t.Fatalf("RUN_FINISHED out:\n%s\nwant:\n%s", got, tt.want)
			}
			if got := strings.Join(r.noteKinds(), ","); got != tt.note {
				t.Fatalf("notes = %+v, want kind %q", r.notes, tt.note)
			}
		})
	}
}

// TestPendingPerRun: a call started in an earlier run is not pending in the
// next one.
func TestPendingPerRun(t *testing.T) {
	r := feed(t, nil, Options{}, true, runStarted,
		`{"type":"TOOL_CALL_START","toolCallId":"a","toolCallName":"x"}`, `{"type":"TOOL_CALL_END","toolCallId":"a"}`,
		runFinished, runStarted, runFinished)
	if r.last() != runFinished {
		t.Fatalf("second RUN_FINISHED = %s", r.last())
	}
}

// TestPendingEscapedKey: a member name spelled with escapes is the same
// member; the rewrite finds it.
func TestPendingEscapedKey(t *testing.T) {
	r := feed(t, nil, Options{}, true, runStarted,
		`{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"x"}`, `{"type":"TOOL_CALL_END","toolCallId":"c"}`,
		`{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","\u006futcome":{"type":"success","pendingToolCallIds":[]}}`)
	want := `{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","\u006futcome":{"type":"success","pendingToolCallIds":["c"]}}`
	if r.last() != want {
		t.Fatalf("got %s", r.last())
	}
}

package agui

import (
	"strings"
	"testing"
)

// https://docs.ag-ui.com, Tool Calls, Frontend tools: "A producer that calls a
// frontend tool MUST NOT answer it: no TOOL_CALL_RESULT, no fabricated tool
// message."

const (
	startConfirm = `{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"confirm"}`
	endConfirm   = `{"type":"TOOL_CALL_END","toolCallId":"c1"}`
	resultC1     = `{"type":"TOOL_CALL_RESULT","messageId":"tm1","toolCallId":"c1","content":"Forwarded to client"}`
)

func TestFabricatedResultDropped(t *testing.T) {
	in := mustInput(t, inputJSON)
	r := feed(t, in, Options{}, true, runStarted, startConfirm, endConfirm, resultC1, runFinished)
	want := []string{runStarted, startConfirm, endConfirm,
		`{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"success","pendingToolCallIds":["c1"]}}`}
	if strings.Join(r.out, "\n") != strings.Join(want, "\n") {
		t.Fatalf("out:\n%s\nwant:\n%s", strings.Join(r.out, "\n"), strings.Join(want, "\n"))
	}
	if r.notes[0].Kind != "fabricated_result" || r.notes[0].ID != "c1" {
		t.Fatalf("notes = %+v", r.notes)
	}
}

// TestResultKept pins the results that are not fabricated answers.
func TestResultKept(t *testing.T) {
	in := mustInput(t, inputJSON)
	answered := mustInput(t, `{"threadId":"t1","runId":"r2","messages":[`+
		`{"id":"a1","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{}"}}]},`+
		`{"id":"tm0","role":"tool","toolCallId":"c1","content":"yes"}],"tools":[{"name":"confirm","description":""}]}`)
	tests := []struct {
		name   string
		in     *RunInput
		events []string
	}{
		{"agent-side tool", in, []string{runStarted, `{"type":"TOOL_CALL_START","toolCallId":"c9","toolCallName":"search"}`, `{"type":"TOOL_CALL_END","toolCallId":"c9"}`,
			`{"type":"TOOL_CALL_RESULT","messageId":"tm","toolCallId":"c9","content":"ok"}`, runFinished}},
		{"result for an unknown call", in, []string{runStarted, `{"type":"TOOL_CALL_RESULT","messageId":"tm","toolCallId":"zz","content":"ok"}`, runFinished}},
		{"the application's own answer, replayed", answered, []string{runStarted,
			`{"type":"TOOL_CALL_RESULT","messageId":"tm0","toolCallId":"c1","content":"yes"}`, runFinished}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := feed(t, tt.in, Options{}, true, tt.events...)
			if len(r.notes) != 0 || strings.Join(r.out, "\n") != strings.Join(tt.events, "\n") {
				t.Fatalf("out = %q notes = %+v", r.out, r.notes)
			}
		})
	}
}

// TestFabricatedResultCallFromHistory: the call's name comes from the input's
// assistant toolCalls (a result for a call of an earlier run).
func TestFabricatedResultCallFromHistory(t *testing.T) {
	in := mustInput(t, `{"threadId":"t1","runId":"r2","messages":[`+
		`{"id":"a1","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{}"}}]}],`+
		`"tools":[{"name":"confirm","description":""}]}`)
	r := feed(t, in, Options{}, true, runStarted, resultC1, runFinished)
	if len(r.out) != 2 || r.notes[0].Kind != "fabricated_result" {
		t.Fatalf("out = %q notes = %+v", r.out, r.notes)
	}
}

func TestFabricatedToolMessageInSnapshot(t *testing.T) {
	in := mustInput(t, inputJSON)
	snap := `{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u1","role":"user","content":"hi"},` +
		`{"id":"a1","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{}"}}]},` +
		`{"id":"tm1","role":"tool","toolCallId":"c1","content":"done"},` +
		`{"id":"a2","role":"assistant","content":"ok"}],"x":1}`
	want := `{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u1","role":"user","content":"hi"},` +
		`{"id":"a1","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{}"}}]},` +
		`{"id":"a2","role":"assistant","content":"ok"}],"x":1}`
	r := feed(t, in, Options{}, true, runStarted, snap, runFinished)
	if r.out[1] != want {
		t.Fatalf("snapshot out:\n%s\nwant:\n%s", r.out[1], want)
	}
	if r.notes[0].Kind != "fabricated_result" || r.notes[0].ID != "c1" {
		t.Fatalf("notes = %+v", r.notes)
	}
}

func TestFabricatedToolMessageInRunStartedEcho(t *testing.T) {
	in := mustInput(t, inputJSON)
	echo := `{"type":"RUN_STARTED","threadId":"t1","runId":"r1","input":{"threadId":"t1","runId":"r1","messages":[` +
		`{"id":"tm1","role":"tool","toolCallId":"c1","content":"done"},{"id":"u1","role":"user","content":"hi"}],` +
		`"tools":[{"name":"confirm","description":"d"}]},"z":true}`
	want := `{"type":"RUN_STARTED","threadId":"t1","runId":"r1","input":{"threadId":"t1","runId":"r1","messages":[` +
		`{"id":"u1","role":"user","content":"hi"}],"tools":[{"name":"confirm","description":"d"}]},"z":true}`
	// The call is known from this stream's START, in an earlier run.
	r := feed(t, in, Options{}, true, runStarted, startConfirm, endConfirm, runFinished, echo,
		`{"type":"RUN_FINISHED","threadId":"t1","runId":"r1"}`)
	if r.out[4] != want {
		t.Fatalf("echo out:\n%s\nwant:\n%s", r.out[4], want)
	}
	var n int
	for _, note := range r.notes {
		if note.Kind == "fabricated_result" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("notes = %+v", r.notes)
	}
}

// TestConsumerToolMessageInEchoKept: the consumer's own answer, echoed back,
// is not fabricated.
func TestConsumerToolMessageInEchoKept(t *testing.T) {
	in := mustInput(t, `{"threadId":"t1","runId":"r2","messages":[`+
		`{"id":"a1","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{}"}}]},`+
		`{"id":"tm0","role":"tool","toolCallId":"c1","content":"yes"}],"tools":[{"name":"confirm","description":""}]}`)
	echo := `{"type":"RUN_STARTED","threadId":"t1","runId":"r2","input":{"threadId":"t1","runId":"r2","messages":[` +
		`{"id":"a1","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{}"}}]},` +
		`{"id":"tm0","role":"tool","toolCallId":"c1","content":"yes"}]}}`
	r := feed(t, in, Options{}, true, echo, runFinished)
	if r.out[0] != echo || len(r.notes) != 0 {
		t.Fatalf("out = %q notes = %+v", r.out, r.notes)
	}
}

package agui

import (
	"context"
	"strings"
	"testing"
)

// TestSequenceFatalRules pins every sequence rule the 1.0 client's verifier
// treats as fatal: the offending event never reaches the consumer, which gets
// RUN_ERROR AGUARD_PROTOCOL_VIOLATION instead, and the stream is over.
func TestSequenceFatalRules(t *testing.T) {
	tests := []struct {
		name   string
		events []string
		rule   string
	}{
		{"first event not RUN_STARTED", []string{`{"type":"TEXT_MESSAGE_START","messageId":"m"}`}, "first_event"},
		{"event after RUN_FINISHED", []string{runStarted, runFinished, `{"type":"TEXT_MESSAGE_START","messageId":"m"}`}, "event_after_run_finished"},
		{"nested RUN_STARTED", []string{runStarted, runStarted}, "run_already_started"},
		{"text start while open", []string{runStarted, `{"type":"TEXT_MESSAGE_START","messageId":"m"}`, `{"type":"TEXT_MESSAGE_START","messageId":"m"}`}, "text_message_already_open"},
		{"text content not open", []string{runStarted, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}`}, "text_message_not_open"},
		{"text end not open", []string{runStarted, `{"type":"TEXT_MESSAGE_END","messageId":"m"}`}, "text_message_not_open"},
		{"tool start while open", []string{runStarted, `{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"n"}`, `{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"n"}`}, "tool_call_already_open"},
		{"tool args not open", []string{runStarted, `{"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"{}"}`}, "tool_call_not_open"},
		{"tool args after end", []string{runStarted, `{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"n"}`, `{"type":"TOOL_CALL_END","toolCallId":"c"}`, `{"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"{}"}`}, "tool_call_not_open"},
		{"tool end not open", []string{runStarted, `{"type":"TOOL_CALL_END","toolCallId":"c"}`}, "tool_call_not_open"},
		{"reasoning message start while open", []string{runStarted, `{"type":"REASONING_MESSAGE_START","messageId":"r","role":"reasoning"}`, `{"type":"REASONING_MESSAGE_START","messageId":"r","role":"reasoning"}`}, "reasoning_already_open"},
		{"reasoning content not open", []string{runStarted, `{"type":"REASONING_MESSAGE_CONTENT","messageId":"r","delta":"x"}`}, "reasoning_not_open"},
		{"reasoning span end not open", []string{runStarted, `{"type":"REASONING_END","messageId":"r"}`}, "reasoning_not_open"},
		{"reasoning span start while open", []string{runStarted, `{"type":"REASONING_START","messageId":"r"}`, `{"type":"REASONING_START","messageId":"r"}`}, "reasoning_already_open"},
		{"thinking end without start", []string{runStarted, `{"type":"THINKING_END"}`}, "reasoning_not_open"},
		{"step started twice", []string{runStarted, `{"type":"STEP_STARTED","stepName":"s"}`, `{"type":"STEP_STARTED","stepName":"s"}`}, "step_already_active"},
		{"step finished not started", []string{runStarted, `{"type":"STEP_FINISHED","stepName":"s"}`}, "step_not_active"},
		{"step finished by other owner", []string{runStarted, `{"type":"STEP_STARTED","stepName":"s"}`, `{"type":"STEP_FINISHED","stepName":"s","subagentRunId":"a"}`}, "step_owner_mismatch"},
		{"subagent started twice", []string{runStarted, `{"type":"SUBAGENT_STARTED","subagentRunId":"a","name":"n"}`, `{"type":"SUBAGENT_STARTED","subagentRunId":"a","name":"n"}`}, "subagent_already_active"},
		{"subagent id reused", []string{runStarted, `{"type":"SUBAGENT_STARTED","subagentRunId":"a","name":"n"}`, `{"type":"SUBAGENT_FINISHED","subagentRunId":"a"}`, `{"type":"SUBAGENT_STARTED","subagentRunId":"a","name":"n"}`}, "subagent_reused"},
		{"subagent unknown parent", []string{runStarted, `{"type":"SUBAGENT_STARTED","subagentRunId":"a","name":"n","parentSubagentRunId":"zz"}`}, "subagent_unknown_parent"},
		{"subagent finished inactive", []string{runStarted, `{"type":"SUBAGENT_FINISHED","subagentRunId":"a"}`}, "subagent_not_active"},
		{"subagent error inactive", []string{runStarted, `{"type":"SUBAGENT_ERROR","subagentRunId":"a","message":"x"}`}, "subagent_not_active"},
		{"finish with open step", []string{runStarted, `{"type":"STEP_STARTED","stepName":"s"}`, runFinished}, "run_finished_with_open_steps"},
		{"finish with open message", []string{runStarted, `{"type":"TEXT_MESSAGE_START","messageId":"m"}`, runFinished}, "run_finished_with_open_messages"},
		{"finish with open reasoning", []string{runStarted, `{"type":"REASONING_START","messageId":"r"}`, runFinished}, "run_finished_with_open_reasoning"},
		{"finish with open thinking", []string{runStarted, `{"type":"THINKING_START"}`, runFinished}, "run_finished_with_open_reasoning"},
		{"finish with open call", []string{runStarted, `{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"n"}`, runFinished}, "run_finished_with_open_tool_calls"},
		{"finish with active subagent", []string{runStarted, `{"type":"SUBAGENT_STARTED","subagentRunId":"a","name":"n"}`, runFinished}, "run_finished_with_active_subagents"},
		{"continuation owner mismatch", []string{runStarted, `{"type":"TEXT_MESSAGE_START","messageId":"m"}`, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x","subagentRunId":"a"}`}, "owner_mismatch"},
		{"tool start vs parent message owner", []string{runStarted, `{"type":"TEXT_MESSAGE_START","messageId":"m","subagentRunId":"a"}`, `{"type":"TEXT_MESSAGE_END","messageId":"m"}`, `{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"n","parentMessageId":"m","subagentRunId":"b"}`}, "owner_mismatch"},
		{"reopen under another owner", []string{runStarted, `{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"n","subagentRunId":"a"}`, `{"type":"TOOL_CALL_END","toolCallId":"c"}`, `{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"n","subagentRunId":"b"}`}, "owner_mismatch"},
		{"reopen with another name", []string{runStarted, `{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"search"}`, `{"type":"TOOL_CALL_END","toolCallId":"c"}`, `{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"delete"}`}, "tool_call_reopen_mismatch"},
		{"reopen with another parent", []string{runStarted, `{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"n","parentMessageId":"m1"}`, `{"type":"TOOL_CALL_END","toolCallId":"c"}`, `{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"n","parentMessageId":"m2"}`}, "tool_call_reopen_mismatch"},
		{"reopen dropping the parent", []string{runStarted, `{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"n","parentMessageId":"m1"}`, `{"type":"TOOL_CALL_END","toolCallId":"c"}`, `{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"n"}`}, "tool_call_reopen_mismatch"},
		{"snapshot owner vs tagged continuation", []string{runStarted, `{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"m","role":"assistant","subagentRunId":"a"}]}`, `{"type":"TEXT_MESSAGE_START","messageId":"m","subagentRunId":"b"}`}, "owner_mismatch"},
		{"encrypted value owner", []string{runStarted, `{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"n","subagentRunId":"a"}`, `{"type":"REASONING_ENCRYPTED_VALUE","subtype":"tool-call","entityId":"c","encryptedValue":"x","subagentRunId":"b"}`}, "owner_mismatch"},
		{"activity delta owner", []string{runStarted, `{"type":"ACTIVITY_SNAPSHOT","messageId":"a1","activityType":"x","content":{}}`, `{"type":"ACTIVITY_DELTA","messageId":"a1","activityType":"x","patch":[],"subagentRunId":"s"}`}, "owner_mismatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := feed(t, nil, Options{}, false, tt.events...)
			wantViolation(t, r, tt.rule)
			// Everything before the offending event was forwarded, the
			// offending event was not.
			if got, want := len(r.out), len(tt.events); got != want {
				t.Fatalf("got %d events out, want %d (all but the offender, plus RUN_ERROR): %q", got, want, r.out)
			}
		})
	}
}

// TestAfterRunErrorOnlyRunStarted: after RUN_ERROR only RUN_STARTED may follow,
// and aguard cannot add a second RUN_ERROR; it just ends the stream.
func TestAfterRunErrorOnlyRunStarted(t *testing.T) {
	r := feed(t, nil, Options{}, false, runStarted, `{"type":"RUN_ERROR","message":"boom"}`, `{"type":"CUSTOM","name":"x","value":1}`)
	if !r.done || len(r.out) != 2 {
		t.Fatalf("out = %q done = %v; want the two events and the end", r.out, r.done)
	}
	if k := r.noteKinds(); len(k) != 1 || r.notes[0].Rule != "event_after_run_error" {
		t.Fatalf("notes = %+v", r.notes)
	}
}

// TestSeveralRuns: state resets on RUN_STARTED; ids may be reused by the next
// run; RUN_ERROR after RUN_FINISHED is legal; RUN_STARTED after RUN_ERROR too.
func TestSeveralRuns(t *testing.T) {
	events := []string{
		runStarted,
		`{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"n"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"c"}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"tm","toolCallId":"c","content":"ok"}`,
		runFinished,
		`{"type":"RUN_ERROR","message":"late"}`,
		`{"type":"RUN_STARTED","threadId":"t1","runId":"r2"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"other"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"c"}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"tm2","toolCallId":"c","content":"ok"}`,
		`{"type":"RUN_FINISHED","threadId":"t1","runId":"r2"}`,
	}
	r := feed(t, nil, Options{}, true, events...)
	if len(r.notes) != 0 {
		t.Fatalf("notes = %+v", r.notes)
	}
	if strings.Join(r.out, "\n") != strings.Join(events, "\n") {
		t.Fatalf("out differs:\n%s", strings.Join(r.out, "\n"))
	}
	if !r.done {
		t.Fatal("End did not set Done")
	}
}

// TestDoneAfterFatal: once the stream is over, Feed, End and Abort emit nothing.
func TestDoneAfterFatal(t *testing.T) {
	s := NewStream(nil, Options{})
	var b Batch
	s.Feed(context.Background(), []byte(`{"type":"TEXT_MESSAGE_START","messageId":"m"}`), &b)
	if !b.Done || len(b.Out) != 1 {
		t.Fatalf("first batch: %+v", b)
	}
	s.Feed(context.Background(), []byte(runStarted), &b)
	if !b.Done || len(b.Out) != 0 || len(b.Notes) != 0 {
		t.Fatalf("Feed after end: %+v", b)
	}
	s.End(nil, &b)
	if !b.Done || len(b.Out) != 0 {
		t.Fatalf("End after end: %+v", b)
	}
	s.Abort(CodeShutdown, "bye", &b)
	if !b.Done || len(b.Out) != 0 {
		t.Fatalf("Abort after end: %+v", b)
	}
}

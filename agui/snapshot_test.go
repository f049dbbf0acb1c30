package agui

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/aguard/aguard/internal/aguicheck"
)

// The tests in this file pin how aguard reads the messages an agent replays
// (MESSAGES_SNAPSHOT, the RUN_STARTED input echo) in the shapes a LangGraph
// agent produces: a ToolNode that answers a frontend call itself with an
// error tool message, replayed in every later snapshot; and calls that the
// adapter never streamed, seen only in a snapshot's assistant message.

// answeredInput is the input of a run whose application answered the
// frontend call c1 (tool message app-c1).
const answeredInput = `{"threadId":"t1","runId":"r2","protocolVersion":"1.0","messages":[{"id":"u1","role":"user","content":"hi"},` +
	`{"id":"a1","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{}"}}]},` +
	`{"id":"app-c1","role":"tool","toolCallId":"c1","content":"yes"}],"tools":[{"name":"confirm","description":"d"}]}`

const (
	msgUser      = `{"id":"u1","role":"user","content":"hi"}`
	msgCallC1    = `{"id":"a1","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{}"}}]}`
	msgAppC1     = `{"id":"app-c1","role":"tool","toolCallId":"c1","content":"yes"}`
	msgToolNode1 = `{"id":"err-c1","role":"tool","toolCallId":"c1","content":"Error: Tool \"confirm\" not found"}`
	msgDone      = `{"id":"a2","role":"assistant","content":"done"}`
)

func snapshot(msgs ...string) string {
	return `{"type":"MESSAGES_SNAPSHOT","messages":[` + strings.Join(msgs, ",") + `]}`
}

func noteCount(r result, kind string) int {
	n := 0
	for _, note := range r.notes {
		if note.Kind == kind {
			n++
		}
	}
	return n
}

func wantOut(t *testing.T, r result, want ...string) {
	t.Helper()
	if strings.Join(r.out, "\n") != strings.Join(want, "\n") {
		t.Fatalf("out:\n%s\nwant:\n%s", strings.Join(r.out, "\n"), strings.Join(want, "\n"))
	}
}

// TestReplayedFabricatedAnswerRemovedFromSnapshot: one run after the
// ToolNode made up an answer, the application answers the call itself; the
// agent's snapshot replays both. Only the application's reaches the consumer.
func TestReplayedFabricatedAnswerRemovedFromSnapshot(t *testing.T) {
	in := mustInput(t, answeredInput)
	r := feed(t, in, Options{}, true, runStarted, snapshot(msgUser, msgCallC1, msgToolNode1, msgAppC1, msgDone), runFinished)
	wantOut(t, r, runStarted, snapshot(msgUser, msgCallC1, msgAppC1, msgDone), runFinished)
	if noteCount(r, "fabricated_result") != 1 || r.notes[0].ID != "c1" {
		t.Fatalf("notes = %+v", r.notes)
	}
}

// TestReplayedFabricatedAnswerRemovedFromEcho: the same in the RUN_STARTED
// input echo, which the official client adds to the messages it holds.
func TestReplayedFabricatedAnswerRemovedFromEcho(t *testing.T) {
	in := mustInput(t, answeredInput)
	echo := func(msgs ...string) string {
		return `{"type":"RUN_STARTED","threadId":"t1","runId":"r2","input":{"threadId":"t1","runId":"r2","messages":[` + strings.Join(msgs, ",") + `]}}`
	}
	r := feed(t, in, Options{}, true, echo(msgUser, msgCallC1, msgToolNode1, msgAppC1), runFinished)
	wantOut(t, r, echo(msgUser, msgCallC1, msgAppC1), runFinished)
	if noteCount(r, "fabricated_result") != 1 {
		t.Fatalf("notes = %+v", r.notes)
	}
}

// TestResultThatIsNotTheApplicationsDropped: a TOOL_CALL_RESULT for a call
// the application answered reaches the consumer only when it is the
// application's own tool message (same message id).
func TestResultThatIsNotTheApplicationsDropped(t *testing.T) {
	in := mustInput(t, answeredInput)
	own := `{"type":"TOOL_CALL_RESULT","messageId":"app-c1","toolCallId":"c1","content":"yes"}`
	forged := `{"type":"TOOL_CALL_RESULT","messageId":"err-c1","toolCallId":"c1","content":"yes"}`
	r := feed(t, in, Options{}, true, runStarted, own, forged, runFinished)
	wantOut(t, r, runStarted, own, runFinished)
	if noteCount(r, "fabricated_result") != 1 {
		t.Fatalf("notes = %+v", r.notes)
	}
	if got := r.callKinds(); !slices.Equal(got, []string{"answered c1"}) {
		t.Fatalf("calls = %v", got)
	}
}

// TestOwnAnswerMatchedByContentWhereIDsAreAbsent: a tool message without an
// id (the empty string) is the application's when its content is.
func TestOwnAnswerMatchedByContentWhereIDsAreAbsent(t *testing.T) {
	in := mustInput(t, strings.Replace(answeredInput, `"id":"app-c1"`, `"id":""`, 1))
	same := `{"id":"","role":"tool","toolCallId":"c1","content":"yes"}`
	other := `{"id":"","role":"tool","toolCallId":"c1","content":"no"}`
	sameByContent := `{"id":"x1","role":"tool","toolCallId":"c1","content":"yes"}`
	r := feed(t, in, Options{}, true, runStarted, snapshot(msgCallC1, same, other, sameByContent), runFinished)
	wantOut(t, r, runStarted, snapshot(msgCallC1, same, sameByContent), runFinished)
}

// TestSnapshotIntroducesCall: the adapter streamed text and no TOOL_CALL_*;
// the call exists only in the snapshot's assistant message, next to the
// ToolNode's made-up answer. It is a call this run started: reported, put to
// the Decider with the snapshot's arguments, and pending.
func TestSnapshotIntroducesCall(t *testing.T) {
	in := mustInput(t, inputJSON)
	asst := `{"id":"m1","role":"assistant","content":"Let me confirm.","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{\"orderId\":\"A\"}"}}]}`
	d := &byName{}
	r := feed(t, in, Options{Decider: d}, true, runStarted,
		`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"Let me confirm."}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
		snapshot(msgUser, asst, msgToolNode1), runFinished)
	if r.out[4] != snapshot(msgUser, asst) {
		t.Fatalf("snapshot out = %s", r.out[4])
	}
	if r.last() != `{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"success","pendingToolCallIds":["c1"]}}` {
		t.Fatalf("RUN_FINISHED = %s", r.last())
	}
	if got := r.callKinds(); !slices.Equal(got, []string{"started c1", "arguments_complete c1", "decided c1"}) {
		t.Fatalf("calls = %v", got)
	}
	if !r.calls[0].Frontend || r.calls[0].Name != "confirm" || string(r.calls[1].Arguments) != `{"orderId":"A"}` {
		t.Fatalf("calls = %+v", r.calls)
	}
	if len(d.asked) != 1 {
		t.Fatalf("asked = %+v", d.asked)
	}
	c := d.asked[0]
	if c.Phase != PhaseToolCallEnd || c.ID != "c1" || c.Name != "confirm" || string(c.Arguments) != `{"orderId":"A"}` ||
		c.ParentMessageID != "m1" || !c.Frontend || c.Reopened {
		t.Fatalf("asked %+v", c)
	}
	if got := r.runs[0].Pending; !slices.Equal(got, []string{"c1"}) {
		t.Fatalf("run pending = %v", got)
	}
}

// TestSecondCallOfAMessageSeenOnlyInSnapshot: the first call of a message
// was streamed, the second was not; both are pending, in order.
func TestSecondCallOfAMessageSeenOnlyInSnapshot(t *testing.T) {
	in := mustInput(t, inputJSON)
	asst := `{"id":"m1","role":"assistant","toolCalls":[` +
		`{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{}"}},` +
		`{"id":"c2","type":"function","function":{"name":"confirm","arguments":"{\"n\":2}"}}]}`
	err2 := `{"id":"err-c2","role":"tool","toolCallId":"c2","content":"Error: Tool \"confirm\" not found"}`
	r := feed(t, in, Options{}, true, runStarted,
		`{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"confirm","parentMessageId":"m1"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"{}"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"c1"}`,
		snapshot(msgUser, asst, msgToolNode1, err2), runFinished)
	if r.out[4] != snapshot(msgUser, asst) {
		t.Fatalf("snapshot out = %s", r.out[4])
	}
	if got := r.runs[0].Pending; !slices.Equal(got, []string{"c1", "c2"}) {
		t.Fatalf("pending = %v", got)
	}
	if got := r.callKinds(); !slices.Equal(got, []string{"started c1", "arguments_complete c1", "started c2", "arguments_complete c2"}) {
		t.Fatalf("calls = %v", got)
	}
}

// TestSnapshotCallAnsweredBySnapshot: an agent-side call seen only in a
// snapshot, with its tool message there, is answered: not pending, and the
// answer is reported.
func TestSnapshotCallAnsweredBySnapshot(t *testing.T) {
	in := mustInput(t, inputJSON)
	asst := `{"id":"m1","role":"assistant","toolCalls":[{"id":"s9","type":"function","function":{"name":"search","arguments":"{}"}}]}`
	res := `{"id":"r9","role":"tool","toolCallId":"s9","content":"found"}`
	r := feed(t, in, Options{Decider: &byName{}}, true, runStarted, snapshot(asst, res), runFinished)
	wantOut(t, r, runStarted, snapshot(asst, res), runFinished)
	if got := r.callKinds(); !slices.Equal(got, []string{"started s9", "arguments_complete s9", "decided s9", "answered s9"}) {
		t.Fatalf("calls = %v", got)
	}
	if a := r.calls[3]; a.Frontend || string(a.Content) != `"found"` {
		t.Fatalf("answer = %+v", a)
	}
	if len(r.runs[0].Pending) != 0 {
		t.Fatalf("pending = %v", r.runs[0].Pending)
	}
}

// TestSnapshotCallVerdicts pins what each verdict on a call seen only in a
// snapshot does: what it calls for follows the snapshot (which made the
// call known to the consumer), and the stream stays one the official client
// accepts.
func TestSnapshotCallVerdicts(t *testing.T) {
	asstC := `{"id":"m1","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{}"}}]}`
	asstS := `{"id":"m1","role":"assistant","toolCalls":[{"id":"s1","type":"function","function":{"name":"shell","arguments":"{}"}}]}`
	asstCK := `{"id":"m1","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{}"}},{"id":"k1","type":"function","function":{"name":"lookup","arguments":"{}"}}]}`
	toolK1 := `{"id":"tk1","role":"tool","toolCallId":"k1","content":"found"}`
	denied := `{"type":"CUSTOM","name":"aguard.tool_call_denied","value":{"toolCallId":"c1","toolCallName":"confirm","reason":"rule for confirm","decisionId":"d-c1"}}`
	declined := `{"type":"TOOL_CALL_RESULT","messageId":"aguard-declined-c1","toolCallId":"c1","role":"tool","content":"Declined by policy: rule for confirm"}`
	declinedMsg := `{"id":"aguard-declined-c1","role":"tool","toolCallId":"c1","content":"Declined by policy: rule for confirm"}`
	tests := []struct {
		name     string
		verdicts map[string]string
		events   []string
		want     []string
	}{{
		name:     "frontend call denied: declined after the snapshot, and kept in later snapshots",
		verdicts: map[string]string{"confirm": ActionDeny},
		events:   []string{runStarted, snapshot(msgUser, asstC), snapshot(msgUser, asstC, msgDone), runFinished},
		want: []string{runStarted, snapshot(msgUser, asstC), denied, declined,
			snapshot(msgUser, asstC, declinedMsg, msgDone), runFinished},
	}, {
		name:     "frontend call denied beside an agent-side call: kept after the tool messages that follow its message",
		verdicts: map[string]string{"confirm": ActionDeny},
		events:   []string{runStarted, snapshot(msgUser, asstCK), snapshot(msgUser, asstCK, toolK1, msgDone), runFinished},
		want: []string{runStarted, snapshot(msgUser, asstCK), denied, declined,
			snapshot(msgUser, asstCK, toolK1, declinedMsg, msgDone), runFinished},
	}, {
		name:     "frontend call requires approval: signalled after the snapshot, pending",
		verdicts: map[string]string{"confirm": ActionRequireApproval},
		events:   []string{runStarted, snapshot(asstC), runFinished},
		want: []string{runStarted, snapshot(asstC),
			`{"type":"CUSTOM","name":"aguard.approval_required","value":{"toolCallId":"c1","toolCallName":"confirm","requiresApprovalAt":"2026-11-29T18:00:00Z","reason":"rule for confirm","decisionId":"d-c1"}}`,
			`{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"success","pendingToolCallIds":["c1"]}}`},
	}, {
		name:     "agent-side call denied: the run ends",
		verdicts: map[string]string{"shell": ActionDeny},
		events:   []string{runStarted, snapshot(asstS), runFinished},
		want: []string{runStarted, snapshot(asstS),
			`{"type":"RUN_ERROR","code":"AGUARD_POLICY_DENIED","message":"tool call 's1' (shell) denied by policy: rule for shell (decision d-s1)"}`},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := mustInput(t, inputJSON)
			d := &byName{verdicts: tt.verdicts}
			r := feed(t, in, Options{Decider: d}, true, tt.events...)
			var outs [][]byte
			for _, o := range r.out {
				outs = append(outs, []byte(o))
			}
			if err := aguicheck.Check(outs); err != nil {
				t.Fatalf("output rejected: %v\n%s", err, strings.Join(r.out, "\n"))
			}
			wantOut(t, r, tt.want...)
		})
	}
}

// TestSnapshotCallDeclinedAtRunFinished: a call to an unadvertised tool seen
// only in a snapshot and left unanswered meets the run_finished phase like a
// streamed one.
func TestSnapshotCallDeclinedAtRunFinished(t *testing.T) {
	in := mustInput(t, inputJSON)
	asst := `{"id":"m1","role":"assistant","toolCalls":[{"id":"s1","type":"function","function":{"name":"shell","arguments":"{}"}}]}`
	d := unadvertisedDenier{}
	r := feed(t, in, Options{Decider: d}, true, runStarted, snapshot(asst), runFinished)
	wantOut(t, r, runStarted, snapshot(asst),
		`{"type":"CUSTOM","name":"aguard.tool_call_denied","value":{"toolCallId":"s1","toolCallName":"shell","reason":"unadvertised","decisionId":"d"}}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"aguard-declined-s1","toolCallId":"s1","role":"tool","content":"Declined by policy: unadvertised"}`,
		runFinished)
}

type unadvertisedDenier struct{}

func (unadvertisedDenier) Decide(_ context.Context, c *Call) Verdict {
	if c.Phase == PhaseToolCallStart {
		return Verdict{Action: ActionStream}
	}
	if c.Phase == PhaseRunFinished {
		return Verdict{Action: ActionDeny, Reason: "unadvertised", DecisionID: "d"}
	}
	return Verdict{Action: ActionAllow, DecisionID: "d"}
}

// TestKnownCallsNotStartedBySnapshot: calls the input carries, and calls an
// earlier run of the same response started, are history when a snapshot
// replays them.
func TestKnownCallsNotStartedBySnapshot(t *testing.T) {
	t.Run("in the input", func(t *testing.T) {
		in := mustInput(t, answeredInput)
		r := feed(t, in, Options{}, true, runStarted, snapshot(msgUser, msgCallC1, msgAppC1), runFinished)
		if len(r.calls) != 0 || len(r.runs[0].Pending) != 0 {
			t.Fatalf("calls = %v, pending = %v", r.callKinds(), r.runs[0].Pending)
		}
	})
	t.Run("started by an earlier run of the response", func(t *testing.T) {
		in := mustInput(t, inputJSON)
		run2 := `{"type":"RUN_STARTED","threadId":"t1","runId":"r2"}`
		fin2 := `{"type":"RUN_FINISHED","threadId":"t1","runId":"r2"}`
		r := feed(t, in, Options{}, true, runStarted, startConfirm, endConfirm, runFinished,
			run2, snapshot(msgUser, `{"id":"m","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{}"}}]}`), fin2)
		if got := r.callKinds(); !slices.Equal(got, []string{"started c1", "arguments_complete c1"}) {
			t.Fatalf("calls = %v", got)
		}
		if r.last() != fin2 || len(r.runs) != 2 || len(r.runs[1].Pending) != 0 {
			t.Fatalf("last = %s runs = %+v", r.last(), r.runs)
		}
	})
}

// TestEchoIntroducesCall: the official client adds the echo's messages to
// those it holds, so a call the echo carries and the input did not is one
// this run started, like a snapshot's.
func TestEchoIntroducesCall(t *testing.T) {
	in := mustInput(t, inputJSON)
	echo := `{"type":"RUN_STARTED","threadId":"t1","runId":"r1","input":{"threadId":"t1","runId":"r1","messages":[` + msgUser + `,` + msgCallC1 + `,` + msgToolNode1 + `]}}`
	r := feed(t, in, Options{}, true, echo, runFinished)
	if r.out[0] != strings.Replace(echo, ","+msgToolNode1, "", 1) {
		t.Fatalf("echo out = %s", r.out[0])
	}
	if got := r.runs[0].Pending; !slices.Equal(got, []string{"c1"}) {
		t.Fatalf("pending = %v", got)
	}
}

// TestStartAfterSnapshotReopensCall: a TOOL_CALL_START for a call a snapshot
// introduced reopens it; without a parentMessageId it still agrees with the
// message that carries it.
func TestStartAfterSnapshotReopensCall(t *testing.T) {
	in := mustInput(t, inputJSON)
	asst := `{"id":"m1","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{"}}]}`
	d := &byName{}
	r := feed(t, in, Options{Decider: d}, true, runStarted, snapshot(asst),
		`{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"confirm"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"}"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"c1"}`, runFinished)
	if len(r.notes) != 1 || r.notes[0].Kind != "pending_added" {
		t.Fatalf("notes = %+v", r.notes)
	}
	if len(d.asked) != 2 || !d.asked[1].Reopened || string(d.asked[1].Arguments) != "{}" {
		t.Fatalf("asked = %+v", d.asked)
	}
	renamed := feed(t, in, Options{}, true, runStarted, snapshot(asst), `{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"other"}`)
	wantViolation(t, renamed, "tool_call_reopen_mismatch")
}

// TestRunFinishedWithAnotherRunIDAccepted: LangGraph's RUN_FINISHED carries
// its own run id, not RUN_STARTED's; the official clients accept it.
func TestRunFinishedWithAnotherRunIDAccepted(t *testing.T) {
	in := mustInput(t, inputJSON)
	fin := `{"type":"RUN_FINISHED","threadId":"t1","runId":"1f0c3a52-lg"}`
	r := feed(t, in, Options{}, true, runStarted, fin)
	wantOut(t, r, runStarted, fin)
	if len(r.notes) != 0 || len(r.runs) != 1 || r.runs[0].RunID != "r1" {
		t.Fatalf("notes = %+v runs = %+v", r.notes, r.runs)
	}
}

// TestMonitorModeReportsSnapshotCalls: monitor mode changes nothing but
// still reports and decides what a snapshot introduces.
func TestMonitorModeReportsSnapshotCalls(t *testing.T) {
	in := mustInput(t, inputJSON)
	asst := `{"id":"m1","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{}"}}]}`
	d := &byName{verdicts: map[string]string{"confirm": ActionDeny}}
	snap := snapshot(asst, msgToolNode1)
	r := feed(t, in, Options{Monitor: true, Decider: d}, true, runStarted, snap, runFinished)
	wantOut(t, r, runStarted, snap, runFinished)
	if len(d.asked) != 1 || noteCount(r, "fabricated_result") != 1 || noteCount(r, "policy_denied") != 1 {
		t.Fatalf("asked = %+v notes = %+v", d.asked, r.notes)
	}
	if !bytes.Contains([]byte(strings.Join(r.callKinds(), ",")), []byte("started c1")) {
		t.Fatalf("calls = %v", r.callKinds())
	}
}

// TestReplayedAnswerBeforeItsCall: an answer replayed before the call it
// answers (in the echo, the call in a later snapshot) was forwarded when
// nothing named the call; the consumer holds it, so the call the snapshot
// introduces is answered, not pending.
func TestReplayedAnswerBeforeItsCall(t *testing.T) {
	in := mustInput(t, inputJSON)
	echo := `{"type":"RUN_STARTED","threadId":"t1","runId":"r1","input":{"threadId":"t1","runId":"r1","messages":[{"id":"r9","role":"tool","toolCallId":"s9","content":"found"}]}}`
	asst := `{"id":"m1","role":"assistant","toolCalls":[{"id":"s9","type":"function","function":{"name":"search","arguments":"{}"}}]}`
	r := feed(t, in, Options{}, true, echo, snapshot(asst), runFinished)
	wantOut(t, r, echo, snapshot(asst), runFinished)
	if got := r.callKinds(); !slices.Equal(got, []string{"started s9", "arguments_complete s9", "answered s9"}) {
		t.Fatalf("calls = %v", got)
	}
}

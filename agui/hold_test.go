package agui

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aguard/aguard/internal/aguicheck"
)

// The tests in this file pin what the consumer must not see (README, "Hold
// and hide"): a held call reaches it only once judged, whole and in order; a
// denied or hidden one never does.

// stepwise feeds events through a new Stream, ends it, and returns what each
// step wrote to the consumer (the last entry is End's), and everything.
func stepwise(t *testing.T, in *RunInput, opts Options, events ...string) ([][]string, result) {
	t.Helper()
	s := NewStream(in, opts)
	var steps [][]string
	var r result
	var b Batch
	collect := func() {
		var out []string
		for _, e := range b.Out {
			out = append(out, string(e.JSON))
		}
		steps = append(steps, out)
		r.out = append(r.out, out...)
		r.notes = append(r.notes, b.Notes...)
		for _, c := range b.Calls {
			c.Arguments = slices.Clone(c.Arguments)
			c.Content = slices.Clone(c.Content)
			r.calls = append(r.calls, c)
		}
		if b.Run.Kind != "" {
			run := b.Run
			run.Pending = slices.Clone(run.Pending)
			r.runs = append(r.runs, run)
		}
		r.done = r.done || b.Done
	}
	for _, e := range events {
		s.Feed(context.Background(), []byte(e), &b)
		collect()
	}
	s.End(nil, &b)
	collect()
	if err := aguicheck.Check(toBytes(r.out)); err != nil {
		t.Fatalf("output breaks the sequence rules: %v\n%s", err, strings.Join(r.out, "\n"))
	}
	if err := checkConsumerView(in, toBytes(r.out)); err != nil {
		t.Fatalf("%v\n%s", err, strings.Join(r.out, "\n"))
	}
	return steps, r
}

func wantSteps(t *testing.T, got [][]string, want ...[]string) {
	t.Helper()
	render := func(ss [][]string) string {
		var b strings.Builder
		for i, s := range ss {
			fmt.Fprintf(&b, "step %d:\n", i)
			for _, e := range s {
				b.WriteString("  " + e + "\n")
			}
		}
		return b.String()
	}
	if render(got) != render(want) {
		t.Fatalf("got\n%swant\n%s", render(got), render(want))
	}
}

const (
	textStart   = `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`
	textContent = `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi"}`
	textEnd     = `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`
	shellArgs   = `{"type":"TOOL_CALL_ARGS","toolCallId":"s1","delta":"{\"cmd\":\"ls\"}"}`
	shellResult = `{"type":"TOOL_CALL_RESULT","messageId":"r1","toolCallId":"s1","content":"ok"}`
	deniedC1    = `{"type":"CUSTOM","name":"aguard.tool_call_denied","value":{"toolCallId":"c1","toolCallName":"confirm","reason":"rule for confirm","decisionId":"d-c1"}}`
	deniedS1    = `{"type":"CUSTOM","name":"aguard.tool_call_denied","value":{"toolCallId":"s1","toolCallName":"shell","reason":"rule for shell","decisionId":"d-s1"}}`
)

// TestHeldCallReleasedWhenAllowed: a held frontend call reaches the consumer
// at its END, whole and unchanged; the text the agent streamed meanwhile
// went ahead of it.
func TestHeldCallReleasedWhenAllowed(t *testing.T) {
	d := &byName{start: map[string]string{"confirm": ActionHold}}
	steps, r := stepwise(t, mustInput(t, inputJSON), Options{Decider: d},
		runStarted, confirmStart, textStart, confirmArgs, textContent, textEnd, confirmEnd, runFinished)
	wantSteps(t, steps,
		[]string{runStarted},
		nil,
		[]string{textStart},
		nil,
		[]string{textContent},
		[]string{textEnd},
		[]string{confirmStart, confirmArgs, confirmEnd},
		[]string{`{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"success","pendingToolCallIds":["c1"]}}`},
		nil)
	if got := strings.Join(r.callKinds(), ","); got != "started c1,arguments_complete c1,decided c1" {
		t.Errorf("calls = %s", got)
	}
	for _, c := range r.calls {
		if c.Visibility != ActionHold {
			t.Errorf("%s event visibility %q, want hold", c.Kind, c.Visibility)
		}
	}
	if started := r.calls[0]; started.Verdict.DecisionID != "s-c1" || started.Verdict.Action != ActionHold {
		t.Errorf("CallStarted verdict %+v, want the tool_call_start one", started.Verdict)
	}
	if got := strings.Join(r.noteKinds(), ","); got != "held,pending_added" || !strings.Contains(r.notes[0].Message, `"c1" ("confirm") held back until it is judged: start rule for confirm (decision s-c1)`) {
		t.Errorf("notes = %+v", r.notes)
	}
}

// TestHeldCallDenied: a held frontend call that is denied never reaches the
// consumer — no START, no arguments, no TOOL_CALL_RESULT — only its denial;
// it is not pending. The ledger still hears of it.
func TestHeldCallDenied(t *testing.T) {
	d := &byName{start: map[string]string{"confirm": ActionHold}, verdicts: map[string]string{"confirm": ActionDeny}}
	steps, r := stepwise(t, mustInput(t, inputJSON), Options{Decider: d},
		runStarted, confirmStart, confirmArgs, confirmEnd,
		`{"type":"TOOL_CALL_RESULT","messageId":"ta","toolCallId":"c1","content":"made up"}`, runFinished)
	wantSteps(t, steps,
		[]string{runStarted}, nil, nil,
		[]string{deniedC1},
		nil,
		[]string{runFinished},
		nil)
	if len(r.runs) != 1 || len(r.runs[0].Pending) != 0 {
		t.Errorf("runs = %+v, want nothing pending", r.runs)
	}
	if got := strings.Join(r.callKinds(), ","); got != "started c1,arguments_complete c1,decided c1" {
		t.Errorf("calls = %s", got)
	}
}

// TestHeldAgentCallWaitsForItsResult: a held call the agent executes itself,
// allowed at its END, stays held until its result arrives (the consumer
// would otherwise hold an unanswered call it did not make); then it goes
// out whole, followed by its result. What waited behind a snapshot follows.
func TestHeldAgentCallWaitsForItsResult(t *testing.T) {
	d := &byName{start: map[string]string{"shell": ActionHold}}
	snap := snapshot(msgUser, `{"id":"m1","role":"assistant","toolCalls":[{"id":"s1","type":"function","function":{"name":"shell","arguments":"{}"}}]}`)
	step := `{"type":"STEP_STARTED","stepName":"x"}`
	steps, r := stepwise(t, mustInput(t, inputJSON), Options{Decider: d},
		runStarted, shellStart, shellArgs, shellEnd, snap, step, shellResult,
		`{"type":"STEP_FINISHED","stepName":"x"}`, runFinished)
	wantSteps(t, steps,
		[]string{runStarted}, nil, nil, nil, nil, nil,
		[]string{shellStart, shellArgs, shellEnd, snap, step, shellResult},
		[]string{`{"type":"STEP_FINISHED","stepName":"x"}`},
		[]string{runFinished},
		nil)
	if got := strings.Join(r.callKinds(), ","); got != "started s1,arguments_complete s1,decided s1,answered s1" {
		t.Errorf("calls = %s", got)
	}
}

// TestHeldAgentCallDeniedAtItsEnd: the run ends, and the consumer sees only
// the denial.
func TestHeldAgentCallDeniedAtItsEnd(t *testing.T) {
	d := &byName{start: map[string]string{"shell": ActionHold}, verdicts: map[string]string{"shell": ActionDeny}}
	steps, _ := stepwise(t, mustInput(t, inputJSON), Options{Decider: d},
		runStarted, shellStart, textStart, shellArgs, shellEnd, shellResult, runFinished)
	wantSteps(t, steps,
		[]string{runStarted}, nil, []string{textStart}, nil,
		[]string{deniedS1, `{"type":"RUN_ERROR","code":"AGUARD_POLICY_DENIED","message":"tool call 's1' (shell) denied by policy: rule for shell (decision d-s1)"}`},
		nil, nil, nil)
}

// TestHeldUnansweredCallJudgedAtRunEnd: a held agent-side call left
// unanswered is judged when the run finishes: allowed, it goes out before
// RUN_FINISHED, which lists it pending; declined, the consumer sees only the
// denial and nothing is pending.
func TestHeldUnansweredCallJudgedAtRunEnd(t *testing.T) {
	for _, deny := range []bool{false, true} {
		t.Run(fmt.Sprint("deny=", deny), func(t *testing.T) {
			d := &phaseHold{start: ActionHold}
			if deny {
				d.runFinished = ActionDeny
			}
			steps, r := stepwise(t, mustInput(t, inputJSON), Options{Decider: d},
				runStarted, shellStart, shellEnd, runFinished)
			last := []string{shellStart, shellEnd, `{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"success","pendingToolCallIds":["s1"]}}`}
			if deny {
				last = []string{`{"type":"CUSTOM","name":"aguard.tool_call_denied","value":{"toolCallId":"s1","toolCallName":"shell","reason":"run_finished","decisionId":"d"}}`, runFinished}
			}
			wantSteps(t, steps, []string{runStarted}, nil, nil, last, nil)
			if phases := strings.Join(d.phases, ","); phases != "tool_call_start,tool_call_end,run_finished" {
				t.Errorf("phases asked: %s", phases)
			}
			if deny && len(r.runs[0].Pending) != 0 {
				t.Errorf("pending %v after a decline", r.runs[0].Pending)
			}
		})
	}
}

// phaseHold answers start at tool_call_start, runFinished (allow when
// empty) at run_finished, allow otherwise, and records the phases asked.
type phaseHold struct {
	start, runFinished string
	phases             []string
}

func (d *phaseHold) Decide(_ context.Context, c *Call) Verdict {
	d.phases = append(d.phases, c.Phase)
	switch {
	case c.Phase == PhaseToolCallStart:
		return Verdict{Action: d.start}
	case c.Phase == PhaseRunFinished && d.runFinished != "":
		return Verdict{Action: d.runFinished, Reason: "run_finished", DecisionID: "d"}
	}
	return Verdict{Action: ActionAllow, DecisionID: "d"}
}

// TestSnapshotWaitsWithHeldCall: a MESSAGES_SNAPSHOT that arrives while a
// call is held waits with it, and everything after the snapshot waits
// behind it; when the call is denied, the snapshot goes out without it — no
// toolCalls entry, no tool message — and the rest follows in order.
func TestSnapshotWaitsWithHeldCall(t *testing.T) {
	d := &byName{start: map[string]string{"confirm": ActionHold}, verdicts: map[string]string{"confirm": ActionDeny}}
	withCall := `{"id":"a1","role":"assistant","content":"let me ask","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"other","arguments":"{}"}}]}`
	answer := `{"id":"app-c1","role":"tool","toolCallId":"c1","content":"yes"}`
	steps, _ := stepwise(t, mustInput(t, inputJSON), Options{Decider: d},
		runStarted, confirmStart, snapshot(msgUser, withCall, answer), textStart, confirmEnd, textEnd, runFinished)
	scrubbed := snapshot(msgUser, `{"id":"a1","role":"assistant","content":"let me ask","toolCalls":[{"id":"c2","type":"function","function":{"name":"other","arguments":"{}"}}]}`)
	wantSteps(t, steps,
		[]string{runStarted}, nil, nil, nil,
		[]string{scrubbed, textStart, deniedC1},
		[]string{textEnd},
		[]string{`{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"success","pendingToolCallIds":["c2"]}}`},
		nil)
}

// TestHiddenCall: the consumer never sees a hidden call — its frames, its
// result, its traces in a snapshot — while the ledger hears of all of it.
func TestHiddenCall(t *testing.T) {
	d := &byName{start: map[string]string{"shell": ActionHide}}
	withCall := `{"id":"m1","role":"assistant","content":"hi","toolCalls":[{"id":"s1","type":"function","function":{"name":"shell","arguments":"{}"}}]}`
	steps, r := stepwise(t, mustInput(t, inputJSON), Options{Decider: d},
		runStarted, textStart, shellStart, textContent, shellArgs, shellEnd, shellResult, textEnd,
		snapshot(msgUser, withCall, `{"id":"r1","role":"tool","toolCallId":"s1","content":"ok"}`), runFinished)
	wantSteps(t, steps,
		[]string{runStarted}, []string{textStart}, nil, []string{textContent}, nil, nil, nil, []string{textEnd},
		[]string{snapshot(msgUser, `{"id":"m1","role":"assistant","content":"hi"}`)},
		[]string{runFinished}, nil)
	if got := strings.Join(r.callKinds(), ","); got != "started s1,arguments_complete s1,decided s1,answered s1" {
		t.Errorf("calls = %s", got)
	}
	for _, c := range r.calls {
		if c.Visibility != ActionHide {
			t.Errorf("%s event visibility %q, want hide", c.Kind, c.Visibility)
		}
	}
}

// TestHiddenCallDenied: a hidden call is still decided at its END; a denial
// ends the run with a RUN_ERROR that says nothing of the call.
func TestHiddenCallDenied(t *testing.T) {
	d := &byName{start: map[string]string{"shell": ActionHide}, verdicts: map[string]string{"shell": ActionDeny}}
	_, r := stepwise(t, mustInput(t, inputJSON), Options{Decider: d}, runStarted, shellStart, shellArgs, shellEnd)
	wantOut(t, r, runStarted, `{"type":"RUN_ERROR","code":"AGUARD_POLICY_DENIED","message":"a tool call aguard keeps from the consumer was denied by policy (decision d-s1)"}`)
	if got := strings.Join(r.noteKinds(), ","); got != "hidden,policy_denied" || !strings.Contains(r.notes[1].Message, "'s1' (shell)") {
		t.Errorf("notes = %+v, want the hiding and the denial, named for the log", r.notes)
	}
}

// TestHideMeansHoldForFrontendCalls: the application executes its own
// calls, so it sees them: hidden, a frontend call is held.
func TestHideMeansHoldForFrontendCalls(t *testing.T) {
	d := &byName{start: map[string]string{"confirm": ActionHide}}
	steps, r := stepwise(t, mustInput(t, inputJSON), Options{Decider: d}, runStarted, confirmStart, confirmEnd, runFinished)
	wantSteps(t, steps, []string{runStarted}, nil, []string{confirmStart, confirmEnd},
		[]string{`{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"success","pendingToolCallIds":["c1"]}}`}, nil)
	if r.calls[0].Visibility != ActionHold {
		t.Errorf("visibility %q, want hold", r.calls[0].Visibility)
	}
}

// TestUnknownStartActionHolds: a Decider that answers tool_call_start with
// an action it does not know holds the call (fail closed), noted.
func TestUnknownStartActionHolds(t *testing.T) {
	d := &phaseHold{start: "show"}
	steps, r := stepwise(t, mustInput(t, inputJSON), Options{Decider: d}, runStarted, confirmStart, confirmEnd, runFinished)
	wantSteps(t, steps, []string{runStarted}, nil, []string{confirmStart, confirmEnd},
		[]string{`{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"success","pendingToolCallIds":["c1"]}}`}, nil)
	if noteCount(r, "unknown_start_action") != 1 || noteCount(r, "held") != 1 {
		t.Errorf("notes = %+v", r.notes)
	}
}

// TestHoldInMonitorMode: monitor mode asks, notes, and holds nothing.
func TestHoldInMonitorMode(t *testing.T) {
	d := &byName{start: map[string]string{"confirm": ActionHold, "shell": ActionHide}}
	events := []string{runStarted, confirmStart, confirmEnd, shellStart, shellEnd, shellResult, runFinished}
	r := feed(t, mustInput(t, inputJSON), Options{Decider: d, Monitor: true}, true, events...)
	if strings.Join(r.out[:6], "\n") != strings.Join(events[:6], "\n") {
		t.Fatalf("monitor mode changed the stream:\n%s", strings.Join(r.out, "\n"))
	}
	if noteCount(r, "would_hold") != 1 || noteCount(r, "would_hide") != 1 {
		t.Errorf("notes = %+v", r.notes)
	}
}

// TestHeldChunkedCall: a held call streamed as chunks goes out when its
// chunk stream closes, before the event that closes it.
func TestHeldChunkedCall(t *testing.T) {
	d := &byName{start: map[string]string{"shell": ActionHold}}
	c1 := `{"type":"TOOL_CALL_CHUNK","toolCallId":"s1","toolCallName":"shell","delta":"{"}`
	c2 := `{"type":"TOOL_CALL_CHUNK","delta":"}"}`
	sub := `{"type":"TEXT_MESSAGE_CHUNK","messageId":"m9","delta":"x","subagentRunId":"sub"}`
	steps, _ := stepwise(t, mustInput(t, inputJSON), Options{Decider: d},
		runStarted, c1, sub, c2, shellResult, runFinished)
	wantSteps(t, steps, []string{runStarted}, nil, []string{sub}, nil,
		[]string{c1, c2, shellResult}, []string{runFinished}, nil)
}

// TestResultNamingHeldCallsParentWaits: a TOOL_CALL_RESULT whose message id
// is the parent message of a held call makes that message the result's; the
// consumer, getting the held call's START later, would take the call's owner
// from it. It waits for the held call.
func TestResultNamingHeldCallsParentWaits(t *testing.T) {
	d := &byName{start: map[string]string{"shell": ActionHold}}
	start := `{"type":"TOOL_CALL_START","toolCallId":"s1","toolCallName":"shell","parentMessageId":"p1"}`
	other := `{"type":"TOOL_CALL_RESULT","messageId":"p1","toolCallId":"zz","content":"x"}`
	steps, _ := stepwise(t, mustInput(t, inputJSON), Options{Decider: d},
		runStarted, `{"type":"TEXT_MESSAGE_START","messageId":"p1","subagentRunId":"sub"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"p1","subagentRunId":"sub"}`, start, other, shellEnd, shellResult, runFinished)
	wantSteps(t, steps,
		[]string{runStarted},
		[]string{`{"type":"TEXT_MESSAGE_START","messageId":"p1","subagentRunId":"sub"}`},
		[]string{`{"type":"TEXT_MESSAGE_END","messageId":"p1","subagentRunId":"sub"}`},
		nil, nil, nil,
		[]string{start, other, shellEnd, shellResult},
		[]string{runFinished}, nil)
}

// TestMaxHeld: a call whose held events pass the bound is denied: a
// frontend call as any held denial (its later events dropped), an
// agent-side call by ending the run.
func TestMaxHeld(t *testing.T) {
	big := `{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"` + strings.Repeat("x", 600) + `"}`
	d := &byName{start: map[string]string{"confirm": ActionHold, "shell": ActionHold}}
	steps, r := stepwise(t, mustInput(t, inputJSON), Options{Decider: d, MaxHeld: 512},
		runStarted, confirmStart, big, confirmArgs, confirmEnd, runFinished)
	denied := `{"type":"CUSTOM","name":"aguard.tool_call_denied","value":{"toolCallId":"c1","toolCallName":"confirm","reason":"the events held back until it is judged exceed the 512 bytes (or 65536 events) aguard holds per stream","decisionId":"max-held-c1"}}`
	wantSteps(t, steps, []string{runStarted}, nil, []string{denied}, nil, nil, []string{runFinished}, nil)
	if len(d.asked) != 0 {
		t.Errorf("the policy was asked about a call already denied: %+v", d.asked)
	}
	if got := strings.Join(r.callKinds(), ","); got != "started c1,decided c1,arguments_complete c1" {
		t.Errorf("calls = %s", got)
	}

	bigShell := strings.ReplaceAll(big, `"c1"`, `"s1"`)
	_, r = stepwise(t, mustInput(t, inputJSON), Options{Decider: d, MaxHeld: 512}, runStarted, shellStart, bigShell, shellEnd)
	if !strings.HasPrefix(r.last(), `{"type":"RUN_ERROR","code":"AGUARD_POLICY_DENIED","message":"tool call 's1' (shell) denied by policy: the events held back`) {
		t.Fatalf("out:\n%s", strings.Join(r.out, "\n"))
	}
}

// TestMaxHeldMakesRoomForWaitingEvents: events waiting behind a snapshot
// count too; past the bound the call held longest is denied, and what
// waited for it goes out.
func TestMaxHeldMakesRoomForWaitingEvents(t *testing.T) {
	d := &byName{start: map[string]string{"confirm": ActionHold}}
	long := `{"type":"STATE_SNAPSHOT","snapshot":{"s":"` + strings.Repeat("y", 500) + `"}}`
	snap := snapshot(msgUser)
	steps, _ := stepwise(t, mustInput(t, inputJSON), Options{Decider: d, MaxHeld: 600},
		runStarted, confirmStart, snap, long, confirmEnd, runFinished)
	denied := `{"type":"CUSTOM","name":"aguard.tool_call_denied","value":{"toolCallId":"c1","toolCallName":"confirm","reason":"the events held back until it is judged exceed the 600 bytes (or 65536 events) aguard holds per stream","decisionId":"max-held-c1"}}`
	wantSteps(t, steps, []string{runStarted}, nil, nil, []string{snap, denied, long}, nil, []string{runFinished}, nil)
}

// TestSnapshotIntroducedHeldCall: a call first seen in a snapshot, held, is
// judged before the snapshot goes: denied, the snapshot goes without it and
// the denial follows; an agent-side call allowed but unanswered there holds
// the snapshot back until the run's end decides it.
func TestSnapshotIntroducedHeldCall(t *testing.T) {
	withCall := `{"id":"m1","role":"assistant","content":"t","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{}"}}]}`
	d := &byName{start: map[string]string{"confirm": ActionHold}, verdicts: map[string]string{"confirm": ActionDeny}}
	steps, _ := stepwise(t, mustInput(t, inputJSON), Options{Decider: d}, runStarted, snapshot(msgUser, withCall), runFinished)
	wantSteps(t, steps, []string{runStarted},
		[]string{snapshot(msgUser, `{"id":"m1","role":"assistant","content":"t"}`), deniedC1},
		[]string{runFinished}, nil)

	shellCall := `{"id":"m1","role":"assistant","toolCalls":[{"id":"s1","type":"function","function":{"name":"shell","arguments":"{}"}}]}`
	for _, deny := range []bool{false, true} {
		h := &phaseHold{start: ActionHold}
		want := []string{snapshot(msgUser, shellCall), `{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"success","pendingToolCallIds":["s1"]}}`}
		if deny {
			h.runFinished = ActionDeny
			want = []string{snapshot(msgUser, `{"id":"m1","role":"assistant"}`),
				`{"type":"CUSTOM","name":"aguard.tool_call_denied","value":{"toolCallId":"s1","toolCallName":"shell","reason":"run_finished","decisionId":"d"}}`, runFinished}
		}
		steps, _ = stepwise(t, mustInput(t, inputJSON), Options{Decider: h}, runStarted, snapshot(msgUser, shellCall), textStart, textEnd, runFinished)
		wantSteps(t, steps, []string{runStarted}, nil, nil, nil, append([]string{}, append(want[:1:1], append([]string{textStart, textEnd}, want[1:]...)...)...), nil)
	}
}

// TestWithheldAcrossRuns: a call hidden in one run stays hidden in the
// stream's later runs: a snapshot replaying it loses it, a result for it is
// dropped.
func TestWithheldAcrossRuns(t *testing.T) {
	d := &byName{start: map[string]string{"shell": ActionHide}}
	withCall := `{"id":"m1","role":"assistant","toolCalls":[{"id":"s1","type":"function","function":{"name":"shell","arguments":"{}"}}]}`
	run2 := `{"type":"RUN_STARTED","threadId":"t1","runId":"r2"}`
	_, r := stepwise(t, mustInput(t, inputJSON), Options{Decider: d},
		runStarted, shellStart, shellEnd, runFinished,
		run2, shellResult, snapshot(msgUser, withCall, `{"id":"r1","role":"tool","toolCallId":"s1","content":"ok"}`),
		`{"type":"RUN_FINISHED","threadId":"t1","runId":"r2"}`)
	wantOut(t, r, runStarted, runFinished, run2, snapshot(msgUser, `{"id":"m1","role":"assistant"}`), `{"type":"RUN_FINISHED","threadId":"t1","runId":"r2"}`)
}

// TestAgentErrorWhileHeld: the run ends before a held call is judged: the
// consumer never sees it; what waited behind a snapshot goes out first.
func TestAgentErrorWhileHeld(t *testing.T) {
	d := &byName{start: map[string]string{"confirm": ActionHold}}
	withCall := `{"id":"a1","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{}"}}]}`
	runErr := `{"type":"RUN_ERROR","message":"boom"}`
	_, r := stepwise(t, mustInput(t, inputJSON), Options{Decider: d},
		runStarted, confirmStart, snapshot(msgUser, withCall), textStart, runErr)
	wantOut(t, r, runStarted, snapshot(msgUser, `{"id":"a1","role":"assistant"}`), textStart, runErr)
}

// TestIdlessChunkAfterWithheldLaneClose: an event aguard keeps back closed a
// chunked message the consumer still sees open; an id-less chunk would then
// continue different items for aguard and for the consumer. The stream ends
// instead.
func TestIdlessChunkAfterWithheldLaneClose(t *testing.T) {
	d := &byName{start: map[string]string{"shell": ActionHold}}
	r := feed(t, mustInput(t, inputJSON), Options{Decider: d}, true,
		runStarted,
		`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","delta":"a"}`,
		`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m2","delta":"b","subagentRunId":"sub"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"s1","toolCallName":"shell"}`,
		`{"type":"TEXT_MESSAGE_CHUNK","delta":"c"}`)
	wantViolation(t, r, "ambiguous_chunk")
}

// TestRunStartedEchoCannotWait: a call the RUN_STARTED input echo introduces
// cannot be held (RUN_STARTED cannot wait): it streams, and is judged right
// after; a hidden one is left out of the echo.
func TestRunStartedEchoCannotWait(t *testing.T) {
	echo := func(calls string) string {
		return `{"type":"RUN_STARTED","threadId":"t1","runId":"r1","input":{"threadId":"t1","runId":"r1","messages":[{"id":"m1","role":"assistant"` + calls + `}]}}`
	}
	c1 := `,"toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{}"}}]`
	d := &byName{start: map[string]string{"confirm": ActionHold}, verdicts: map[string]string{"confirm": ActionDeny}}
	_, r := stepwise(t, mustInput(t, inputJSON), Options{Decider: d}, echo(c1), runFinished)
	wantOut(t, r, echo(c1), deniedC1,
		`{"type":"TOOL_CALL_RESULT","messageId":"aguard-declined-c1","toolCallId":"c1","role":"tool","content":"Declined by policy: rule for confirm"}`, runFinished)
	if r.calls[0].Visibility != ActionStream {
		t.Errorf("visibility %q, want stream", r.calls[0].Visibility)
	}
	s1 := `,"toolCalls":[{"id":"s1","type":"function","function":{"name":"shell","arguments":"{}"}}]`
	d = &byName{start: map[string]string{"shell": ActionHide}}
	_, r = stepwise(t, mustInput(t, inputJSON), Options{Decider: d}, echo(s1), runFinished)
	wantOut(t, r, echo(""), runFinished)
}

// TestHeldCallReusingAWithheldID: a call hidden in one run, and a call of the
// same id held and allowed in the next: the second is the consumer's, in
// later snapshots too.
func TestHeldCallReusingAWithheldID(t *testing.T) {
	d := &runStart{starts: []string{ActionHide, ActionHold}}
	withCall := `{"id":"m1","role":"assistant","toolCalls":[{"id":"s1","type":"function","function":{"name":"shell","arguments":"{}"}}]}`
	run2 := `{"type":"RUN_STARTED","threadId":"t1","runId":"r2"}`
	_, r := stepwise(t, mustInput(t, inputJSON), Options{Decider: d},
		runStarted, shellStart, shellEnd, shellResult, runFinished,
		run2, shellStart, shellEnd, shellResult, snapshot(msgUser, withCall), `{"type":"RUN_FINISHED","threadId":"t1","runId":"r2"}`)
	wantOut(t, r, runStarted, runFinished, run2, shellStart, shellEnd, shellResult, snapshot(msgUser, withCall),
		`{"type":"RUN_FINISHED","threadId":"t1","runId":"r2"}`)
}

// runStart answers tool_call_start with starts in turn, allow otherwise.
type runStart struct {
	starts []string
	n      int
}

func (d *runStart) Decide(_ context.Context, c *Call) Verdict {
	if c.Phase != PhaseToolCallStart {
		return Verdict{Action: ActionAllow}
	}
	d.n++
	return Verdict{Action: d.starts[(d.n-1)%len(d.starts)]}
}

// TestWithheldIDKeepsTheHistorysCall: agents number calls per run, so a
// hidden call may share its id with a call of the application's history; a
// snapshot replaying both keeps the history's (in its message, with its
// answer) and loses only the hidden one.
func TestWithheldIDKeepsTheHistorysCall(t *testing.T) {
	in := mustInput(t, `{"threadId":"t1","runId":"r2","protocolVersion":"1.0","messages":[`+
		`{"id":"a0","role":"assistant","toolCalls":[{"id":"call_0","type":"function","function":{"name":"shell","arguments":"{}"}}]},`+
		`{"id":"t0","role":"tool","toolCallId":"call_0","content":"old"}],"tools":[]}`)
	d := &byName{start: map[string]string{"shell": ActionHide}}
	history := []string{`{"id":"a0","role":"assistant","toolCalls":[{"id":"call_0","type":"function","function":{"name":"shell","arguments":"{}"}}]}`,
		`{"id":"t0","role":"tool","toolCallId":"call_0","content":"old"}`}
	fresh := []string{`{"id":"a1","role":"assistant","content":"x","toolCalls":[{"id":"call_0","type":"function","function":{"name":"shell","arguments":"{}"}}]}`,
		`{"id":"t1","role":"tool","toolCallId":"call_0","content":"new"}`}
	_, r := stepwise(t, in, Options{Decider: d},
		runStarted, `{"type":"TOOL_CALL_START","toolCallId":"call_0","toolCallName":"shell","parentMessageId":"a1"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"call_0"}`, snapshot(append(history, fresh...)...), runFinished)
	wantOut(t, r, runStarted, snapshot(append(history, `{"id":"a1","role":"assistant","content":"x"}`)...), runFinished)
}

// TestLargeSnapshotScrubbed: a snapshot large enough for Feed to read from
// its hollow copy (hollow.go) loses a hidden call's traces and keeps every
// other byte.
func TestLargeSnapshotScrubbed(t *testing.T) {
	d := &byName{start: map[string]string{"shell": ActionHide}}
	big := `{"id":"u1","role":"user","content":"` + strings.Repeat("x", hollowAbove) + `","extra":{"k":[1,2,3]}}`
	withCall := `{"id":"m1","role":"assistant","content":"hi","toolCalls":[{"id":"s1","type":"function","function":{"name":"shell","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"other","arguments":"{}"}}]}`
	_, r := stepwise(t, mustInput(t, inputJSON), Options{Decider: d},
		runStarted, shellStart, shellEnd, snapshot(big, withCall, `{"id":"r1","role":"tool","toolCallId":"s1","content":"ok"}`), runFinished)
	wantOut(t, r, runStarted,
		snapshot(big, `{"id":"m1","role":"assistant","content":"hi","toolCalls":[{"id":"c2","type":"function","function":{"name":"other","arguments":"{}"}}]}`),
		`{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"success","pendingToolCallIds":["c2"]}}`)
}

// TestAResultQueuedBeforeItsCallIsHiddenIsDropped: a result for a call not
// yet started waits behind a snapshot held for another call; when that call
// then starts and is hidden, the waiting result is the hidden call's, and
// never reaches the consumer (found by FuzzStream).
func TestAResultQueuedBeforeItsCallIsHiddenIsDropped(t *testing.T) {
	d := &byName{start: map[string]string{"confirm": ActionHold, "shell": ActionHide}}
	steps, _ := stepwise(t, mustInput(t, inputJSON), Options{Decider: d},
		runStarted, confirmStart, snapshot(msgUser), shellResult, shellStart, shellArgs, shellEnd, confirmEnd, runFinished)
	var out []string
	for _, s := range steps {
		out = append(out, s...)
	}
	all := strings.Join(out, "\n")
	if strings.Contains(all, `"s1"`) {
		t.Errorf("the consumer got an event of the hidden call s1:\n%s", all)
	}
	if !strings.Contains(all, confirmStart) || !strings.Contains(all, snapshot(msgUser)) {
		t.Errorf("the held call and the snapshot behind it did not go out once allowed:\n%s", all)
	}
}

// TestOwnSignalWaitsForTheOwnersChunkLane: aguard's own events are
// explicit events of the call's owner to the consumer's chunk expansion,
// which closes that owner's open chunk lane at one. A denial that comes
// while the parent's chunked call is still streaming (here: the events
// waiting behind a snapshot pass --max-held in the middle of it) waits
// until the lane closes, so the id-less chunk that continues the call
// still finds it open.
func TestOwnSignalWaitsForTheOwnersChunkLane(t *testing.T) {
	d := &byName{start: map[string]string{"confirm": ActionHold}}
	snap := snapshot(msgUser)
	first := `{"type":"TOOL_CALL_CHUNK","toolCallId":"s1","toolCallName":"search","delta":"{"}`
	more := `{"type":"TOOL_CALL_CHUNK","delta":"}"}`
	step := `{"type":"STEP_STARTED","stepName":"x"}`
	// Room for the held call's start, the snapshot and the first chunk,
	// not for the second.
	maxHeld := len(confirmStart) + len(snap) + len(first) + 3*heldEventBytes + 1
	steps, _ := stepwise(t, mustInput(t, inputJSON), Options{Decider: d, MaxHeld: maxHeld},
		runStarted, confirmStart, snap, first, more, step)
	denied := `{"type":"CUSTOM","name":"aguard.tool_call_denied","value":{"toolCallId":"c1","toolCallName":"confirm","reason":"the events held back until it is judged exceed the ` +
		strconv.Itoa(maxHeld) + ` bytes (or 65536 events) aguard holds per stream","decisionId":"max-held-c1"}}`
	wantSteps(t, steps, []string{runStarted}, nil, nil, nil, []string{snap, first, more}, []string{denied, step},
		[]string{`{"type":"RUN_ERROR","code":"AGUARD_UPSTREAM_LOST","message":"the upstream stream ended before the run finished (no RUN_FINISHED or RUN_ERROR)"}`})
}

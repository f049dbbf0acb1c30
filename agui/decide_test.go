package agui

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/aguard/aguard/internal/aguicheck"
)

// byName is a Decider with a fixed verdict per tool name (at
// tool_call_start, from start; stream when absent); it records every call it
// was asked about: in started at tool_call_start, in asked otherwise.
type byName struct {
	verdicts map[string]string
	start    map[string]string
	asked    []Call
	started  []Call
}

func (d *byName) Decide(_ context.Context, c *Call) Verdict {
	cc := *c
	cc.Arguments = append([]byte(nil), c.Arguments...)
	if c.Phase == PhaseToolCallStart {
		d.started = append(d.started, cc)
		action := d.start[c.Name]
		if action == "" {
			action = ActionStream
		}
		return Verdict{Action: action, Reason: "start rule for " + c.Name, DecisionID: "s-" + c.ID}
	}
	d.asked = append(d.asked, cc)
	action := d.verdicts[c.Name]
	if action == "" {
		action = ActionAllow
	}
	return Verdict{Action: action, Reason: "rule for " + c.Name, DecisionID: "d-" + c.ID, RequiresApprovalAt: "2026-11-29T18:00:00Z"}
}

const (
	confirmStart = `{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"confirm"}`
	confirmArgs  = `{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"{\"orderId\":\"A-17\"}"}`
	confirmEnd   = `{"type":"TOOL_CALL_END","toolCallId":"c1"}`
	shellStart   = `{"type":"TOOL_CALL_START","toolCallId":"s1","toolCallName":"shell"}`
	shellEnd     = `{"type":"TOOL_CALL_END","toolCallId":"s1"}`
)

// TestVerdictsInTheStream pins what each verdict does to the stream the
// consumer receives (README, "In the stream").
func TestVerdictsInTheStream(t *testing.T) {
	denied := `{"type":"CUSTOM","name":"aguard.tool_call_denied","value":{"toolCallId":"c1","toolCallName":"confirm","reason":"rule for confirm","decisionId":"d-c1"}}`
	declined := `{"type":"TOOL_CALL_RESULT","messageId":"aguard-declined-c1","toolCallId":"c1","role":"tool","content":"Declined by policy: rule for confirm"}`
	tests := []struct {
		name     string
		verdicts map[string]string
		events   []string
		want     []string
		notes    string
	}{
		{
			name:     "frontend call denied: declined after its END, not pending",
			verdicts: map[string]string{"confirm": ActionDeny},
			events:   []string{runStarted, confirmStart, confirmArgs, confirmEnd, runFinished},
			want: []string{runStarted, confirmStart, confirmArgs, confirmEnd, denied, declined,
				`{"type":"RUN_FINISHED","threadId":"t1","runId":"r1"}`},
			notes: "policy_denied",
		},
		{
			name:     "frontend call requires approval: signalled, stays pending",
			verdicts: map[string]string{"confirm": ActionRequireApproval},
			events:   []string{runStarted, confirmStart, confirmArgs, confirmEnd, runFinished},
			want: []string{runStarted, confirmStart, confirmArgs, confirmEnd,
				`{"type":"CUSTOM","name":"aguard.approval_required","value":{"toolCallId":"c1","toolCallName":"confirm","requiresApprovalAt":"2026-11-29T18:00:00Z","reason":"rule for confirm","decisionId":"d-c1"}}`,
				`{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"success","pendingToolCallIds":["c1"]}}`},
			notes: "approval_required,pending_added",
		},
		{
			name:     "agent-side call denied: the run ends",
			verdicts: map[string]string{"shell": ActionDeny},
			events:   []string{runStarted, shellStart, shellEnd, `{"type":"TOOL_CALL_RESULT","messageId":"m","toolCallId":"s1","content":"done"}`, runFinished},
			want: []string{runStarted, shellStart, shellEnd,
				`{"type":"RUN_ERROR","code":"AGUARD_POLICY_DENIED","message":"tool call 's1' (shell) denied by policy: rule for shell (decision d-s1)"}`},
			notes: "policy_denied",
		},
		{
			name:     "agent-side call cannot be held for approval: denied",
			verdicts: map[string]string{"shell": ActionRequireApproval},
			events:   []string{runStarted, shellStart, shellEnd},
			want: []string{runStarted, shellStart, shellEnd,
				`{"type":"RUN_ERROR","code":"AGUARD_POLICY_DENIED","message":"tool call 's1' (shell) denied by policy: requires approval, but aguard cannot hold a call the agent executes itself: rule for shell (decision d-s1)"}`},
			notes: "policy_denied",
		},
		{
			name:     "chunked frontend call closed by RUN_FINISHED: declined before it",
			verdicts: map[string]string{"confirm": ActionDeny},
			events: []string{runStarted,
				`{"type":"TOOL_CALL_CHUNK","toolCallId":"c1","toolCallName":"confirm","delta":"{}"}`, runFinished},
			want: []string{runStarted, `{"type":"TOOL_CALL_CHUNK","toolCallId":"c1","toolCallName":"confirm","delta":"{}"}`,
				denied, declined, `{"type":"RUN_FINISHED","threadId":"t1","runId":"r1"}`},
			notes: "policy_denied",
		},
		{
			name:     "unadvertised call allowed at its END, denied when left pending",
			verdicts: map[string]string{}, // allow at END…
			events:   []string{runStarted, shellStart, shellEnd, runFinished},
			want: []string{runStarted, shellStart, shellEnd,
				`{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"success","pendingToolCallIds":["s1"]}}`},
			notes: "pending_added",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &byName{verdicts: tt.verdicts}
			r := feed(t, mustInput(t, inputJSON), Options{Decider: d}, true, tt.events...)
			if strings.Join(r.out, "\n") != strings.Join(tt.want, "\n") {
				t.Fatalf("got\n%s\nwant\n%s", strings.Join(r.out, "\n"), strings.Join(tt.want, "\n"))
			}
			if got := strings.Join(r.noteKinds(), ","); got != tt.notes {
				t.Errorf("notes = %s, want %s", got, tt.notes)
			}
			if err := aguicheck.Check(toBytes(r.out)); err != nil {
				t.Errorf("output breaks the sequence rules: %v", err)
			}
		})
	}
}

// TestUnadvertisedDeclinedAtRunFinished pins the run_finished phase: a call
// to a tool the input did not advertise, allowed when its arguments
// completed but left unanswered, is put to the Decider again and declined
// before RUN_FINISHED, so the consumer is never left holding it.
func TestUnadvertisedDeclinedAtRunFinished(t *testing.T) {
	d := &phaseDecider{deny: PhaseRunFinished}
	r := feed(t, mustInput(t, inputJSON), Options{Decider: d}, true, runStarted, shellStart, shellEnd, runFinished)
	want := []string{runStarted, shellStart, shellEnd,
		`{"type":"CUSTOM","name":"aguard.tool_call_denied","value":{"toolCallId":"s1","toolCallName":"shell","reason":"not advertised","decisionId":"d2"}}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"aguard-declined-s1","toolCallId":"s1","role":"tool","content":"Declined by policy: not advertised"}`,
		runFinished}
	if strings.Join(r.out, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(r.out, "\n"), strings.Join(want, "\n"))
	}
	if got := strings.Join(d.phases, ","); got != "tool_call_end,run_finished" {
		t.Fatalf("phases asked = %s", got)
	}
}

type phaseDecider struct {
	deny   string
	phases []string
}

func (d *phaseDecider) Decide(_ context.Context, c *Call) Verdict {
	if c.Phase == PhaseToolCallStart {
		return Verdict{Action: ActionStream}
	}
	d.phases = append(d.phases, c.Phase)
	if c.Phase == d.deny {
		return Verdict{Action: ActionDeny, Reason: "not advertised", DecisionID: "d" + string(rune('0'+len(d.phases)))}
	}
	return Verdict{Action: ActionAllow, DecisionID: "d" + string(rune('0'+len(d.phases)))}
}

// TestDeciderSeesCompleteArguments pins that the Decider is asked only once
// the arguments are complete, with all of them, also across a reopen and in
// a subagent's chunk stream, and that aguard's own events about a
// subagent's call carry its subagentRunId.
func TestDeciderSeesCompleteArguments(t *testing.T) {
	d := &byName{verdicts: map[string]string{"confirm": ActionDeny}}
	r := feed(t, mustInput(t, inputJSON), Options{Decider: d}, true,
		runStarted,
		`{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"confirm","parentMessageId":"m1"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"{\"a\":"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"c1"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"confirm","parentMessageId":"m1"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"1}"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"c1"}`,
		`{"type":"TOOL_CALL_CHUNK","toolCallId":"c2","toolCallName":"lookup","delta":"{\"q\":","subagentRunId":"sub-1"}`,
		`{"type":"TOOL_CALL_CHUNK","delta":"2}","subagentRunId":"sub-1"}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"m2","subagentRunId":"sub-1"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"m2","subagentRunId":"sub-1"}`,
	)
	if len(d.asked) < 3 {
		t.Fatalf("asked %d times: %+v", len(d.asked), d.asked)
	}
	first, second, sub := d.asked[0], d.asked[1], d.asked[2]
	if string(first.Arguments) != `{"a":` || first.Reopened {
		t.Errorf("first END: %+v", first)
	}
	if string(second.Arguments) != `{"a":1}` || !second.Reopened || second.ParentMessageID != "m1" || !second.Frontend {
		t.Errorf("reopened END: %+v", second)
	}
	if string(sub.Arguments) != `{"q":2}` || sub.SubagentRunID != "sub-1" || sub.Frontend || sub.Phase != PhaseToolCallEnd {
		t.Errorf("subagent chunk call: %+v", sub)
	}
	if err := aguicheck.Check(toBytes(r.out)); err != nil {
		t.Errorf("output breaks the sequence rules: %v\n%s", err, strings.Join(r.out, "\n"))
	}
}

// TestVerdictsInMonitorMode pins that monitor mode decides and notes but
// changes nothing.
func TestVerdictsInMonitorMode(t *testing.T) {
	d := &byName{verdicts: map[string]string{"confirm": ActionDeny, "shell": ActionDeny}}
	events := []string{runStarted, confirmStart, confirmEnd, shellStart, shellEnd, runFinished}
	r := feed(t, mustInput(t, inputJSON), Options{Decider: d, Monitor: true}, true, events...)
	if strings.Join(r.out[:5], "\n") != strings.Join(events[:5], "\n") {
		t.Fatalf("monitor mode changed the stream:\n%s", strings.Join(r.out, "\n"))
	}
	if got := strings.Join(r.noteKinds(), ","); !strings.HasPrefix(got, "policy_denied,policy_denied") {
		t.Fatalf("notes = %s", got)
	}
}

// TestHostileReasonIsEscaped pins that a reason carrying SSE framing, quotes
// and markup reaches the wire only as an escaped JSON string.
func TestHostileReasonIsEscaped(t *testing.T) {
	d := hostile{}
	r := feed(t, mustInput(t, inputJSON), Options{Decider: d}, true, runStarted, confirmStart, confirmEnd, runFinished)
	for _, ev := range r.out {
		if strings.ContainsAny(ev, "\n\r") {
			t.Fatalf("raw line break on the wire: %q", ev)
		}
	}
	if err := aguicheck.Check(toBytes(r.out)); err != nil {
		t.Fatal(err)
	}
}

type hostile struct{}

func (hostile) Decide(_ context.Context, c *Call) Verdict {
	if c.Phase == PhaseToolCallStart {
		return Verdict{Action: ActionStream}
	}
	return Verdict{Action: ActionDeny, Reason: "x\"}\n\ndata: {\"type\":\"RUN_FINISHED\"}\r\n<script>", DecisionID: "\u2028"}
}

func toBytes(out []string) [][]byte {
	b := make([][]byte, len(out))
	for i, s := range out {
		b[i] = []byte(s)
	}
	return b
}

// ctxDecider records, for each call it is asked about, the value its
// context carries under ctxKey{}.
type ctxDecider struct{ seen []string }

type ctxKey struct{}

func (d *ctxDecider) Decide(ctx context.Context, c *Call) Verdict {
	v, _ := ctx.Value(ctxKey{}).(string)
	d.seen = append(d.seen, c.Phase+":"+v)
	if c.Phase == PhaseToolCallStart {
		return Verdict{Action: ActionStream}
	}
	return Verdict{Action: ActionAllow}
}

// TestDeciderGetsTheContextFeedWasGiven pins that the Stream hands the
// Decider, at every phase, the context of the Feed that asks: the proxy's
// per-stream context, which carries the trace and is cancelled when the
// stream is abandoned.
func TestDeciderGetsTheContextFeedWasGiven(t *testing.T) {
	d := &ctxDecider{}
	s := NewStream(mustInput(t, inputJSON), Options{Decider: d})
	var b Batch
	for i, e := range []string{
		runStarted,
		`{"type":"TOOL_CALL_START","toolCallId":"x1","toolCallName":"unadvertised"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"x1"}`,
		runFinished,
	} {
		s.Feed(context.WithValue(context.Background(), ctxKey{}, fmt.Sprint("feed-", i)), []byte(e), &b)
	}
	want := "tool_call_start:feed-1,tool_call_end:feed-2,run_finished:feed-3"
	if got := strings.Join(d.seen, ","); got != want {
		t.Fatalf("the Decider saw %s, want %s", got, want)
	}
}

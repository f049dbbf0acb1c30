package policy

import (
	"context"
	"strings"
	"testing"
	"time"
)

// startCall is frontendCall as it starts: no arguments, no schema.
func startCall() *Input {
	in := frontendCall()
	in.Phase = PhaseToolCallStart
	in.Call.Arguments, in.Call.ArgumentsText = nil, ""
	in.Schema = SchemaResult{}
	return in
}

// TestStartPhaseAnswers pins how a decision at tool_call_start is read: the
// three actions as they are, stream when the policy says nothing, allow as
// stream, an objection (deny, require_approval) as hold, and hold whenever
// the policy cannot answer (fail closed).
func TestStartPhaseAnswers(t *testing.T) {
	tests := []struct {
		name    string
		policy  string
		want    string
		wantErr string // substring of Err; "" for none
	}{
		{"stream", `decision := {"action": "stream"}`, ActionStream, ""},
		{"hold", `decision := {"action": "hold", "reason": "r"}`, ActionHold, ""},
		{"hide", `decision := {"action": "hide"}`, ActionHide, ""},
		{"undefined decision streams", `decision := {"action": "hold"} if input.phase == "never"`, ActionStream, ""},
		{"decision without an action streams", `decision := {"reason": "nothing to say"}`, ActionStream, ""},
		{"allow streams", `decision := {"action": "allow"}`, ActionStream, ""},
		{"deny holds", `decision := {"action": "deny", "reason": "r"}`, ActionHold, ""},
		{"require_approval holds", `decision := {"action": "require_approval"}`, ActionHold, ""},
		{"unknown action holds", `decision := {"action": "show"}`, ActionHold, `decision.action at tool_call_start is "show"`},
		{"action of the wrong type holds", `decision := {"action": true}`, ActionHold, "decision.action is a boolean"},
		{"decision not an object holds", `decision := "stream"`, ActionHold, "want an object"},
		{"evaluation error holds", `decision := {"action": "stream"} if to_number(input.call.name) > 1`, ActionHold, "to_number"},
		{"conflict holds", "decision := {\"action\": \"stream\"}\ndecision := {\"action\": \"hide\"} if input.tool.frontend", ActionHold, "eval_conflict_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, Options{Dir: policyDir(t, map[string]string{"policy.rego": "package aguard\n\n" + tt.policy + "\n"})})
			d := e.Decide(context.Background(), startCall())
			if d.Action != tt.want {
				t.Errorf("action = %q (err %v), want %q", d.Action, d.Err, tt.want)
			}
			switch {
			case tt.wantErr == "" && d.Err != nil:
				t.Errorf("err = %v, want none", d.Err)
			case tt.wantErr != "" && (d.Err == nil || !strings.Contains(d.Err.Error(), tt.wantErr)):
				t.Errorf("err = %v, want one containing %q", d.Err, tt.wantErr)
			}
			if d.DecisionID == "" {
				t.Error("no decision id")
			}
		})
	}
}

// TestStartPhaseTimeoutHolds: a policy too slow to answer as a call starts
// holds it.
func TestStartPhaseTimeoutHolds(t *testing.T) {
	e := newEngine(t, Options{Timeout: time.Millisecond, Dir: policyDir(t, map[string]string{"policy.rego": `package aguard
decision := {"action": "stream"} if {
	count([x | some x in numbers.range(1, 1e7); x > 0]) > 0
}
`})})
	d := e.Decide(context.Background(), startCall())
	if d.Action != ActionHold || d.Err == nil || !strings.Contains(d.Err.Error(), "no decision within") {
		t.Fatalf("got %q (err %v), want hold after a timeout", d.Action, d.Err)
	}
}

// TestStartPhaseInputHasNoArguments pins the input at tool_call_start: the
// call's id, name, parent and owner, the tool, the run and the request; no
// arguments, no argument text or error, no schema — a policy cannot read
// what does not exist yet.
func TestStartPhaseInputHasNoArguments(t *testing.T) {
	e := newEngine(t, Options{Dir: policyDir(t, map[string]string{"policy.rego": `package aguard
decision := {"action": "deny", "reason": concat("|", [concat(",", sort(absent)), concat(",", sort(missing))])}

absent contains k if {
	some k in ["call.arguments", "call.argumentsText", "call.argumentsError", "call.reopened", "schema"]
	not has(k)
}

missing contains k if {
	some k in ["call.id", "call.name", "call.parentMessageId", "call.subagentRunId", "tool", "run", "request"]
	not has(k)
}

has("call.arguments") if input.call.arguments == input.call.arguments
has("call.argumentsText") if input.call.argumentsText == input.call.argumentsText
has("call.argumentsError") if input.call.argumentsError == input.call.argumentsError
has("call.reopened") if input.call.reopened == input.call.reopened
has("schema") if input.schema == input.schema
has("call.id") if input.call.id == "call-1"
has("call.name") if input.call.name == "show_chart"
has("call.parentMessageId") if input.call.parentMessageId == "msg-1"
has("call.subagentRunId") if input.call.subagentRunId == ""
has("tool") if input.tool.advertised == true
has("run") if input.run.threadId == "thread-1"
has("request") if input.request.headers["x-user"] == "ann"
`})})
	d := e.Decide(context.Background(), startCall())
	if d.Err != nil || d.Action != ActionHold {
		t.Fatalf("got %q (err %v)", d.Action, d.Err)
	}
	if want := "call.arguments,call.argumentsError,call.argumentsText,call.reopened,schema|"; d.Reason != want {
		t.Errorf("absent|missing from the input: %q, want %q", d.Reason, want)
	}
	// The same policy at tool_call_end sees every member.
	d = e.Decide(context.Background(), frontendCall())
	if d.Err != nil || d.Reason != "|" {
		t.Errorf("at tool_call_end: absent|missing %q (err %v), want nothing", d.Reason, d.Err)
	}
}

// TestDefaultPolicyHoldsUnadvertisedCalls: the embedded policy holds a call
// to a tool the input did not advertise and streams the application's own.
func TestDefaultPolicyHoldsUnadvertisedCalls(t *testing.T) {
	e := newEngine(t, Options{})
	in := startCall()
	if d := e.Decide(context.Background(), in); d.Err != nil || d.Action != ActionStream {
		t.Errorf("advertised tool: %q (err %v), want stream", d.Action, d.Err)
	}
	in.Call.Name, in.Tool = "search_web", ToolInput{}
	d := e.Decide(context.Background(), in)
	if d.Err != nil || d.Action != ActionHold || !strings.Contains(d.Reason, `"search_web" was not advertised`) {
		t.Errorf("unadvertised tool: %q %q (err %v), want hold", d.Action, d.Reason, d.Err)
	}
}

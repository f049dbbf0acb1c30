package agui

import "github.com/aguard/aguard/internal/jsonedit"

// This file applies a Decider's verdicts to the stream (README, "In the
// stream": the policy rows).

// decideEnded asks the Decider about every call whose arguments completed
// during the current event, and emits what each verdict calls for. Events
// emitted here come before the current event unless the caller has already
// emitted it (an explicit TOOL_CALL_END, whose consequences follow it).
func (s *Stream) decideEnded(b *Batch, typ string) {
	ended := s.run.ended
	s.run.ended = s.run.ended[:0]
	for _, c := range ended {
		b.Calls = append(b.Calls, CallEvent{Kind: CallArgumentsComplete, ID: c.id, Name: c.name,
			Frontend: s.in.isFrontendName(c.name), Arguments: c.args, Visibility: c.vis.String()})
	}
	if s.opts.Decider == nil || typ == tRunError {
		return // a run that errored has nothing left to decide
	}
	for _, c := range ended {
		s.decide(b, c, PhaseToolCallEnd)
		if s.done {
			return
		}
	}
}

// decideUnadvertised asks the Decider, at RUN_FINISHED, about every call of
// the run that names a tool the input did not advertise and is still
// unanswered: left as it is, the consumer would take it for a pending call of
// its own. "A call naming a tool that was not advertised SHOULD NOT be
// executed without the same scrutiny a new tool would get"
// (https://docs.ag-ui.com, Tool Calls, Security Considerations).
func (s *Stream) decideUnadvertised(b *Batch) {
	if s.opts.Decider == nil {
		return
	}
	for _, c := range s.run.order {
		if _, ok := s.answered[c.id]; ok || s.in.isFrontendName(c.name) || c.withheld() {
			continue // a withheld call is not the consumer's: it holds nothing
		}
		s.decide(b, c, PhaseRunFinished)
		if s.done {
			return
		}
	}
}

func (s *Stream) decide(b *Batch, c *call, phase string) {
	if c.show == withdrawn {
		return // denied while held (past --max-held): nothing left to decide
	}
	frontend := s.in.isFrontendName(c.name)
	v := s.opts.Decider.Decide(s.ctx, &Call{
		Phase: phase, ID: c.id, Name: c.name,
		Arguments: c.args, ArgumentsTruncated: c.argsCut,
		ParentMessageID: c.parent, SubagentRunID: c.own.id,
		Reopened: c.reopened, Frontend: frontend,
	})
	switch v.Action {
	case ActionAllow, ActionDeny:
	case ActionRequireApproval:
		if frontend && phase == PhaseToolCallEnd {
			break
		}
		// What the stream applies is a denial: the ledger records it so.
		v.Action = ActionDeny
		v.Reason = "requires approval, but aguard cannot hold a call the agent executes itself: " + v.Reason
	default:
		v.Reason = "the decider answered an unknown action '" + v.Action + "'"
		v.Action = ActionDeny
	}
	b.Calls = append(b.Calls, CallEvent{Kind: CallDecided, ID: c.id, Name: c.name, Frontend: frontend, Verdict: v, Visibility: c.vis.String()})
	switch v.Action {
	case ActionAllow:
		s.allowed(b, c, phase, frontend)
		return
	case ActionRequireApproval:
		b.Notes = append(b.Notes, Note{Kind: "approval_required", ID: c.id,
			Message: "tool call '" + c.id + "' (" + c.name + ") requires approval: " + v.Reason + " (decision " + v.DecisionID + ")"})
		if !s.opts.Monitor {
			s.allowed(b, c, phase, frontend)
			s.put(b, c.own, tCustom, s.approvalRequired(c, v))
		}
		return
	}
	s.deny(b, c, phase, frontend, v)
}

// allowed lets a held call through once it is judged. An agent-side call
// allowed at its end stays held until its result arrives or the run
// finishes: until then nothing says the agent will answer it, and a call
// left unanswered is one the consumer would take for its own.
func (s *Stream) allowed(b *Batch, c *call, phase string, frontend bool) {
	if c.show != held {
		return
	}
	if !frontend && phase == PhaseToolCallEnd && !c.resultSeen {
		c.endAllowed = true
		return
	}
	s.release(b, c)
}

// deny applies a denial of c (the policy's, or aguard's own).
func (s *Stream) deny(b *Batch, c *call, phase string, frontend bool, v Verdict) {
	msg := "tool call '" + c.id + "' (" + c.name + ") denied by policy: " + v.Reason + " (decision " + v.DecisionID + ")"
	b.Notes = append(b.Notes, Note{Kind: "policy_denied", ID: c.id, Message: msg})
	if s.opts.Monitor {
		return
	}
	switch c.show {
	case hidden:
		// Only an agent-side call is hidden, and it is decided only at its
		// end: the run ends, without a word of the call.
		s.end(b, CodePolicyDenied, "a tool call aguard keeps from the consumer was denied by policy (decision "+v.DecisionID+")")
		return
	case held:
		// The consumer never sees any of it, only the denial.
		s.withdraw(b, c)
		s.put(b, c.own, tCustom, s.denied(c, v))
		if !frontend && phase == PhaseToolCallEnd {
			s.end(b, CodePolicyDenied, msg)
		}
		return
	}
	if !frontend && phase == PhaseToolCallEnd {
		// The agent executes its own calls; the only way to stop one is to
		// end the run and close its stream.
		s.end(b, CodePolicyDenied, msg)
		return
	}
	// aguard declines the call for the application: "the application
	// disposes of each unanswered frontend call — executing it, or declining
	// it" and "a call the user declined is answered by saying so"
	// (https://docs.ag-ui.com, Tool Calls, Frontend tools).
	s.put(b, c.own, tCustom, s.denied(c, v))
	s.put(b, c.own, tToolResult, s.declineResult(c, v))
	put(&s.answered, c.id, struct{}{})
	s.recordDecline(c, v)
}

// withTag appends the call owner's subagentRunId, so that aguard's events
// about a subagent's call are attributed (and close its chunk lane) as the
// call's own events would be.
func withTag(dst []byte, c *call) []byte {
	if c.own.sub {
		dst = append(dst, `,"subagentRunId":`...)
		dst = jsonedit.AppendString(dst, c.own.id)
	}
	return dst
}

func (s *Stream) denied(c *call, v Verdict) []byte {
	return signal("aguard.tool_call_denied", c,
		"toolCallId", c.id, "toolCallName", c.name, "reason", v.Reason, "decisionId", v.DecisionID)
}

func (s *Stream) declineResult(c *call, v Verdict) []byte {
	e := []byte(`{"type":"TOOL_CALL_RESULT","messageId":`)
	e = jsonedit.AppendString(e, "aguard-declined-"+c.id)
	e = append(e, `,"toolCallId":`...)
	e = jsonedit.AppendString(e, c.id)
	e = append(e, `,"role":"tool","content":`...)
	e = jsonedit.AppendString(e, "Declined by policy: "+v.Reason)
	e = withTag(e, c)
	return append(e, '}')
}

func (s *Stream) approvalRequired(c *call, v Verdict) []byte {
	return signal("aguard.approval_required", c, "toolCallId", c.id, "toolCallName", c.name,
		"requiresApprovalAt", v.RequiresApprovalAt, "reason", v.Reason, "decisionId", v.DecisionID)
}

// signal builds one of aguard's in-stream signals: a CUSTOM event named name
// whose value is an object of the given string members (key, value, …), in
// order, attributed to the call's owner. Every value is JSON-escaped.
func signal(name string, c *call, members ...string) []byte {
	e := []byte(`{"type":"CUSTOM","name":`)
	e = jsonedit.AppendString(e, name)
	e = append(e, `,"value":{`...)
	for i := 0; i+1 < len(members); i += 2 {
		if i > 0 {
			e = append(e, ',')
		}
		e = jsonedit.AppendString(e, members[i])
		e = append(e, ':')
		e = jsonedit.AppendString(e, members[i+1])
	}
	e = append(e, '}')
	e = withTag(e, c)
	return append(e, '}')
}

package agui

import (
	"github.com/valyala/fastjson"
)

// apply runs one well-formed event of a known type through the sequence
// rules and the tool-call rules. It may mark the event dropped or replace
// e.out with a rewritten text.
func (s *Stream) apply(e *ev, b *Batch) *violation {
	if vi := s.runRules(e.typ); vi != nil {
		if !s.opts.Monitor {
			return vi
		}
		s.fatal(b, vi) // noted; go on tracking
	}
	t := e.tag()
	switch e.typ {
	case tRunStarted:
		return s.runStartedEvent(e, b)
	case tRunFinished:
		return s.runFinishedEvent(e, b)
	case tRunError:
		return s.runErrorEvent(e, b)
	case tMessagesSnapshot:
		if vi := s.closeAllLanes(); vi != nil {
			return vi
		}
		s.scrubMessages(e, b, false)
		return nil
	case tTextStart, tTextContent, tTextEnd:
		return s.textEvent(e, t)
	case tToolStart:
		return s.toolStartEvent(e, t)
	case tToolArgs, tToolEnd:
		return s.toolContEvent(e, t)
	case tToolResult:
		return s.toolResult(e, b, t)
	case tTextChunk, tToolChunk, tReasoningMsgChunk:
		return s.chunkEvent(e, t)
	case tCustom:
		if s.forgedSignal(e, b) {
			return nil // dropped: the consumer never sees it, it closes nothing
		}
		return s.closeLaneOf(t)
	case tStateSnapshot, tStateDelta:
		return s.closeLaneOf(t)
	case tStepStarted, tStepFinished:
		return s.stepEvent(e, t)
	case tReasoningStart, tReasoningMsgStart, tReasoningMsgCont, tReasoningMsgEnd, tReasoningEnd:
		return s.reasoningEvent(e, t)
	case tReasoningEncrypted:
		return s.encryptedValue(e, t)
	case tActivitySnapshot, tActivityDelta:
		return s.activityEvent(e, t)
	case tSubagentStarted:
		return s.subagentStarted(e)
	case tSubagentFinished, tSubagentError:
		return s.subagentEnded(e)
	case tThinkingStart, tThinkingTextStart, tThinkingEnd, tThinkingTextCont, tThinkingTextEnd:
		return s.thinkingEvent(e, t)
	}
	return nil // RAW
}

// textEvent applies TEXT_MESSAGE_START, _CONTENT and _END.
func (s *Stream) textEvent(e *ev, t tag) *violation {
	id, _ := e.str("messageId")
	if vi := s.closeLaneOf(t); vi != nil {
		return vi
	}
	switch e.typ {
	case tTextStart:
		return s.run.textStart(id, t)
	case tTextEnd:
		if vi := s.mixedForms(laneText, e.typ, id); vi != nil {
			return vi
		}
	}
	return s.run.textCont(e.typ, id, t, e.typ == tTextEnd)
}

// toolStartEvent applies TOOL_CALL_START: the call is tracked from here,
// and marked a frontend call when the run advertised its tool.
func (s *Stream) toolStartEvent(e *ev, t tag) *violation {
	id, _ := e.str("toolCallId")
	name, _ := e.str("toolCallName")
	parent, hasParent := e.str("parentMessageId")
	if vi := s.closeLaneOf(t); vi != nil {
		return vi
	}
	c, vi := s.run.toolStart(id, name, parent, hasParent, t)
	if vi != nil {
		return vi
	}
	e.call = c
	if s.in.isFrontend(name) {
		s.markFrontend(id)
	}
	return nil
}

// toolContEvent applies TOOL_CALL_ARGS and TOOL_CALL_END.
func (s *Stream) toolContEvent(e *ev, t tag) *violation {
	id, _ := e.str("toolCallId")
	delta, _ := e.str("delta")
	if vi := s.closeLaneOf(t); vi != nil {
		return vi
	}
	if e.typ == tToolEnd {
		if vi := s.mixedForms(laneTool, e.typ, id); vi != nil {
			return vi
		}
	}
	if vi := s.run.toolCont(e.typ, id, delta, t, e.typ == tToolEnd); vi != nil {
		return vi
	}
	if s.hold.active {
		e.call = s.run.calls[string(id)]
	}
	return nil
}

// chunkEvent applies the chunk forms (TEXT_MESSAGE_CHUNK, TOOL_CALL_CHUNK,
// REASONING_MESSAGE_CHUNK), expanded as the client expands them (chunks.go).
func (s *Stream) chunkEvent(e *ev, t tag) *violation {
	c := chunk{typ: e.typ, t: t, unknown: e.unknown, rawEvent: e.present("rawEvent"), metadata: e.present("metadata")}
	c.delta, c.hasDelta = e.str("delta")
	switch e.typ {
	case tTextChunk:
		c.kind = laneText
		c.id, c.hasID = e.str("messageId")
		c.role, c.hasRole = e.str("role")
		c.name, c.hasName = e.str("name")
	case tToolChunk:
		c.kind = laneTool
		c.id, c.hasID = e.str("toolCallId")
		c.name, c.hasName = e.str("toolCallName")
		c.parent, c.hasParent = e.str("parentMessageId")
	default:
		c.kind = laneReasoning
		c.id, c.hasID = e.str("messageId")
	}
	if vi := s.expandChunk(&c); vi != nil {
		return vi
	}
	if c.kind == laneTool {
		if c.hasID && c.hasName && s.in.isFrontend(c.name) {
			s.markFrontend(c.id)
		}
		e.call = c.call
		if e.call == nil && s.hold.active {
			e.call = s.run.calls[c.laneID]
		}
	}
	return nil
}

// stepEvent applies STEP_STARTED and STEP_FINISHED.
func (s *Stream) stepEvent(e *ev, t tag) *violation {
	name, _ := e.str("stepName")
	if vi := s.closeLaneOf(t); vi != nil {
		return vi
	}
	if e.typ == tStepStarted {
		return s.run.stepStarted(name, t)
	}
	return s.run.stepFinished(name, t)
}

// reasoningEvent applies REASONING_START, _END and the reasoning message
// events.
func (s *Stream) reasoningEvent(e *ev, t tag) *violation {
	id, _ := e.str("messageId")
	if vi := s.closeLaneOf(t); vi != nil {
		return vi
	}
	switch e.typ {
	case tReasoningStart, tReasoningMsgStart:
		return s.run.reasoningStart(e.typ, e.typ == tReasoningStart, id, t)
	case tReasoningMsgEnd:
		if vi := s.mixedForms(laneReasoning, e.typ, id); vi != nil {
			return vi
		}
	}
	return s.run.reasoningCont(e.typ, e.typ == tReasoningEnd, id, t, e.typ != tReasoningMsgCont)
}

// activityEvent applies ACTIVITY_SNAPSHOT (which gives an activity its
// owner, unless it replaces nothing of one already owned) and
// ACTIVITY_DELTA (which must come from that owner).
func (s *Stream) activityEvent(e *ev, t tag) *violation {
	id, _ := e.str("messageId")
	own := s.run.activities[string(id)]
	if e.typ == tActivitySnapshot {
		rep := e.v.Get("replace")
		if own == nil || rep == nil || rep.Type() != fastjson.TypeFalse {
			o := t.owner()
			put(&s.run.activities, string(id), &o)
			if own == nil {
				s.run.keep(len(id) + len(o.id))
			}
		}
		return nil
	}
	if t.disagrees(own) {
		return viol("owner_mismatch", string(id), "ACTIVITY_DELTA: subagentRunId "+q(t.id)+" does not match the owner "+own.String()+" of activity "+q(id))
	}
	return nil
}

// thinkingEvent applies the deprecated THINKING_* events as the client
// does: as reasoning, without ids of their own.
func (s *Stream) thinkingEvent(e *ev, t tag) *violation {
	if vi := s.closeLaneOf(t); vi != nil {
		return vi
	}
	switch e.typ {
	case tThinkingStart, tThinkingTextStart:
		s.mint++
		ent := &entity{own: t.owner()}
		s.run.keep(len(ent.own.id))
		if e.typ == tThinkingStart {
			s.thinkSpan = s.mint
			s.run.openEntity(ent, true)
			put(&s.run.thinkSpans, s.mint, ent)
		} else {
			s.thinkMsg = s.mint
			s.run.openEntity(ent, false)
			put(&s.run.thinkMsgs, s.mint, ent)
		}
		return nil
	case tThinkingEnd:
		id := s.thinkSpan
		s.thinkSpan = 0
		return s.run.contEntity(s.run.thinkSpans[id], e.typ+" (as REASONING_END)", true, "(THINKING)", t, true)
	}
	id := s.thinkMsg
	end := e.typ == tThinkingTextEnd
	if end {
		s.thinkMsg = 0
	}
	return s.run.contEntity(s.run.thinkMsgs[id], e.typ, false, "(THINKING_TEXT_MESSAGE)", t, end)
}

// runRules are verifyEvents' stream-level rules: the first event, nothing
// after RUN_ERROR but RUN_STARTED, nothing after RUN_FINISHED but RUN_STARTED
// or RUN_ERROR, no nested RUN_STARTED.
func (s *Stream) runRules(typ string) *violation {
	if s.runErr && typ != tRunStarted {
		return viol("event_after_run_error", "", typ+" after RUN_ERROR: only RUN_STARTED may follow")
	}
	if s.runDone && typ != tRunError && typ != tRunStarted {
		return viol("event_after_run_finished", "", typ+" after RUN_FINISHED: only RUN_STARTED or RUN_ERROR may follow")
	}
	if !s.first {
		s.first = true
		if typ != tRunStarted && typ != tRunError {
			return viol("first_event", "", "the first event is "+typ+"; it must be RUN_STARTED or RUN_ERROR")
		}
	} else if typ == tRunStarted && s.runStarted && !s.runDone && !s.runErr {
		return viol("run_already_started", "", "RUN_STARTED while a run is still active")
	}
	return nil
}

func (s *Stream) runStartedEvent(e *ev, b *Batch) *violation {
	if vi := s.closeAllLanes(); vi != nil {
		return vi
	}
	if !s.runStarted || s.runDone || s.runErr {
		s.run.reset()
		s.resetHold()
		clear(s.answered)
		s.runDone, s.runErr = false, false
	}
	s.runStarted = true
	s.runs++
	id, _ := e.str("runId")
	s.run.runID = string(id)
	if in := e.v.Get("input"); in != nil && in.Type() == fastjson.TypeObject {
		s.scrubMessages(e, b, true)
	}
	return nil
}

// runFinishedEvent applies RUN_FINISHED: every lane must be closed; the
// calls the run ended with are judged, then what is left pending is set.
func (s *Stream) runFinishedEvent(e *ev, b *Batch) *violation {
	if vi := s.closeAllLanes(); vi != nil {
		return vi
	}
	if vi := s.run.runFinished(); vi != nil {
		return vi
	}
	s.runDone = true
	// Decisions come before the pending list: a declined call is
	// answered, so it is no longer pending.
	s.decideEnded(b, e.typ)
	if !s.done {
		s.decideUnadvertised(b)
	}
	if s.done {
		return nil
	}
	s.setPending(e, b)
	return nil
}

// runErrorEvent applies RUN_ERROR: the run ends before the calls still held
// are judged, so the consumer never sees them.
func (s *Stream) runErrorEvent(e *ev, b *Batch) *violation {
	vi := s.closeAllLanes()
	s.abandon(b)
	s.runErr = true
	code := s.agentErrorCode(e, b)
	b.Run.Kind, b.Run.RunID, b.Run.Code = "error", s.run.runID, code
	return vi
}

func (s *Stream) subagentStarted(e *ev) *violation {
	id, _ := e.str("subagentRunId")
	if s.run.subActive[string(id)] {
		return viol("subagent_already_active", string(id), "SUBAGENT_STARTED for subagent "+q(id)+", which is already active")
	}
	if s.run.subClosed[string(id)] {
		return viol("subagent_reused", string(id), "SUBAGENT_STARTED for subagent "+q(id)+", which already finished in this run")
	}
	if p, ok := e.str("parentSubagentRunId"); ok && !s.run.subActive[string(p)] && !s.run.subClosed[string(p)] {
		return viol("subagent_unknown_parent", string(id), "SUBAGENT_STARTED for subagent "+q(id)+": parentSubagentRunId "+q(p)+" has not been started in this run")
	}
	put(&s.run.subActive, string(id), true)
	s.run.keep(len(id))
	return nil
}

// subagentEnded applies SUBAGENT_FINISHED and SUBAGENT_ERROR: the
// subagent's open lane closes, and it must have been active.
func (s *Stream) subagentEnded(e *ev) *violation {
	id, _ := e.str("subagentRunId")
	if i := s.laneIndex(owner{id: string(id), sub: true}); i >= 0 {
		if vi := s.closeLane(i); vi != nil {
			return vi
		}
	}
	if !s.run.subActive[string(id)] {
		return viol("subagent_not_active", string(id), e.typ+" for subagent "+q(id)+", which is not active")
	}
	delete(s.run.subActive, string(id))
	put(&s.run.subClosed, string(id), true) // kept: counted when it started
	return nil
}

func (s *Stream) encryptedValue(e *ev, t tag) *violation {
	id, _ := e.str("entityId")
	sub, _ := e.str("subtype")
	var own *owner
	switch string(sub) {
	case "tool-call":
		if c := s.run.calls[string(id)]; c != nil {
			own = &c.own
			e.call = c // a trace of the call: it goes where the call's events go
		} else if s.hold.active {
			e.cid = id
		}
	default: // "message": a text message or a reasoning message
		if m := s.run.msgs[string(id)]; m != nil {
			own = &m.own
		} else if m := s.run.reasoning[string(id)]; m != nil {
			own = &m.own
		}
	}
	if t.disagrees(own) {
		return viol("owner_mismatch", string(id), "REASONING_ENCRYPTED_VALUE: subagentRunId "+q(t.id)+" does not match the owner "+own.String()+" of "+q(id))
	}
	return nil
}

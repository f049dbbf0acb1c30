package agui

import (
	"strconv"
	"strings"

	"github.com/valyala/fastjson"
)

// This file applies seed 000's frontend-tool rules:
//
//   - "A producer that calls a frontend tool MUST NOT answer it: no
//     TOOL_CALL_RESULT, no fabricated tool message. The result is the
//     application's to produce." Such answers are dropped; the call stays
//     pending.
//   - "The success outcome's pendingToolCallIds names the calls left
//     unanswered, in the order they were made. … when it does, the list MUST
//     contain exactly the tool calls the run started and did not answer with
//     TOOL_CALL_RESULT." aguard sets it to exactly that.
//   - "It MUST use the success outcome, or none, and MUST NOT report the run
//     as interrupted." Noted, not fatal.

// fabricated reports whether a result for call id would be a producer's
// answer to a frontend call the consumer did not answer itself.
func (s *Stream) fabricated(id []byte) bool {
	return s.isFrontendCall(id) && !s.in.consumerAnswered(id)
}

func (s *Stream) toolResult(e *ev, b *Batch, t tag) *violation {
	id, _ := e.str("toolCallId")
	if s.fabricated(id) {
		b.Notes = append(b.Notes, Note{Kind: "fabricated_result", ID: string(id),
			Message: "TOOL_CALL_RESULT answering frontend tool call " + q(id) + " dropped: a producer MUST NOT answer a frontend call; the call stays pending"})
		if !s.opts.Monitor {
			// Dropped: the consumer never sees it, so it neither closes a
			// chunk lane nor answers the call.
			e.drop = true
			return nil
		}
	}
	if vi := s.closeLaneOf(t); vi != nil {
		return vi
	}
	// The result mints a tool message; the newest mint owns the id.
	mid, _ := e.str("messageId")
	if m := s.run.msgs[string(mid)]; m != nil {
		m.own = t.owner()
	} else {
		e := &entity{id: string(mid), own: t.owner()}
		s.run.msgs[e.id] = e
	}
	if _, ok := s.answered[string(id)]; !ok {
		s.answered[string(id)] = struct{}{}
	}
	if !e.drop {
		sid, name := "", ""
		if c := s.run.calls[string(id)]; c != nil {
			sid, name = c.id, c.name // the call's own strings: no copy
		} else {
			sid = string(id)
		}
		var content []byte
		if cv := e.v.Get("content"); cv != nil {
			content = cv.MarshalTo(s.tbuf[:0])
			s.tbuf = content
		}
		// Reported after the calls this result's lane closing completed
		// (Feed), in the order the consumer sees them.
		s.answer = CallEvent{Kind: CallAnswered, ID: sid, Name: name,
			Frontend: s.isFrontendCall(id), Content: content}
		s.hasAnswer = true
	}
	return nil
}

// scrubMessages handles the messages of a MESSAGES_SNAPSHOT (echo == false)
// or of the RUN_STARTED input echo (echo == true): it learns which calls name
// frontend tools, removes tool messages that answer such a call when the
// consumer did not send them itself, and seeds the owners of the remaining
// messages as verifyEvents does (a snapshot authoritatively, the echo only
// for ids nothing claimed).
func (s *Stream) scrubMessages(e *ev, b *Batch, echo bool) {
	var msgs []*fastjson.Value
	if echo {
		msgs = e.v.GetArray("input", "messages")
	} else {
		msgs = e.v.GetArray("messages")
	}
	for _, m := range msgs {
		if string(m.GetStringBytes("role")) != "assistant" {
			continue
		}
		for _, tc := range m.GetArray("toolCalls") {
			if s.in.isFrontend(tc.GetStringBytes("function", "name")) {
				s.markFrontend(tc.GetStringBytes("id"))
			}
		}
	}
	var drops []int
	for i, m := range msgs {
		if string(m.GetStringBytes("role")) != "tool" {
			continue
		}
		id := m.GetStringBytes("toolCallId")
		if !s.fabricated(id) {
			continue
		}
		where := "MESSAGES_SNAPSHOT"
		if echo {
			where = "the RUN_STARTED input echo"
		}
		b.Notes = append(b.Notes, Note{Kind: "fabricated_result", ID: string(id),
			Message: "tool message " + q(m.GetStringBytes("id")) + " in " + where + " answering frontend tool call " + q(id) + " removed: a producer MUST NOT fabricate a tool message; the call stays pending"})
		if !s.opts.Monitor {
			drops = append(drops, i)
		}
	}
	if len(drops) > 0 {
		s.removeMessages(e, drops, echo)
	}
	authoritative := !echo
	for i, m := range msgs {
		if len(drops) > 0 && drops[0] == i {
			drops = drops[1:]
			continue
		}
		s.seedOwner(m, authoritative)
	}
}

// removeMessages rewrites e.out without the messages at the indexes drops.
func (s *Stream) removeMessages(e *ev, drops []int, echo bool) {
	obj := e.out
	off := 0
	if echo {
		is, ie, ok := objectMember(obj, "input")
		if !ok {
			return
		}
		obj, off = obj[is:ie], is
	}
	ms, me, ok := objectMember(obj, "messages")
	if !ok {
		return
	}
	ms, me = ms+off, me+off
	s.tbuf = removeElements(s.tbuf[:0], e.out[ms:me], drops)
	r := append(s.rbuf[:0], e.out[:ms]...)
	r = append(r, s.tbuf...)
	r = append(r, e.out[me:]...)
	s.rbuf = r
	e.out = r
}

// seedOwner records the owner of a replayed message (and of its tool calls).
func (s *Stream) seedOwner(m *fastjson.Value, authoritative bool) {
	id := m.GetStringBytes("id")
	sub := m.Get("subagentRunId")
	own := owner{}
	if sub != nil && sub.Type() == fastjson.TypeString {
		own = owner{id: string(sub.GetStringBytes()), sub: true}
	}
	bucket := s.run.msgs
	switch string(m.GetStringBytes("role")) {
	case "reasoning":
		bucket = s.run.reasoning
	case "activity":
		if cur := s.run.activities[string(id)]; cur == nil || authoritative {
			o := own
			s.run.activities[string(id)] = &o
		}
		return
	}
	if cur := bucket[string(id)]; cur == nil {
		bucket[string(id)] = &entity{own: own}
	} else if authoritative {
		cur.own = own
	}
	for _, tc := range m.GetArray("toolCalls") {
		tid := tc.GetStringBytes("id")
		if c := s.run.calls[string(tid)]; c == nil {
			s.run.calls[string(tid)] = &call{id: string(tid), own: own}
		} else if authoritative {
			c.own = own
		}
	}
}

// setPending makes a successful RUN_FINISHED name exactly the calls this run
// started and did not answer, in first-START order (seed 000, Frontend
// tools). Every other byte of the event is kept.
func (s *Stream) setPending(e *ev, b *Batch) {
	s.pending = s.pending[:0]
	frontendPending := false
	for _, c := range s.run.order {
		if _, ok := s.answered[c.id]; ok {
			continue
		}
		s.pending = append(s.pending, c.id)
		if s.isFrontendCall([]byte(c.id)) {
			frontendPending = true
		}
	}
	ov := e.v.Get("outcome")
	if ov != nil && ov.Type() == fastjson.TypeNull {
		ov = nil
	}
	b.Run.Kind, b.Run.RunID, b.Run.Outcome = "finished", s.run.runID, "success"
	b.Run.Pending = append(b.Run.Pending[:0], s.pending...)
	if ov != nil {
		b.Run.Outcome = string(ov.GetStringBytes("type"))
		for _, iv := range ov.GetArray("interrupts") {
			b.Run.Interrupts = append(b.Run.Interrupts, Interrupt{
				ID: string(iv.GetStringBytes("id")), ExpiresAt: string(iv.GetStringBytes("expiresAt"))})
		}
	}
	if ov != nil {
		switch string(ov.GetStringBytes("type")) {
		case "success":
		case "interrupt":
			if frontendPending {
				b.Notes = append(b.Notes, Note{Kind: "interrupt_frontend",
					Message: "RUN_FINISHED reports an interrupt while frontend tool calls are pending (" + quoteList(s.pending) + "); a run that stops on a frontend call MUST use the success outcome"})
			}
			return
		default: // cancelled, or a type the protocol does not know: left as is
			return
		}
	}
	var list []*fastjson.Value
	hasList := false
	if ov != nil {
		if lv := ov.Get("pendingToolCallIds"); lv != nil {
			list, hasList = lv.GetArray(), true
		}
	}
	if len(s.pending) == 0 {
		if len(list) == 0 {
			return // absent or [], as the producer sent it
		}
	} else if hasList && sameIDs(list, s.pending) {
		return
	}
	kind, what := "pending_added", "added"
	if hasList {
		kind, what = "pending_rewritten", "replaced a wrong list with"
	}
	b.Notes = append(b.Notes, Note{Kind: kind,
		Message: "RUN_FINISHED outcome.pendingToolCallIds: " + what + " [" + quoteList(s.pending) + "]"})
	if s.opts.Monitor {
		return
	}
	s.tbuf = appendStringArray(s.tbuf[:0], s.pending)
	r := s.rbuf[:0]
	if ov == nil {
		n := len(s.tbuf)
		s.tbuf = append(s.tbuf, `{"type":"success","pendingToolCallIds":`...)
		s.tbuf = append(s.tbuf, s.tbuf[:n]...)
		s.tbuf = append(s.tbuf, '}')
		r = setMember(r, e.out, "outcome", s.tbuf[n:])
	} else {
		vs, ve, ok := objectMember(e.out, "outcome")
		if !ok {
			return
		}
		n := len(s.tbuf)
		s.tbuf = setMember(s.tbuf, e.out[vs:ve], "pendingToolCallIds", s.tbuf[:n])
		r = append(r, e.out[:vs]...)
		r = append(r, s.tbuf[n:]...)
		r = append(r, e.out[ve:]...)
	}
	s.rbuf = r
	e.out = r
}

func sameIDs(list []*fastjson.Value, ids []string) bool {
	if len(list) != len(ids) {
		return false
	}
	for i, v := range list {
		if string(v.GetStringBytes()) != ids[i] {
			return false
		}
	}
	return true
}

func quoteList(ids []string) string {
	qs := make([]string, len(ids))
	for i, id := range ids {
		qs[i] = strconv.Quote(id)
	}
	return strings.Join(qs, ",")
}

package agui

import (
	"strconv"
	"strings"

	"github.com/aguard/aguard/internal/jsonedit"
	"github.com/valyala/fastjson"
)

// This file applies the frontend-tool rules of the AG-UI tool-calls chapter
// (https://docs.ag-ui.com, Tool Calls, Frontend tools) to the stream:
//
//   - "A producer that calls a frontend tool MUST NOT answer it: no
//     TOOL_CALL_RESULT, no fabricated tool message. The result is the
//     application's to produce." Such answers are dropped; the call stays
//     pending. (snapshot.go does the same for replayed messages.)
//   - "The success outcome's pendingToolCallIds names the calls left
//     unanswered, in the order they were made. … when it does, the list MUST
//     contain exactly the tool calls the run started and did not answer with
//     TOOL_CALL_RESULT." aguard sets it to exactly that; the calls a run
//     started include those replayed messages introduced (snapshot.go).
//   - "It MUST use the success outcome, or none, and MUST NOT report the run
//     as interrupted." Noted, not fatal.

// fabricated reports whether a TOOL_CALL_RESULT (message id mid, content)
// answering call id would be an answer to a frontend call that is not the
// application's own.
func (s *Stream) fabricated(id, mid []byte, content *fastjson.Value) bool {
	if !s.isFrontendCall(id) {
		return false
	}
	var own bool
	own, s.tbuf = s.in.ownAnswer(id, mid, content, s.tbuf)
	return !own
}

func (s *Stream) toolResult(e *ev, b *Batch, t tag) *violation {
	id, _ := e.str("toolCallId")
	mid, _ := e.str("messageId")
	if s.fabricated(id, mid, e.v.Get("content")) {
		b.Notes = append(b.Notes, Note{Kind: "fabricated_result", ID: string(id),
			Message: "TOOL_CALL_RESULT " + jq(mid) + " answering frontend tool call " + jq(id) +
				" dropped: it is not the application's own answer, and a producer MUST NOT answer a frontend call; the call stays pending"})
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
	if m := s.run.msgs[string(mid)]; m != nil {
		m.own = t.owner()
	} else {
		e := &entity{id: string(mid), own: t.owner()}
		put(&s.run.msgs, e.id, e)
		s.run.keep(len(e.id) + len(e.own.id))
	}
	if _, ok := s.answered[string(id)]; !ok {
		put(&s.answered, string(id), struct{}{})
		s.run.keep(len(id))
	}
	sid, name := "", ""
	if c := s.run.calls[string(id)]; c != nil {
		sid, name = c.id, c.name // the call's own strings: no copy
		e.call = c               // the result goes where the call's events go
	} else {
		sid = string(id)
		e.cid = id
	}
	// Reported after the calls this result's lane closing completed
	// (Feed), in the order the consumer sees them.
	s.addAnswer(sid, name, s.isFrontendCall(id), e.v.Get("content"))
	return nil
}

// setPending makes a successful RUN_FINISHED name exactly the calls this run
// started and did not answer, in the order they were started
// (https://docs.ag-ui.com, Tool Calls, Frontend tools). Every other byte of the event is kept.
func (s *Stream) setPending(e *ev, b *Batch) {
	s.pending = s.pending[:0]
	frontendPending := false
	for _, c := range s.run.order {
		if _, ok := s.answered[c.id]; ok || c.withheld() {
			continue // answered, or never seen by the consumer
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
	var ok bool
	if ov == nil {
		n := len(s.tbuf)
		s.tbuf = append(s.tbuf, `{"type":"success","pendingToolCallIds":`...)
		s.tbuf = append(s.tbuf, s.tbuf[:n]...)
		s.tbuf = append(s.tbuf, '}')
		if r, ok = jsonedit.Set(r, e.out, "outcome", s.tbuf[n:]); !ok {
			return
		}
	} else {
		var vs, ve int
		vs, ve, ok = jsonedit.Member(e.out, "outcome")
		if !ok {
			return
		}
		n := len(s.tbuf)
		if s.tbuf, ok = jsonedit.Set(s.tbuf, e.out[vs:ve], "pendingToolCallIds", s.tbuf[:n]); !ok {
			return
		}
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

// appendStringArray appends ids as a JSON array of strings.
func appendStringArray(dst []byte, ids []string) []byte {
	dst = append(dst, '[')
	for i, id := range ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsonedit.AppendString(dst, id)
	}
	return append(dst, ']')
}

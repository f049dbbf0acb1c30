package agui

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/aguard/aguard/internal/jsonedit"
)

// This file keeps from the consumer what it must not see (README, "Hold and
// hide"). Each tool call is put to the Decider as it starts
// (PhaseToolCallStart), before anything of its arguments exists, and the
// verdict says where the call's events go:
//
//   - stream: to the consumer as they come, as they always did;
//   - hold: into the hold queue, until the call is judged — at its end, or,
//     for a call the agent executes itself, when its result arrives or the
//     run finishes. Allowed, its events are released unchanged and in
//     order, at that moment; denied, they are dropped, and the consumer
//     gets only aguard.tool_call_denied. Events of other messages go ahead
//     meanwhile; a MESSAGES_SNAPSHOT waits with the held calls, and every
//     event after it waits behind it, so that the consumer applies them in
//     the order the agent sent them;
//   - hide (agent-side calls only): nowhere. The call's events, its result
//     and its entries in replayed messages never reach the consumer; it is
//     still decided at its end and reported.
//
// The consumer's verifier sees a held call's events later than the agent
// sent them, and never sees a denied or hidden call's. Tool calls are
// checked entity by entity, so moving or removing one call's whole group
// keeps every other entity's sequence intact; the exceptions — an event
// that changes the owner of a held call's parent message, and an id-less
// chunk whose lane the consumer may resolve otherwise — are handled where
// they arise (routeEvent, resolveLane).

// show says where a call's events go.
type show uint8

const (
	// shown: to the consumer as they come.
	shown show = iota
	// held: into the hold queue, until the call is judged.
	held
	// hidden: nowhere (ActionHide).
	hidden
	// withdrawn: nowhere; the call was denied while held.
	withdrawn
)

// vis is the tool_call_start verdict as a Stream applied it to a call.
type vis uint8

const (
	visNone   vis = iota // no Decider was asked
	visStream            // ActionStream
	visHold              // ActionHold
	visHide              // ActionHide
)

// String returns the action of v, as CallEvent.Visibility reports it.
func (v vis) String() string {
	switch v {
	case visStream:
		return ActionStream
	case visHold:
		return ActionHold
	case visHide:
		return ActionHide
	}
	return ""
}

// withheld reports a call the consumer never sees.
func (c *call) withheld() bool { return c.show == hidden || c.show == withdrawn }

// heldEvent is one event in the hold queue.
type heldEvent struct {
	// c is the held call the event belongs to; nil for an event that
	// waits behind a barrier.
	c   *call
	typ string
	js  []byte // a copy; nil for a marker (a call replayed messages introduced)
	// cid: the toolCallId of an event about a call the run had not started
	// when it was queued (a TOOL_CALL_RESULT, a REASONING_ENCRYPTED_VALUE).
	// Should that call be withheld before the event goes out, the event is
	// the withheld call's, and is dropped.
	cid []byte
	// barrier: the event waits for every call held before it, and every
	// event after it waits for it.
	barrier bool
}

// Hold-queue bounds beyond Options.MaxHeld: what one held event costs
// beyond its bytes, and how many may be held.
const (
	heldEventBytes = 64
	maxHeldEvents  = 1 << 16
)

// holdState is a Stream's hold queue and what it withholds.
type holdState struct {
	// barrier: the queue holds a barrier that still waits (q.back is not
	// empty); every event queues.
	barrier bool
	// active: events are routed by the call they belong to — the run has
	// calls that are not shown as they come, or the stream withholds ids.
	active bool
	q      holdQueue
	held   int // calls of the run held now (show == held)
	// parents counts the held calls by their parentMessageId (waits).
	parents map[string]int
	// withheld are the ids of the calls the consumer never sees (hidden,
	// or withdrawn), in every run of the stream: replayed messages lose
	// their traces, and answers to them are dropped.
	withheld map[string]struct{}
	// ghost: a withheld event closed a chunk lane in this run, which the
	// consumer may still hold open; lanes may resolve differently for it.
	ghost bool
	// closed: the current event closed a chunk lane.
	closed bool
	// deferring: aguard's own events wait in after until the current
	// event has been routed (replayed messages judged before they go).
	deferring bool
	after     []ownEvent
	// laneWait: aguard's own events waiting, in order, for their owner's
	// chunk lane to close (put).
	laneWait []ownEvent
}

// ownEvent is one of aguard's own events, about a call of owner own.
type ownEvent struct {
	own owner
	ev  Event
}

func (s *Stream) maxHeld() int {
	if s.opts.MaxHeld > 0 {
		return s.opts.MaxHeld
	}
	return DefaultMaxHeld
}

// screen asks the Decider how the consumer sees call c, which the current
// event started, and applies the answer. It returns the verdict, zero when
// there is no Decider.
func (s *Stream) screen(b *Batch, c *call, echo bool) Verdict {
	if s.opts.Decider == nil {
		return Verdict{}
	}
	frontend := s.in.isFrontendName(c.name)
	v := s.opts.Decider.Decide(s.ctx, &Call{Phase: PhaseToolCallStart, ID: c.id, Name: c.name,
		ParentMessageID: c.parent, SubagentRunID: c.own.id, Frontend: frontend})
	applied := visHold
	switch v.Action {
	case ActionStream:
		applied = visStream
	case ActionHold:
	case ActionHide:
		if !frontend {
			applied = visHide // (the application must see its own calls)
		}
	default:
		b.Notes = append(b.Notes, Note{Kind: "unknown_start_action", ID: c.id,
			Message: "the decider answered tool_call_start for tool call " + jq([]byte(c.id)) + " with an unknown action " + jq([]byte(v.Action)) + "; the call is held (fail closed)"})
	}
	if applied == visHold && echo {
		// The RUN_STARTED input echo cannot wait: the call streams with
		// it and is judged right after it (README, "Hold and hide").
		applied = visStream
	}
	c.vis = applied
	if s.opts.Monitor {
		if applied != visStream {
			b.Notes = append(b.Notes, Note{Kind: "would_" + applied.String(), ID: c.id,
				Message: "tool call " + jq([]byte(c.id)) + " (" + jq([]byte(c.name)) + ") would be " + map[vis]string{visHold: "held", visHide: "hidden"}[applied] + " (monitor mode)"})
		}
		return v
	}
	if _, ok := s.hold.withheld[c.id]; ok {
		// An earlier run's call of that id was withheld; this one is the
		// consumer's to see, in later snapshots too, unless it is withheld
		// in its turn.
		delete(s.hold.withheld, c.id)
	}
	switch applied {
	case visHold:
		s.holdCall(c)
		s.hold.active = true
	case visHide:
		c.show = hidden
		s.hold.active = true
		s.withhold(c.id)
	default:
		return v
	}
	what := map[vis]string{visHold: "held back until it is judged", visHide: "hidden from the consumer"}[applied]
	b.Notes = append(b.Notes, Note{Kind: map[vis]string{visHold: "held", visHide: "hidden"}[applied], ID: c.id,
		Message: "tool call " + jq([]byte(c.id)) + " (" + jq([]byte(c.name)) + ") " + what + ": " + v.Reason + " (decision " + v.DecisionID + ")"})
	return v
}

// withhold records that the consumer never sees call id.
func (s *Stream) withhold(id string) {
	if _, ok := s.hold.withheld[id]; ok {
		return
	}
	if s.knownBytes+len(id)+knownEntryBytes > maxKnownBytes {
		s.overflow = true
		return
	}
	s.knownBytes += len(id) + knownEntryBytes
	if s.hold.withheld == nil {
		s.hold.withheld = map[string]struct{}{}
	}
	s.hold.withheld[id] = struct{}{}
	s.hold.active = true
}

// routeEvent delivers the current upstream event: to the consumer now, into
// the hold queue, or nowhere, by the call it belongs to.
func (s *Stream) routeEvent(b *Batch, e *ev) {
	if !s.hold.active {
		// Nothing held or withheld: out at once (most streams, always).
		b.Out = append(b.Out, Event{Type: e.typ, JSON: e.out})
		return
	}
	s.routeHeld(b, e)
}

func (s *Stream) routeHeld(b *Batch, e *ev) {
	closed := s.hold.closed
	s.hold.closed = false
	c := e.call
	switch {
	case c != nil && c.withheld():
		s.hold.ghost = s.hold.ghost || closed
	case c != nil && c.show == held:
		s.hold.ghost = s.hold.ghost || closed
		if !s.enqueue(b, c, e.typ, e.out, false, false, nil) {
			return // denied: over --max-held
		}
		if e.typ == tToolResult {
			c.resultSeen = true
			if c.endAllowed {
				s.release(b, c) // judged at its end; its result is here
			}
		}
	case c == nil && e.cid != nil && s.isWithheld(e.cid):
		// An answer to a call of an earlier run that the consumer never saw.
	default:
		if wait := s.waits(e); wait || s.hold.barrier {
			s.enqueue(b, nil, e.typ, e.out, wait, false, e.cid)
			return
		}
		s.deliver(b, e.typ, e.out)
	}
}

// waits reports whether an event that belongs to no held call must still
// wait for the held calls: a MESSAGES_SNAPSHOT (it would show the consumer
// the held calls, or lose them), and a TOOL_CALL_RESULT whose message id is
// the parent message of a held call (the result makes the message the
// result's; the consumer, getting the call's START after it, would take the
// call's owner from it).
func (s *Stream) waits(e *ev) bool {
	if s.hold.held == 0 {
		return false
	}
	switch e.typ {
	case tMessagesSnapshot:
		return true
	case tToolResult:
		mid, _ := e.str("messageId")
		return s.hold.parents[string(mid)] > 0
	}
	return false
}

func (s *Stream) isWithheld(id []byte) bool {
	_, ok := s.hold.withheld[string(id)]
	return ok
}

// put delivers one of aguard's own events, about a call of owner own:
// behind a waiting barrier, or to the consumer now. While own has a chunk
// lane open, or an earlier event of aguard's waits, it waits: the
// consumer's chunk expansion takes aguard's event as an explicit event of
// its owner, which closes that owner's lane ("An explicit event closes only
// ITS OWN lane's pending stream", transformChunks, @ag-ui/client 1.0.0),
// and the agent's next chunk, continuing the lane without an id, would be
// fatal to it.
func (s *Stream) put(b *Batch, own owner, typ string, js []byte) {
	if s.hold.deferring {
		s.hold.after = append(s.hold.after, ownEvent{own, Event{Type: typ, JSON: js}})
		return
	}
	if len(s.hold.laneWait) > 0 || s.laneIndex(own) >= 0 {
		s.hold.laneWait = append(s.hold.laneWait, ownEvent{own, Event{Type: typ, JSON: js}})
		return
	}
	s.putNow(b, typ, js)
}

func (s *Stream) putNow(b *Batch, typ string, js []byte) {
	if s.hold.barrier {
		s.enqueue(b, nil, typ, js, false, true, nil)
		return
	}
	s.emit(b, typ, js)
}

// putDeferred delivers what put held back while deferring.
func (s *Stream) putDeferred(b *Batch) {
	s.hold.deferring = false
	after := s.hold.after
	s.hold.after = nil
	for _, e := range after {
		s.put(b, e.own, e.ev.Type, e.ev.JSON)
	}
}

// putLaneWaiting delivers, in order, aguard's own events whose owner's
// lane the current event closed; the consumer synthesises that lane's end
// just before the event, and aguard's events go just before it too.
func (s *Stream) putLaneWaiting(b *Batch) {
	for len(s.hold.laneWait) > 0 && s.laneIndex(s.hold.laneWait[0].own) < 0 {
		e := s.hold.laneWait[0]
		s.hold.laneWait[0] = ownEvent{}
		s.hold.laneWait = s.hold.laneWait[1:]
		s.putNow(b, e.ev.Type, e.ev.JSON)
	}
	if len(s.hold.laneWait) == 0 {
		s.hold.laneWait = nil
	}
}

// deliver writes an event to the consumer, with the traces of withheld
// calls removed from replayed messages.
func (s *Stream) deliver(b *Batch, typ string, js []byte) {
	if len(s.hold.withheld) > 0 && (typ == tMessagesSnapshot || typ == tRunStarted) {
		js = s.scrub(js, typ == tRunStarted)
	}
	s.emit(b, typ, js)
}

// overHeld denies held call c because holding it would pass the bounds: a
// call aguard cannot hold until it is judged is one it cannot let through.
func (s *Stream) overHeld(b *Batch, c *call) {
	if c == nil {
		return
	}
	v := Verdict{Action: ActionDeny, DecisionID: "max-held-" + c.id,
		Reason: "the events held back until it is judged exceed the " + strconv.Itoa(s.maxHeld()) + " bytes (or " + strconv.Itoa(maxHeldEvents) + " events) aguard holds per stream"}
	frontend := s.in.isFrontendName(c.name)
	b.Calls = append(b.Calls, CallEvent{Kind: CallDecided, ID: c.id, Name: c.name, Frontend: frontend, Verdict: v, Visibility: c.vis.String()})
	s.deny(b, c, PhaseToolCallEnd, frontend, v)
}

// scrub returns the replayed messages of js (a MESSAGES_SNAPSHOT, or with
// echo a RUN_STARTED's input) without the traces of withheld calls: their
// entries in assistant messages' toolCalls, and the tool messages answering
// them. An assistant message left with no calls loses its toolCalls member.
// The application's own history stays: agents number calls per run, so a
// withheld call may share its id with a call the input carries, in the same
// message, and with its answers. It reads the text as it is, without a
// parse tree, members as the official client reads them (the last of a
// name; internal/jsonedit). js is returned unchanged when it holds none.
func (s *Stream) scrub(js []byte, echo bool) []byte {
	obj, off := js, 0
	if echo {
		is, ie, ok := jsonedit.Member(js, "input")
		if !ok {
			return js
		}
		obj, off = js[is:ie], is
	}
	ms, me, ok := jsonedit.Member(obj, "messages")
	if !ok || obj[ms] != '[' {
		return js
	}
	arr := obj[ms:me]
	var sp jsonedit.Splicer
	changed := false
	it := jsonedit.Elements(arr)
	for {
		el, more := it.Next()
		if !more {
			break
		}
		m := arr[el.ValueStart:el.ValueEnd]
		role := jsonedit.String(m, "role")
		switch {
		case jsonedit.TokenIs(role, "tool"):
			id := tokenText(jsonedit.String(m, "toolCallId"))
			if id != nil && s.isWithheld(id) && !s.in.ownToolMessage(id, tokenText(jsonedit.String(m, "id"))) {
				sp.Drop(el)
				changed = true
				continue
			}
		case jsonedit.TokenIs(role, "assistant"):
			if nm, cut := s.withoutWithheldCalls(m); cut {
				sp.Replace(el, nm)
				changed = true
				continue
			}
		}
		sp.Keep(el)
	}
	if !changed || it.Malformed() {
		return js
	}
	out := make([]byte, 0, len(js))
	out = append(out, js[:off+ms]...)
	out = jsonedit.Apply(out, arr, sp.Edits)
	return append(out, js[off+me:]...)
}

// withoutWithheldCalls returns the assistant message m without the toolCalls
// entries of withheld calls that are not the application's own, and whether
// it cut any; with none left, the toolCalls member goes.
func (s *Stream) withoutWithheldCalls(m []byte) ([]byte, bool) {
	msgID := tokenText(jsonedit.String(m, "id"))
	var outer jsonedit.Splicer
	cut := false
	mit := jsonedit.Members(m)
	for {
		mem, more := mit.Next()
		if !more {
			break
		}
		tcs := m[mem.ValueStart:mem.ValueEnd]
		if !mem.KeyIs("toolCalls") || tcs[0] != '[' {
			outer.Keep(mem)
			continue
		}
		var inner jsonedit.Splicer
		kept, dropped := 0, 0
		tit := jsonedit.Elements(tcs)
		for {
			tc, more := tit.Next()
			if !more {
				break
			}
			id := tokenText(jsonedit.String(tcs[tc.ValueStart:tc.ValueEnd], "id"))
			if id != nil && s.isWithheld(id) && !s.in.ownCall(id, msgID) {
				inner.Drop(tc)
				dropped++
				continue
			}
			inner.Keep(tc)
			kept++
		}
		switch {
		case dropped == 0 || tit.Malformed():
			outer.Keep(mem)
		case kept == 0:
			outer.Drop(mem)
			cut = true
		default:
			outer.Replace(mem, jsonedit.Apply(nil, tcs, inner.Edits))
			cut = true
		}
	}
	if !cut || mit.Malformed() {
		return m, false
	}
	return jsonedit.Apply(nil, m, outer.Edits), true
}

// tokenText returns the text of the JSON string token tok (quotes
// included), its escapes decoded; nil when tok is nil or not a string.
func tokenText(tok []byte) []byte {
	if len(tok) < 2 {
		return nil
	}
	inner := tok[1 : len(tok)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return inner
	}
	var s string
	if json.Unmarshal(tok, &s) != nil {
		return nil
	}
	return []byte(s)
}

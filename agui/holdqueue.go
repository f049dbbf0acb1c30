package agui

import (
	"bytes"
	"slices"
)

// This file is the hold queue of hold.go: where the events held back from
// the consumer wait, and how a judgment lets them go.
//
// The queue is in two parts, so that judging a call costs the events it
// lets go, not the queue's length: with thousands of calls held, each
// judgment walking every held event made a stream's work grow with the
// square of what the agent sent.
//
//   - The front holds only events of held calls, by call, each call's in
//     the order they came. When a call is judged its events go out, or are
//     dropped, at once; the other calls' stay where they are.
//   - The back starts at the first barrier that waits for the calls held
//     before it (a MESSAGES_SNAPSHOT, say) and keeps the agent's order.
//     Once the front is empty the back is walked from its start, once:
//     events of calls still held move to the front, the rest go out, until
//     a barrier finds the front holding something again.
//
// Every event is copied in once, and moved at most once from the back to
// the front; calls leave the front's order list lazily, compacted when
// half of it may be gone.

// holdQueue is the events held back from the consumer.
type holdQueue struct {
	front  map[*call][]heldEvent
	frontN int // events in front
	// order is the calls of front by their first event there, for
	// oldestHeld; calls no longer in front are dropped lazily. ordered is
	// its length after it was last compacted.
	order   []*call
	ordered int
	back    []heldEvent
	n       int // events held, front and back
	bytes   int // their cost, for Options.MaxHeld
}

func heldCost(h *heldEvent) int { return len(h.js) + heldEventBytes }

// holdCall marks c held.
func (s *Stream) holdCall(c *call) {
	c.show = held
	s.hold.held++
	if c.hasParent {
		put(&s.hold.parents, c.parent, s.hold.parents[c.parent]+1)
	}
}

// unhold ends c's hold: it is now shown or withdrawn.
func (s *Stream) unhold(c *call, to show) {
	c.show, c.endAllowed = to, false
	s.hold.held--
	if c.hasParent {
		if n := s.hold.parents[c.parent] - 1; n > 0 {
			s.hold.parents[c.parent] = n
		} else {
			delete(s.hold.parents, c.parent)
		}
	}
}

// toFront adds h, an event of held call c, to the front.
func (q *holdQueue) toFront(c *call, h heldEvent) {
	evs, ok := q.front[c]
	if !ok {
		if len(q.order) >= 2*q.ordered+8 {
			q.order = slices.DeleteFunc(q.order, func(o *call) bool {
				_, in := q.front[o]
				return !in
			})
			q.ordered = len(q.order)
		}
		q.order = append(q.order, c)
	}
	put(&q.front, c, append(evs, h))
	q.frontN++
}

// enqueue adds an event to the hold queue (a copy of js), and reports
// whether it did. For an event of a held call (c != nil) past the bounds,
// the call is denied instead; an event waiting behind a barrier (c == nil)
// makes room by denying the calls held longest, and goes out at once if that
// lets it. aguard's own events (own) are small, one or two per call, and
// never deny anything. cid is the toolCallId of an event about a call the
// run has not started (heldEvent.cid), or nil; it is copied.
func (s *Stream) enqueue(b *Batch, c *call, typ string, js []byte, wait, own bool, cid []byte) bool {
	cost := len(js) + heldEventBytes
	over := func() bool {
		return !own && (s.hold.q.bytes+cost > s.maxHeld() || s.hold.q.n >= maxHeldEvents)
	}
	if c != nil && over() {
		s.overHeld(b, c)
		return false
	}
	for c == nil && over() && !s.done {
		oldest := s.oldestHeld()
		if oldest == nil {
			break
		}
		s.overHeld(b, oldest)
		if !s.hold.barrier && (!wait || s.hold.held == 0) {
			if !s.done {
				s.deliver(b, typ, js)
			}
			return true
		}
	}
	if s.done {
		return false
	}
	h := heldEvent{c: c, typ: typ, js: append([]byte(nil), js...), barrier: wait, cid: bytes.Clone(cid)}
	q := &s.hold.q
	if c != nil && !s.hold.barrier {
		q.toFront(c, h)
	} else {
		q.back = append(q.back, h)
		s.hold.barrier = true
	}
	q.n++
	q.bytes += cost
	return true
}

// oldestHeld returns the held call with the first event in the queue (or
// one just started, with none yet); nil when none is held.
func (s *Stream) oldestHeld() *call {
	q := &s.hold.q
	for len(q.order) > 0 {
		c := q.order[0]
		if _, ok := q.front[c]; ok && c.show == held {
			return c
		}
		q.order[0] = nil
		q.order = q.order[1:]
		q.ordered = max(q.ordered-1, 0)
	}
	for i := range q.back {
		if c := q.back[i].c; c != nil && c.show == held {
			return c
		}
	}
	for _, c := range s.run.order {
		if c.show == held {
			return c
		}
	}
	return nil
}

// release lets held call c through: its events go out, in order, with
// whatever waited for it.
func (s *Stream) release(b *Batch, c *call) {
	if c.show != held {
		return
	}
	s.unhold(c, shown)
	s.judged(b, c)
}

// withdraw drops held call c: the consumer never sees any of it.
func (s *Stream) withdraw(b *Batch, c *call) {
	if c.show != held {
		return
	}
	s.unhold(c, withdrawn)
	s.withhold(c.id)
	s.judged(b, c)
}

// judged lets the events of c, no longer held, go from the front, then
// what no longer waits.
func (s *Stream) judged(b *Batch, c *call) {
	s.leaveFront(b, c)
	s.advance(b)
}

// leaveFront takes the events of c, no longer held, from the front: out if
// it is shown, nowhere if withheld.
func (s *Stream) leaveFront(b *Batch, c *call) {
	q := &s.hold.q
	evs, ok := q.front[c]
	if !ok {
		return
	}
	delete(q.front, c)
	q.frontN -= len(evs)
	for i := range evs {
		q.n--
		q.bytes -= heldCost(&evs[i])
		if c.show == shown && evs[i].js != nil {
			s.deliver(b, evs[i].typ, evs[i].js)
		}
	}
}

// advance walks the back from its start while the front is empty: events
// of calls still held move to the front, events of withheld calls (and
// events about calls withheld since they were queued) are dropped, the
// rest go out, until a barrier must wait for the front.
func (s *Stream) advance(b *Batch) {
	q := &s.hold.q
	i := 0
	for ; i < len(q.back); i++ {
		h := q.back[i]
		switch {
		case h.c != nil && h.c.show == held:
			q.toFront(h.c, h)
			q.back[i] = heldEvent{}
			continue
		case h.c != nil && h.c.withheld(), h.cid != nil && s.isWithheld(h.cid):
			q.n--
			q.bytes -= heldCost(&h)
			q.back[i] = heldEvent{}
			continue
		case h.barrier && q.frontN > 0:
		default:
			q.n--
			q.bytes -= heldCost(&h)
			q.back[i] = heldEvent{}
			if h.js != nil {
				s.deliver(b, h.typ, h.js)
			}
			continue
		}
		break
	}
	q.back = q.back[i:]
	if len(q.back) == 0 {
		q.back = nil
	}
	s.hold.barrier = len(q.back) > 0
}

// abandon withdraws every call still held: the run ends before they are
// judged, so the consumer never sees them. What waited behind them goes
// out.
func (s *Stream) abandon(b *Batch) {
	q := &s.hold.q
	if q.n == 0 && s.hold.held == 0 && len(s.hold.after) == 0 && len(s.hold.laneWait) == 0 {
		s.hold.deferring = false
		return
	}
	for _, c := range s.run.order { // every call the run started, in order
		if c.show == held {
			s.unhold(c, withdrawn)
			s.withhold(c.id)
		}
	}
	for _, c := range q.order {
		s.leaveFront(b, c) // withdrawn: dropped
	}
	clear(q.order)
	q.order, q.ordered = q.order[:0], 0
	s.advance(b)
	s.hold.held = 0
	clear(s.hold.parents)
	// aguard's own events about calls judged just before the run ended:
	// the run-level event that follows closes every lane anyway.
	s.hold.deferring = false
	for _, e := range s.hold.laneWait {
		s.emit(b, e.ev.Type, e.ev.JSON)
	}
	s.hold.laneWait = nil
	for _, e := range s.hold.after {
		s.emit(b, e.ev.Type, e.ev.JSON)
	}
	s.hold.after = nil
}

// resetHold forgets the run's hold state at RUN_STARTED (the last run ended
// with nothing held).
func (s *Stream) resetHold() {
	s.hold.q = holdQueue{}
	s.hold.held = 0
	clear(s.hold.parents)
	s.hold.barrier, s.hold.ghost, s.hold.closed = false, false, false
	s.hold.active = len(s.hold.withheld) > 0
}

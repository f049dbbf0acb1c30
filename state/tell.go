package state

import (
	"reflect"
	"sync"
)

// Notices after writes. A webhook names a record that its receiver may
// read from any replica, so it must not leave before the record's write
// has reached Redis. Tell holds a notice on the queued write of its
// record and passes it on once Redis has acknowledged that write (or a
// newer one of the same record), so that the notices of a busy replica
// ride on the writes it gathers (Options.WriteDelay) instead of sending
// each write at once.
//
// A notice is not held back by Redis failing: when a write is dropped
// from a full queue, when Redis is found unreachable, or when the Store
// closes with writes Redis never acknowledged, the notices waiting on them
// are passed on at once (the receiver then reads the record from this
// replica, or not at all, as for any write in that state). Notices are
// passed on, in the order their writes were acknowledged, by one
// goroutine, so a Notifier that blocks never holds up the writer.

// notice is a Notify call waiting for its record's write.
type notice struct {
	to Notifier
	n  Notice
	c  *ToolCall // a copy the Store owns
}

// Bounds of the notices due: a Notifier slower than the notices come (a
// webhook queue in a Redis that answers slowly) must not grow the process
// without end. Past either, the oldest are dropped, counted
// (aguard_state_notices_dropped_total) and logged once until the queue
// empties.
const (
	maxNoticesDue     = 10_000
	maxNoticeBytesDue = 16 << 20
)

// tellQueue is the notices due, in order, and the goroutine that passes
// them on.
type tellQueue struct {
	mu       sync.Mutex
	due      []notice
	bytes    int64 // estimated bytes of due's records
	dropping bool  // a drop was logged since the queue was last empty
	closing  bool
	closed   bool          // the goroutine has exited: notices go to their Notifier at once
	wake     chan struct{} // cap 1
	done     chan struct{} // closed when the goroutine has passed everything on and exited
}

// Tell passes n about c on to to, once c's write has reached Redis: at
// once when nothing of c is queued (the write was acknowledged, Redis is
// unreachable, or the Store has no Redis); otherwise when the queued write
// is acknowledged or given up. c may change once Tell returns. On a nil
// Store it is to.Notify.
func (s *Store) Tell(to Notifier, n Notice, c *ToolCall) {
	if to == nil || c == nil {
		return
	}
	if s == nil || s.rdb == nil {
		to.Notify(n, c)
		return
	}
	nt := notice{to: to, n: n, c: c.clone()}
	key := callKey(RefOf(c))
	s.mu.Lock()
	it, queued := s.q.get(key)
	if queued && s.downErr == nil {
		it.notices = append(it.notices, nt)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.passOn(nt)
}

// startTells starts the goroutine that passes notices on.
func (s *Store) startTells() {
	s.tells.wake = make(chan struct{}, 1)
	s.tells.done = make(chan struct{})
	go s.tells.run()
}

// passOn queues notices for the goroutine, in order, within the bounds.
func (s *Store) passOn(ns ...notice) {
	if len(ns) == 0 {
		return
	}
	q := &s.tells
	q.mu.Lock()
	if q.closed { // after Close: the Notifier counts what comes late
		q.mu.Unlock()
		handOnAll(ns)
		return
	}
	for _, nt := range ns {
		q.due = append(q.due, nt)
		q.bytes += nt.c.size()
	}
	dropped := 0
	for len(q.due) > maxNoticesDue || q.bytes > maxNoticeBytesDue && len(q.due) > 1 {
		q.bytes -= q.due[0].c.size()
		q.due[0] = notice{}
		q.due = q.due[1:]
		dropped++
	}
	logDrop := dropped > 0 && !q.dropping
	q.dropping = q.dropping || dropped > 0
	q.mu.Unlock()
	if dropped > 0 {
		s.met.noticesLost.Add(float64(dropped))
	}
	if logDrop {
		s.log.Error("too many notices wait for the notifier (webhooks); dropping the oldest until it catches up",
			"max", maxNoticesDue, "max_bytes", maxNoticeBytesDue)
	}
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *tellQueue) run() {
	defer close(q.done)
	for {
		q.mu.Lock()
		due := q.due
		q.due, q.bytes = nil, 0
		if len(due) == 0 {
			q.dropping = false
			if q.closing {
				q.closed = true
				q.mu.Unlock()
				return
			}
		}
		q.mu.Unlock()
		handOnAll(due)
		if len(due) == 0 {
			<-q.wake
		}
	}
}

// handOnAll passes notices on in order, those in a row for one
// BatchNotifier together.
func handOnAll(ns []notice) {
	for len(ns) > 0 {
		k := sameNotifier(ns)
		handOn(ns[:k])
		ns = ns[k:]
	}
}

// sameNotifier is how many notices at the front of due go to the same
// BatchNotifier (1 if the first goes to another kind of Notifier).
func sameNotifier(due []notice) int {
	to := due[0].to
	if _, ok := to.(BatchNotifier); !ok || !reflect.TypeOf(to).Comparable() {
		return 1
	}
	k := 1
	for k < len(due) && due[k].to == to {
		k++
	}
	return k
}

// handOn passes notices for one Notifier on: at once to a BatchNotifier.
func handOn(ns []notice) {
	if b, ok := ns[0].to.(BatchNotifier); ok && len(ns) > 1 {
		all := make([]Notification, len(ns))
		for i, nt := range ns {
			all[i] = Notification{nt.n, nt.c}
		}
		b.NotifyAll(all)
		return
	}
	for _, nt := range ns {
		nt.to.Notify(nt.n, nt.c)
	}
}

// close passes on what is queued and stops the goroutine.
func (q *tellQueue) close() {
	q.mu.Lock()
	q.closing = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	<-q.done
}

// releaseNoticesLocked takes the notices off every queued item, to pass
// them on at once (Redis unreachable, or the Store closing); mu is held.
func (s *Store) releaseNoticesLocked() []notice {
	var out []notice
	for e := s.q.order.Front(); e != nil; e = e.Next() {
		it := e.Value.(*item)
		out = append(out, it.notices...)
		it.notices = nil
	}
	return out
}

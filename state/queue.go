package state

import "container/list"

// item is one write waiting for Redis: a record (call), a thread, or a
// change of this replica's runs registry (run). Exactly one of the three is
// set. Items are snapshots the Store owns and never modifies.
type item struct {
	call   *ToolCall
	thread *Thread
	run    *runOp
	seq    uint64 // enqueue order; a newer write of the same key gets a new one
	// base is, for a record, the version Redis held when this replica last
	// knew it, the one the write was made from (0: absent): the drain
	// writes the record only if Redis still holds that version, so that a
	// write queued while this replica was cut off does not undo what
	// another replica did meanwhile. -1 when unknown: written whatever
	// Redis holds. Set by enqueue.
	base    int64
	waiters []*waiter // RecordSync and PutCallsSync calls waiting for this key to reach Redis
	notices []notice  // Tell's notices waiting for this key to reach Redis (tell.go)
}

// runOp registers a run in this replica's runs registry (live) or withdraws
// it; see runs.go.
type runOp struct {
	ref  RunRef
	live bool
}

// key identifies what an item overwrites in Redis. A run's registration and
// its withdrawal are two keys, so that a withdrawal queued behind the run's
// last records never overtakes them, and a registration never waits behind
// them.
func (it *item) key() string {
	switch {
	case it.call != nil:
		return callKey(RefOf(it.call))
	case it.thread != nil:
		return threadKey(it.thread.ID)
	case it.run.live:
		return "run+" + runMember(it.run.ref)
	}
	return "run-" + runMember(it.run.ref)
}

// urgent reports whether the item should reach Redis without waiting for
// others (Options.WriteDelay): a call held for approval, which reviewers on
// any replica read from Redis.
func (it *item) urgent() bool {
	return it.call != nil && it.call.Status == StatusRequiresConfirmation
}

// size estimates the bytes an item holds.
func (it *item) size() int64 {
	switch {
	case it.call != nil:
		return it.call.size()
	case it.thread != nil:
		return it.thread.size()
	}
	return int64(64 + len(it.run.ref.ThreadID) + len(it.run.ref.RunID))
}

// waiter lets RecordSync wait until each of its items has been written to
// Redis (or dropped from a full queue).
type waiter struct {
	remaining  int
	dropped    bool
	superseded bool // a record was not written: another Store changed it first
	done       chan struct{}
}

func (w *waiter) finish(dropped bool) {
	w.dropped = w.dropped || dropped
	if w.remaining--; w.remaining == 0 {
		close(w.done)
	}
}

// supersede finishes one item of w that was not written because another
// Store changed its record first (Store.supersede).
func (w *waiter) supersede() {
	w.superseded = true
	w.finish(false)
}

// queue holds the writes Redis has not acknowledged yet, one item per key,
// ordered by the time of each key's latest write: a newer write of a queued
// key replaces the older one and moves to the back. Draining it front to back
// therefore writes every key's latest value, in the order those values were
// written. It is bounded in items and in estimated bytes: beyond either the
// front (least recently written) is dropped. queue is not safe for
// concurrent use; the Store's mu guards it.
type queue struct {
	max      int
	maxBytes int64
	bytes    int64
	seq      uint64
	order    *list.List // of *item, front = oldest
	byKey    map[string]*list.Element
}

func newQueue(max int, maxBytes int64) *queue {
	return &queue{max: max, maxBytes: maxBytes, order: list.New(), byKey: make(map[string]*list.Element)}
}

func (q *queue) len() int { return q.order.Len() }

// push enqueues it, superseding a queued item of the same key (whose waiters
// it inherits), and returns the items dropped to respect the bounds.
func (q *queue) push(it *item) (dropped []*item) {
	q.seq++
	it.seq = q.seq
	k := it.key()
	if e, ok := q.byKey[k]; ok {
		old := q.order.Remove(e).(*item)
		q.bytes -= old.size()
		it.waiters = append(old.waiters, it.waiters...)
		it.notices = append(old.notices, it.notices...)
	}
	q.byKey[k] = q.order.PushBack(it)
	q.bytes += it.size()
	for q.order.Len() > q.max || q.bytes > q.maxBytes && q.order.Len() > 0 {
		old := q.order.Remove(q.order.Front()).(*item)
		delete(q.byKey, old.key())
		q.bytes -= old.size()
		dropped = append(dropped, old)
	}
	return dropped
}

// peek returns up to n items from the front, without removing them.
func (q *queue) peek(n int) []*item {
	out := make([]*item, 0, min(n, q.order.Len()))
	for e := q.order.Front(); e != nil && len(out) < n; e = e.Next() {
		out = append(out, e.Value.(*item))
	}
	return out
}

// ack removes it after Redis acknowledged it, unless a newer write of the
// same key has superseded it meanwhile (that one stays queued). It reports
// whether it was removed.
func (q *queue) ack(it *item) bool {
	k := it.key()
	e, ok := q.byKey[k]
	if !ok || e.Value.(*item) != it {
		return false
	}
	q.order.Remove(e)
	delete(q.byKey, k)
	q.bytes -= it.size()
	return true
}

// get returns the queued item for key, if any.
func (q *queue) get(key string) (*item, bool) {
	e, ok := q.byKey[key]
	if !ok {
		return nil, false
	}
	return e.Value.(*item), true
}

// front returns the oldest item, if any.
func (q *queue) front() (*item, bool) {
	e := q.order.Front()
	if e == nil {
		return nil, false
	}
	return e.Value.(*item), true
}

// all returns every queued item, oldest first.
func (q *queue) all() []*item { return q.peek(q.order.Len()) }

package state

import "container/list"

// item is one record or thread waiting for Redis: exactly one of call and
// thread is set. Items are snapshots the Store owns and never modifies.
type item struct {
	call    *ToolCall
	thread  *Thread
	seq     uint64    // enqueue order; a newer write of the same key gets a new one
	waiters []*waiter // PutCallsSync calls waiting for this key to reach Redis
}

// key identifies what an item overwrites in Redis.
func (it *item) key() string {
	if it.call != nil {
		return callKey(RefOf(it.call))
	}
	return threadKey(it.thread.ID)
}

// threadID is the thread the item belongs to: one write script call per
// thread.
func (it *item) threadID() string {
	if it.call != nil {
		return it.call.ThreadID
	}
	return it.thread.ID
}

// waiter lets PutCallsSync wait until each of its items has been written to
// Redis (or dropped from a full queue).
type waiter struct {
	remaining int
	dropped   bool
	done      chan struct{}
}

func (w *waiter) finish(dropped bool) {
	w.dropped = w.dropped || dropped
	if w.remaining--; w.remaining == 0 {
		close(w.done)
	}
}

// queue holds the writes Redis has not acknowledged yet, one item per key,
// ordered by the time of each key's latest write: a newer write of a queued
// key replaces the older one and moves to the back. Draining it front to back
// therefore writes every key's latest value, in the order those values were
// written. It is bounded: beyond max items the front (least recently written)
// is dropped. queue is not safe for concurrent use; the Store's mu guards it.
type queue struct {
	max   int
	seq   uint64
	order *list.List // of *item, front = oldest
	byKey map[string]*list.Element
}

func newQueue(max int) *queue {
	return &queue{max: max, order: list.New(), byKey: make(map[string]*list.Element)}
}

func (q *queue) len() int { return q.order.Len() }

// push enqueues it, superseding a queued item of the same key (whose waiters
// it inherits), and returns the items dropped to respect the bound.
func (q *queue) push(it *item) (dropped []*item) {
	q.seq++
	it.seq = q.seq
	k := it.key()
	if e, ok := q.byKey[k]; ok {
		old := q.order.Remove(e).(*item)
		it.waiters = append(old.waiters, it.waiters...)
	}
	q.byKey[k] = q.order.PushBack(it)
	for q.order.Len() > q.max {
		old := q.order.Remove(q.order.Front()).(*item)
		delete(q.byKey, old.key())
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

// all returns every queued item, oldest first.
func (q *queue) all() []*item { return q.peek(q.order.Len()) }

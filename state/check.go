package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The request-side check: before a run reaches the agent, the proxy reads
// the thread and the records its tool messages answer (ReadThread: one
// pipeline, one round trip), judges each answer (ThreadView.Judge), and
// records what it decided (ApplyAnswers: one round trip of script calls).
// Its cost is bounded whatever the number of tool messages.

// ThreadView is what ReadThread found of a thread and some of its calls.
type ThreadView struct {
	// Thread is the thread as last written (an empty Thread for a thread
	// never seen).
	Thread *Thread
	// FromMemory reports that Redis could not vouch for the thread (it is
	// unreachable, or lost data), and Thread is this replica's last copy.
	FromMemory bool

	id    string
	calls map[string]*viewCall
}

// viewCall is one record of a ThreadView.
type viewCall struct {
	call *ToolCall // nil: none
	// ver is the stored version the record's compare-and-set expects (0:
	// absent from Redis).
	ver int64
	// unverified: the record is this replica's copy of one Redis lost, or
	// was restored by a write-back; a decision on it may have been lost.
	unverified bool
	// queued: this process has a write of it queued.
	queued bool
}

// ReadThread reads thread and its records with the given call ids: with
// Redis in one pipeline (one round trip, whatever the number of ids), which
// also checks that this replica's marker is still there (see the package
// documentation on loss). Only records of this thread are read: an id of
// another thread's call is not one of this thread's.
//
// When Redis cannot vouch for the thread — it is unreachable, or lost data
// and has not been written back — the thread and records come from this
// process's memory (FromMemory); if memory has nothing of the thread,
// ReadThread fails with an error wrapping ErrUnavailable, and the caller
// must not read that as "nothing pending". While this Store knows Redis
// lost data (the loss Ready reports), a record it can only copy from
// memory is one Redis lost, whether or not Redis answers the read: a
// decision on it may have been lost, and Judge declines an answer to it
// if it is held.
func (s *Store) ReadThread(ctx context.Context, thread string, ids []string) (*ThreadView, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	v := &ThreadView{id: thread, calls: make(map[string]*viewCall, len(ids))}
	if s.rdb == nil {
		v.Thread = &Thread{ID: thread}
		if e, ok := s.lookupThread(thread); ok {
			v.Thread = e.t.clone()
		}
		for _, id := range ids {
			if e, ok := s.lookupCall(Ref{thread, id}); ok {
				v.calls[id] = &viewCall{call: e.call.clone()}
			}
		}
		return v, nil
	}
	if s.up.Load() {
		err := s.readView(ctx, v, ids)
		var uv errUnvouched
		if err == nil {
			return v, nil
		}
		if errors.As(err, &uv) {
			return nil, fmt.Errorf("state: read thread %q: %w", thread, err)
		}
		if !s.unreachable(ctx, err) {
			return nil, fmt.Errorf("state: read thread %q: %w", thread, err)
		}
		s.setDown(err)
	}
	// Redis is unreachable: the last copies this process holds.
	v.FromMemory = true
	if it := s.queued(threadKey(thread)); it != nil {
		v.Thread = it.thread.clone()
	} else if e, ok := s.lookupThread(thread); ok {
		v.Thread = e.t.clone()
	} else {
		return nil, fmt.Errorf("state: read thread %q: %w", thread, s.downError())
	}
	for _, id := range ids {
		r := Ref{thread, id}
		if it := s.queued(callKey(r)); it != nil {
			v.calls[id] = &viewCall{call: it.call.clone(), queued: true}
		} else if e, ok := s.lookupCall(r); ok {
			v.calls[id] = &viewCall{call: e.call.clone(), ver: e.ver}
		}
	}
	// A loss is found by whichever connection first reaches the restarted
	// Redis (onConnect), which may be before the writer's probe finds Redis
	// back: Ready then reports the loss while reads still come from here.
	// Asked after the copies are taken, so that a loss found meanwhile
	// counts. A queued write is this process's own, newer than what Redis
	// lost, as readViewOnce takes it.
	if s.inLossWindow() {
		for _, vc := range v.calls {
			vc.unverified = !vc.queued
		}
	}
	return v, nil
}

// readView reads the thread and its records into v from a primary every
// live replica has caught up with (primary.go).
func (s *Store) readView(ctx context.Context, v *ThreadView, ids []string) error {
	return s.readFromPrimary(ctx, func() error {
		v.Thread, v.FromMemory = nil, false
		clear(v.calls)
		return s.readViewOnce(ctx, v, ids)
	})
}

// readViewOnce is ReadThread's pipeline.
func (s *Store) readViewOnce(ctx context.Context, v *ThreadView, ids []string) error {
	seq, epoch := s.invalSeq.Load(), s.epoch.Load()
	var tcmd, xcmd *redis.SliceCmd
	var mcmd, rcmd *redis.IntCmd
	ccmds := make([]*redis.SliceCmd, len(ids))
	c, budget := s.client(len(ids))
	rctx, cancel := within(ctx, budget)
	defer cancel()
	// A write queued before the read, or after it began, may be in flight
	// while Redis answers: an absence is then no loss. markOf(key) is the
	// queue sequence a memory copy must be newer than to be one of those.
	s.mu.Lock()
	mark := s.q.seq
	var pre map[string]uint64
	if s.q.len() > 0 {
		pre = map[string]uint64{}
		for _, k := range append([]string{threadKey(v.id)}, callKeys(v.id, ids)...) {
			if it, ok := s.q.get(k); ok {
				pre[k] = it.seq - 1
			}
		}
	}
	s.mu.Unlock()
	markOf := func(key string) uint64 {
		if m, ok := pre[key]; ok {
			return m
		}
		return mark
	}
	readAt := time.Now()
	_, err := c.Pipelined(rctx, func(p redis.Pipeliner) error {
		tcmd = p.HMGet(ctx, threadKey(v.id), "v", "d")
		mcmd = p.Exists(ctx, s.ks.markerKey(s.origin))
		rcmd = p.Exists(ctx, s.ks.recoveringKey())
		if !s.cluster {
			xcmd = p.MGet(ctx, s.ks.replacedKey()) // MGET: an absent key is no error
		}
		for i, id := range ids {
			ccmds[i] = p.HMGet(ctx, callKey(Ref{v.id, id}), "v", "d", "r")
		}
		return nil
	})
	if err != nil {
		if rctx.Err() != nil && ctx.Err() == nil && budget > 0 {
			return fmt.Errorf("reading %d records took longer than %v: %w", len(ids), budget, errSlow)
		}
		return err
	}
	if xcmd != nil && s.replacedHere(xcmd.Val()) {
		// Another replica saw a failover replace the primary this Store
		// reads, and writes to the new one: what is read here may lack it
		// (fence.go). The connections stay: closing them would fail the
		// commands on them, and a Store whose commands fail serves from
		// memory, which lags as much; go-redis moves them once this
		// client's sentinel names the new primary.
		return fmt.Errorf("%w: %w", ErrUnavailable, errReplaced)
	}
	if mcmd.Val() == 0 && s.markerSet() {
		s.lostAfter(causeMarker, readAt)
	}
	window := s.inLossWindow() || rcmd.Val() > 0

	t, tver, err := decodeThread(v.id, tcmd.Val())
	if err != nil {
		return err
	}
	queued := s.queued(threadKey(v.id))
	_, wasQueued := pre[threadKey(v.id)]
	switch {
	case queued != nil:
		v.Thread = queued.thread.clone()
	case t != nil && wasQueued:
		// Queued when the read began: the write may have been
		// acknowledged after Redis answered. The newer copy wins.
		if e, ok := s.ackedThread(v.id, tver); ok {
			v.Thread = e.t.clone()
			break
		}
		s.cacheThreadRead(t, tver)
		v.Thread = t.clone()
	case t != nil:
		s.cacheThreadRead(t, tver)
		v.Thread = t.clone()
	default:
		if v.Thread, err = s.absentThread(v.id, window, readAt, markOf(threadKey(v.id))); err != nil {
			return errUnvouched{err}
		}
		v.FromMemory = v.Thread.protects() || window
	}
	for i, id := range ids {
		r := Ref{v.id, id}
		if it := s.queued(callKey(r)); it != nil {
			v.calls[id] = &viewCall{call: it.call.clone(), queued: true}
			continue
		}
		sc, err := decodeCall(r, ccmds[i].Val())
		if err != nil {
			return err
		}
		if sc.call != nil {
			if _, was := pre[callKey(r)]; was { // as for the thread above
				if e, ok := s.ackedCall(r, sc.ver); ok {
					v.calls[id] = &viewCall{call: e.call.clone(), ver: e.ver}
					continue
				}
			}
			s.cacheRead(sc.call, sc.ver, seq, epoch)
			v.calls[id] = &viewCall{call: sc.call.clone(), ver: sc.ver, unverified: sc.restored}
			continue
		}
		if mem, ok := s.lostCopy(r, readAt, markOf(callKey(r))); ok {
			v.calls[id] = &viewCall{call: mem.clone(), unverified: true}
		} else if window {
			if e, ok := s.calls.Peek(r); ok {
				v.calls[id] = &viewCall{call: e.call.clone(), unverified: true}
			}
		}
	}
	return nil
}

// ackedCall is this process's copy of r when Redis acknowledged it at a
// version newer than ver.
func (s *Store) ackedCall(r Ref, ver int64) (*callEntry, bool) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	e, ok := s.peekCallLocked(r)
	return e, ok && e.ver > ver
}

// ackedThread is ackedCall for thread id.
func (s *Store) ackedThread(id string, ver int64) (*threadEntry, bool) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	e, ok := s.peekThreadLocked(id)
	return e, ok && e.ver > ver
}

func callKeys(thread string, ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = callKey(Ref{thread, id})
	}
	return out
}

// errSlow marks a bulk read that ran out of time: not an outage.
var errSlow = errors.New("redis too slow for the request's size")

// errUnvouched wraps the ErrUnavailable of a thread Redis lost and memory
// does not hold; it is not an outage.
type errUnvouched struct{ err error }

func (e errUnvouched) Error() string { return e.err.Error() }
func (e errUnvouched) Unwrap() error { return e.err }

// Change is one transition ApplyAnswers applies: to the call id of the
// view's thread.
type Change struct {
	ID         string
	Transition Transition
}

// Result is the outcome of one Change: the record as written, or the error
// (wrapping ErrTransition when the record was no longer in a status the
// transition starts from, ErrQueued when Redis was unreachable and the
// write is queued with Call set).
type Result struct {
	Call *ToolCall
	Err  error
}

// applyChunk bounds the records of one write script call; the calls of one
// ApplyAnswers go in one pipeline, so the round trips do not grow with it.
const applyChunk = 1000

// ApplyAnswers applies changes to the records v read, with Redis as
// compare-and-sets against the versions v read, all in one pipeline (one
// round trip; a conflict re-reads and re-applies only what conflicted). A
// change for a call the view holds no record of applies to a record created
// in its thread (the decline of a held call whose record was lost: it must
// stay declined if a copy is written back later).
func (s *Store) ApplyAnswers(ctx context.Context, v *ThreadView, changes []Change) []Result {
	out := make([]Result, len(changes))
	if s.closed.Load() {
		for i := range out {
			out[i].Err = errClosed
		}
		return out
	}
	now := s.now()
	type pending struct {
		i    int
		base *ToolCall
		ver  int64
	}
	var todo []pending
	for i, ch := range changes {
		vc := v.calls[ch.ID]
		switch {
		case vc == nil || vc.call == nil:
			todo = append(todo, pending{i, heldPlaceholder(Ref{v.id, ch.ID}, now), 0})
		case vc.queued || s.rdb == nil || !s.up.Load():
			c, err := s.Apply(ctx, Ref{v.id, ch.ID}, ch.Transition)
			out[i] = Result{c, err}
		default:
			todo = append(todo, pending{i, vc.call, vc.ver})
		}
	}
	if len(todo) == 0 {
		return out
	}
	if s.rdb == nil || !s.up.Load() {
		for _, p := range todo {
			out[p.i] = s.applyLocal(p.base, changes[p.i].Transition)
		}
		return out
	}
	for attempt := 1; len(todo) > 0; attempt++ {
		seq, epoch := s.invalSeq.Load(), s.epoch.Load()
		var writes []callWrite
		var idx []int
		for _, p := range todo {
			next, err := s.apply(p.base, changes[p.i].Transition.apply)
			if err != nil {
				out[p.i].Err = err
				continue
			}
			writes = append(writes, callWrite{next, p.ver})
			idx = append(idx, p.i)
		}
		var groups []*threadWrite
		for start := 0; start < len(writes); start += applyChunk {
			groups = append(groups, &threadWrite{thread: v.id, calls: writes[start:min(start+applyChunk, len(writes))]})
		}
		c, budget := s.client(len(writes))
		ticket := s.acks.begin()
		res, err := s.runWritesOn(ctx, c, budget, "w", groups)
		if err != nil {
			if budget > 0 && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				err = fmt.Errorf("writing %d records took longer than %v: %w: %w", len(writes), budget, errSlow, err)
			}
			defer s.acks.end(ticket)
			if !s.unreachable(ctx, err) {
				for _, i := range idx {
					out[i].Err = fmt.Errorf("state: record answers of thread %q: %w", v.id, err)
				}
				return out
			}
			// Whether Redis applied them is unknown: queue the results.
			s.setDown(err)
			for k, w := range writes {
				s.writeBehind([]*item{{call: w.call}}, nil)
				out[idx[k]] = Result{w.call.clone(), fmt.Errorf("state: record %s: %w: %w", RefOf(w.call), ErrQueued, err)}
			}
			return out
		}
		var conflicted []Ref
		var again []pending
		k := 0
		for gi, g := range groups {
			for j, w := range g.calls {
				i := idx[k]
				k++
				if res[gi].conflict != nil {
					conflicted = append(conflicted, RefOf(w.call))
					again = append(again, pending{i: i})
					continue
				}
				s.cacheCall(w.call, res[gi].vers[j], seq, epoch)
				s.met.transitions.WithLabelValues(string(changes[i].Transition.Name)).Inc()
				out[i] = Result{Call: w.call.clone()}
			}
		}
		s.acks.end(ticket) // before a conflict's read, which may wait for a write-back
		s.met.writes.WithLabelValues(writeRedis).Add(float64(len(writes) - len(conflicted)))
		if len(conflicted) == 0 {
			break
		}
		s.met.writes.WithLabelValues(writeConflict).Add(float64(len(conflicted)))
		if attempt >= maxCASAttempts {
			for _, p := range again {
				out[p.i].Err = fmt.Errorf("state: record answers of thread %q: gave up after %d conflicting writes: %w", v.id, attempt, errConflict)
			}
			break
		}
		c, budget = s.client(len(conflicted))
		stored, err := s.readCallsOn(ctx, c, budget, conflicted, max(len(conflicted), 1))
		if err != nil {
			for _, p := range again {
				out[p.i].Err = fmt.Errorf("state: record answers of thread %q: %w", v.id, err)
			}
			if s.unreachable(ctx, err) {
				s.setDown(err)
			}
			break
		}
		todo = todo[:0]
		for n, sc := range stored {
			p := again[n]
			if sc.call == nil {
				p.base, p.ver = heldPlaceholder(conflicted[n], now), 0
			} else {
				p.base, p.ver = sc.call, sc.ver
			}
			todo = append(todo, p)
		}
	}
	return out
}

// applyLocal applies t to base in memory, and queues the result when there
// is a Redis to write it to.
func (s *Store) applyLocal(base *ToolCall, t Transition) Result {
	s.localMu.Lock()
	defer s.localMu.Unlock()
	next, err := s.apply(base, t.apply)
	if err != nil {
		return Result{Err: err}
	}
	s.met.transitions.WithLabelValues(string(t.Name)).Inc()
	if s.rdb == nil {
		s.cacheCall(next, 0, 0, 0)
		s.met.writes.WithLabelValues(writeMemory).Inc()
		return Result{Call: next.clone()}
	}
	s.writeBehind([]*item{{call: next}}, nil)
	return Result{Call: next.clone(), Err: fmt.Errorf("state: record %s: %w: %w", RefOf(next), ErrQueued, s.downError())}
}

// heldPlaceholder stands for a call its thread lists as held for approval
// whose record is lost: the transition that declines it writes a record in
// its place.
func heldPlaceholder(r Ref, now time.Time) *ToolCall {
	return &ToolCall{ID: r.ID, ThreadID: r.ThreadID, Status: StatusRequiresConfirmation, IsClientTool: true, CreatedAt: now}
}

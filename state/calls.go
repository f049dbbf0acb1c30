package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// GetCall returns the record r, or an error wrapping ErrNotFound.
//
// Without Redis it reads memory. With Redis, a write still queued in this
// process is returned as is; a terminal record cached while the
// invalidation subscription was live is served from memory; anything else
// is read from Redis (one round trip), so that a replica always sees a live
// call as another replica last wrote it. A record Redis lost but this
// process protects (an approval, a pending call) is returned from memory,
// and the loss is reported (see the package documentation). While Redis is
// unreachable the last copy this process holds is returned, or an error
// wrapping ErrUnavailable.
func (s *Store) GetCall(ctx context.Context, r Ref) (*ToolCall, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if s.rdb == nil {
		if e, ok := s.lookupCall(r); ok {
			s.met.cacheHits.Inc()
			return e.call.clone(), nil
		}
		s.met.cacheMisses.Inc()
		return nil, fmt.Errorf("state: %s: %w", r, ErrNotFound)
	}
	it, mark := s.queuedAt(callKey(r))
	if it != nil {
		s.met.cacheHits.Inc()
		return it.call.clone(), nil
	}
	e, cached := s.lookupCall(r)
	up := s.up.Load()
	if cached && (!up || s.servable(e)) {
		s.met.cacheHits.Inc()
		return e.call.clone(), nil
	}
	s.met.cacheMisses.Inc()
	if !up {
		return nil, fmt.Errorf("state: get %s: %w", r, s.downError())
	}
	seq, epoch := s.invalSeq.Load(), s.epoch.Load()
	readAt := time.Now()
	sc, err := s.readCall(ctx, r)
	switch {
	case err == nil && sc.call == nil:
		if mem, ok := s.lostCopy(r, readAt, mark); ok {
			return mem.clone(), nil
		}
		return nil, fmt.Errorf("state: %s: %w", r, ErrNotFound)
	case err == nil:
		s.cacheRead(sc.call, sc.ver, seq, epoch)
		return sc.call.clone(), nil
	case !s.unreachable(ctx, err):
		return nil, fmt.Errorf("state: get %s: %w", r, err)
	}
	s.setDown(err)
	if cached {
		return e.call.clone(), nil
	}
	return nil, fmt.Errorf("state: get %s: %w: %w", r, ErrUnavailable, err)
}

// lostCopy is this process's copy of a record Redis did not have when read
// at readAt, the queue at sequence mark when the read began: one written
// since (in flight, no loss); one it protects (whose absence means Redis
// lost data, which it reports); or any copy while a loss is being
// recovered.
func (s *Store) lostCopy(r Ref, readAt time.Time, mark uint64) (*ToolCall, bool) {
	s.cacheMu.Lock()
	if e, ok := s.peekCallLocked(r); ok && e.wseq > mark {
		s.cacheMu.Unlock()
		return e.call, true
	}
	p, protected := s.prot.calls[r]
	var mem *ToolCall
	if protected && p.e != nil && s.now().Before(p.until) { // else its keys expired: no loss
		mem = p.e.call
	}
	s.cacheMu.Unlock()
	if it := s.queued(callKey(r)); it != nil {
		return it.call, true // queued during the read
	}
	if mem != nil {
		s.lostAfter(causeMissing, readAt)
		return mem, true
	}
	if s.inLossWindow() {
		if e, ok := s.calls.Peek(r); ok {
			return e.call, true
		}
	}
	return nil, false
}

// servable reports whether a cached record may be served without asking
// Redis while Redis is up: it is terminal, and no invalidation for it can
// have been missed since it was cached.
func (s *Store) servable(e *callEntry) bool {
	return e.fresh && e.call.Status.Terminal() && e.epoch == s.epoch.Load() && s.subLive.Load()
}

// PutCall stores a normalized copy of c (see ToolCall for the mapping of
// arguments and results; UpdatedAt is set to now, CreatedAt too when zero;
// the end fields are dropped unless terminal). It writes memory, then
// Redis. If Redis fails the write is queued and PutCall still returns nil:
// the stream must not break. It returns an error only for invalid input (an
// empty id, an unknown status, a result that is not JSON) or after Close. c
// itself is not modified.
func (s *Store) PutCall(ctx context.Context, c *ToolCall) error {
	n, err := s.prepare(c)
	if err != nil {
		return err
	}
	if s.rdb == nil {
		s.localMu.Lock()
		s.cacheCall(n, 0, 0, 0)
		s.localMu.Unlock()
		s.met.writes.WithLabelValues(writeMemory).Inc()
		return nil
	}
	if !s.direct() {
		s.writeBehind([]*item{{call: n}}, nil)
		return nil
	}
	s.cacheCall(n, 0, 0, 0)
	seq, epoch := s.invalSeq.Load(), s.epoch.Load()
	defer s.acks.end(s.acks.begin())
	vers, err := s.writeRedis(ctx, []callWrite{{n, -1}}, nil)
	if err != nil {
		s.writeFailed(ctx, err)
		s.writeBehind([]*item{{call: n}}, nil)
		return nil
	}
	s.met.writes.WithLabelValues(writeRedis).Inc()
	s.cacheCall(n, vers[0], seq, epoch)
	return nil
}

// PutCallsSync writes calls and t (either may be empty or nil) like PutCall
// and PutThread, in one round trip (one atomic write per thread), and waits
// for Redis to acknowledge it: aguard calls it before a RUN_FINISHED that
// tells a consumer which calls are pending leaves the proxy. It returns nil
// once Redis has the data. If Redis is unreachable, or does not acknowledge
// before ctx ends, the data is queued and the error wraps ErrQueued, so the
// caller can let RUN_FINISHED go out regardless and log that the promise is
// degraded. Other errors mean invalid input (nothing was written), a write
// dropped from a full queue, or Close.
func (s *Store) PutCallsSync(ctx context.Context, calls []*ToolCall, t *Thread) error {
	items := make([]*item, 0, len(calls)+1)
	writes := make([]callWrite, 0, len(calls))
	for _, c := range calls {
		n, err := s.prepare(c)
		if err != nil {
			return err
		}
		items = append(items, &item{call: n})
		writes = append(writes, callWrite{n, -1})
	}
	var threads []*Thread
	if t != nil {
		n, err := s.prepareThread(t)
		if err != nil {
			return err
		}
		items = append(items, &item{thread: n})
		threads = []*Thread{n}
	}
	if len(items) == 0 {
		return nil
	}
	if s.rdb == nil {
		s.localMu.Lock()
		for _, it := range items {
			s.cacheItem(it)
		}
		s.localMu.Unlock()
		s.met.writes.WithLabelValues(writeMemory).Add(float64(len(items)))
		return nil
	}
	what := fmt.Sprintf("%d tool calls", len(calls))
	if t != nil {
		what += fmt.Sprintf(" and thread %q", t.ID)
	}
	if s.direct() {
		for _, it := range items {
			s.cacheItem(it)
		}
		seq, epoch := s.invalSeq.Load(), s.epoch.Load()
		groups := groupWrites(writes, threads)
		defer s.acks.end(s.acks.begin())
		res, err := s.runWrites(ctx, "w", groups)
		if err == nil {
			s.met.writes.WithLabelValues(writeRedis).Add(float64(len(items)))
			for i, g := range groups {
				for j, w := range g.calls {
					s.cacheCall(w.call, res[i].vers[j], seq, epoch)
				}
				if g.t != nil {
					s.cacheThread(g.t, res[i].tver)
				}
			}
			return nil
		}
		s.writeFailed(ctx, err)
		s.writeBehind(items, nil)
		return fmt.Errorf("state: sync write of %s: %w: %w", what, ErrQueued, err)
	}
	// Redis is down, or older writes are still draining: queue behind them,
	// and wait for the drain if Redis is up.
	w := &waiter{remaining: len(items), done: make(chan struct{})}
	s.writeBehind(items, w)
	return s.await(ctx, w, what)
}

// cacheItem puts an item about to be written into memory as a local write.
func (s *Store) cacheItem(it *item) {
	if it.call != nil {
		s.cacheCall(it.call, 0, 0, 0)
	} else {
		s.cacheThread(it.thread, 0)
	}
}

// Apply applies the lifecycle transition t to the record r: the one way an
// existing record changes status (see lifecycle.go). With Redis it is a
// compare-and-set: concurrent transitions from any number of replicas each
// apply exactly once, in some order, each checked against the status the
// previous one left; a refused transition returns an error wrapping
// ErrTransition and writes nothing. If Redis is unreachable, t is applied
// to this process's copy and the result is queued: Apply then returns the
// record together with an error wrapping ErrQueued, because no other
// replica took part. If ctx ends while Redis is writing, whether t was
// applied is unknown.
func (s *Store) Apply(ctx context.Context, r Ref, t Transition) (*ToolCall, error) {
	c, err := s.update(ctx, r, t.apply)
	if err == nil || errors.Is(err, ErrQueued) {
		s.met.transitions.WithLabelValues(string(t.Name)).Inc()
		s.met.approvalDecided(t.Name, c, time.Now())
	}
	return c, err
}

// update is a read-modify-write of the record r: fn gets a copy of the
// current record (ID and ThreadID must not change) and the result is
// written. If fn returns an error, nothing is written and update returns
// it, wrapped. With Redis, fn may run more than once (on a conflict the
// record is read again), and must depend only on its argument.
func (s *Store) update(ctx context.Context, r Ref, fn func(c *ToolCall) error) (*ToolCall, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if s.rdb == nil {
		return s.updateLocal(r, fn)
	}
	for attempt := 1; ; attempt++ {
		if !s.up.Load() {
			return s.updateLocal(r, fn)
		}
		if s.queued(callKey(r)) != nil {
			// Let the drain write the queued value first: the
			// compare-and-set must start from it.
			if err := s.waitUnqueued(ctx, callKey(r)); err != nil {
				return nil, fmt.Errorf("state: update %s: %w", r, err)
			}
			continue
		}
		seq, epoch := s.invalSeq.Load(), s.epoch.Load()
		_, mark := s.queuedAt(callKey(r))
		readAt := time.Now()
		sc, err := s.readCall(ctx, r)
		if err != nil {
			if !s.unreachable(ctx, err) {
				return nil, fmt.Errorf("state: update %s: %w", r, err)
			}
			s.setDown(err)
			continue
		}
		cur, ver := sc.call, sc.ver
		if cur == nil {
			if s.queued(callKey(r)) != nil {
				continue // written meanwhile: start from it
			}
			// Redis lost it, or never had it. A copy this process
			// protects is written back in the same compare-and-set
			// (expected: still absent).
			mem, ok := s.lostCopy(r, readAt, mark)
			if !ok {
				return nil, fmt.Errorf("state: update %s: %w", r, ErrNotFound)
			}
			cur, ver = mem, 0
		}
		next, err := s.apply(cur, fn)
		if err != nil {
			return nil, err
		}
		ticket := s.acks.begin()
		vers, err := s.writeRedis(ctx, []callWrite{{next, ver}}, nil)
		if errors.Is(err, errConflict) {
			s.acks.end(ticket)
			s.met.writes.WithLabelValues(writeConflict).Inc()
			if attempt >= maxCASAttempts {
				return nil, fmt.Errorf("state: update %s: gave up after %d conflicting writes: %w", r, attempt, err)
			}
			continue
		}
		defer s.acks.end(ticket) // every way on returns
		switch {
		case err != nil && !s.unreachable(ctx, err):
			return nil, fmt.Errorf("state: update %s: %w", r, err)
		case err != nil:
			// Whether Redis applied it is unknown; keep the result and
			// write it unconditionally once Redis is back.
			s.setDown(err)
			s.writeBehind([]*item{{call: next}}, nil)
			return next.clone(), fmt.Errorf("state: update %s: %w: %w", r, ErrQueued, err)
		}
		s.met.writes.WithLabelValues(writeRedis).Inc()
		s.cacheCall(next, vers[0], seq, epoch)
		return next.clone(), nil
	}
}

// updateLocal is update on this process's copy: in memory-only mode, or
// while Redis is unreachable (then the result is queued).
func (s *Store) updateLocal(r Ref, fn func(c *ToolCall) error) (*ToolCall, error) {
	s.localMu.Lock()
	defer s.localMu.Unlock()
	var cur *ToolCall
	if it := s.queued(callKey(r)); it != nil {
		cur = it.call
	} else if e, ok := s.lookupCall(r); ok {
		cur = e.call
	}
	if cur == nil {
		if s.rdb == nil {
			return nil, fmt.Errorf("state: update %s: %w", r, ErrNotFound)
		}
		return nil, fmt.Errorf("state: update %s: %w", r, s.downError())
	}
	next, err := s.apply(cur, fn)
	if err != nil {
		return nil, err
	}
	if s.rdb == nil {
		s.cacheCall(next, 0, 0, 0)
		s.met.writes.WithLabelValues(writeMemory).Inc()
		return next.clone(), nil
	}
	s.writeBehind([]*item{{call: next}}, nil)
	return next.clone(), fmt.Errorf("state: update %s: %w: %w", r, ErrQueued, s.downError())
}

// apply runs fn on a copy of cur and normalizes the result. fn may not move
// the record to another id or thread.
func (s *Store) apply(cur *ToolCall, fn func(c *ToolCall) error) (*ToolCall, error) {
	r := RefOf(cur)
	next := cur.clone()
	if err := fn(next); err != nil {
		return nil, fmt.Errorf("state: update %s: %w", r, err)
	}
	if RefOf(next) != r {
		s.met.writes.WithLabelValues(writeInvalid).Inc()
		return nil, fmt.Errorf("state: update %s: %w: the update moved it to %s", r, errInvalid, RefOf(next))
	}
	if err := next.normalize(time.Now()); err != nil {
		s.met.writes.WithLabelValues(writeInvalid).Inc()
		return nil, err
	}
	return next, nil
}

// ListCalls returns the records that match f, oldest CreatedAt first (ties
// by thread, then id). With Redis it reads the thread's index when
// f.ThreadID is set, else the status index (all of them for an empty
// filter), so it sees every replica's records; writes still queued here,
// and records this process protects that Redis lost, are included. Without
// Redis, or while Redis is unreachable, it lists this process's memory.
func (s *Store) ListCalls(ctx context.Context, f Filter) ([]*ToolCall, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if f.Status != "" {
		st, err := ParseStatus(string(f.Status))
		if err != nil {
			return nil, fmt.Errorf("state: list tool calls: %w", err)
		}
		f.Status = st
	}
	var out []*ToolCall
	if s.rdb != nil && s.up.Load() {
		var err error
		if out, err = s.listRedis(ctx, f); err != nil {
			if !s.unreachable(ctx, err) {
				return nil, fmt.Errorf("state: list tool calls %+v: %w", f, err)
			}
			s.setDown(err)
			out = s.localCalls(f)
		} else if s.inLossWindow() {
			out = mergeCalls(out, s.localCalls(f), f, false)
		}
	} else {
		out = s.localCalls(f)
	}
	if s.qlen.Load() > 0 {
		s.mu.Lock()
		queued := s.q.all()
		s.mu.Unlock()
		var qc []*ToolCall
		for _, it := range queued {
			if it.call != nil {
				qc = append(qc, it.call.clone())
			}
		}
		out = mergeCalls(out, qc, f, true)
	}
	slices.SortFunc(out, func(a, b *ToolCall) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		if c := strings.Compare(a.ThreadID, b.ThreadID); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// mergeCalls merges extra into out: a record of extra replaces the one of
// out with its Ref when override is set (a queued write is newer than
// Redis), and is added when out has none; a replaced record that no longer
// matches f leaves the list.
func mergeCalls(out, extra []*ToolCall, f Filter, override bool) []*ToolCall {
	pos := make(map[Ref]int, len(out))
	for i, c := range out {
		pos[RefOf(c)] = i
	}
	for _, c := range extra {
		i, ok := pos[RefOf(c)]
		switch {
		case ok && !override:
		case ok && f.match(c):
			out[i] = c
		case ok:
			out[i] = nil
		case f.match(c):
			pos[RefOf(c)] = len(out)
			out = append(out, c)
		}
	}
	return slices.DeleteFunc(out, func(c *ToolCall) bool { return c == nil })
}

// ThreadsOf returns the threads that hold a call with the given id, sorted:
// the admin API asks before it answers for a bare id. With Redis it reads
// the id's index (and adds what this process holds that Redis does not
// have yet); otherwise it looks through memory.
func (s *Store) ThreadsOf(ctx context.Context, id string) ([]string, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	set := map[string]bool{}
	for _, c := range s.localCalls(Filter{}) {
		if c.ID == id && (s.rdb == nil || !s.up.Load() || s.inLossWindow() || c.protects()) {
			set[c.ThreadID] = true
		}
	}
	if s.rdb != nil && s.up.Load() {
		now := strconv.FormatInt(time.Now().UnixMilli(), 10)
		keys := make([]string, len(s.ks.shards))
		for i, shard := range s.ks.shards {
			keys[i] = s.ks.idsKey(shard, id)
		}
		threads, err := s.indexMembers(ctx, keys, &redis.ZRangeBy{Min: now, Max: "+inf"})
		switch {
		case err == nil:
			for _, t := range threads {
				set[t] = true
			}
		case !s.unreachable(ctx, err):
			return nil, fmt.Errorf("state: threads of call %q: %w", id, err)
		default:
			s.setDown(err)
		}
	}
	if s.qlen.Load() > 0 {
		s.mu.Lock()
		for _, it := range s.q.all() {
			if it.call != nil && it.call.ID == id {
				set[it.call.ThreadID] = true
			}
		}
		s.mu.Unlock()
	}
	out := make([]string, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	slices.Sort(out)
	return out, nil
}

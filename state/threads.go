package state

import (
	"context"
	"fmt"
	"time"
)

// GetThread returns what is remembered of thread id; a thread never seen is
// an empty Thread{ID: id}. With Redis it always reads Redis (unless this
// process still has a write of the thread queued), so a replica sees the
// thread as the replica that served the last run left it. A thread Redis
// lost but this process protects is returned from memory, and the loss
// reported. While Redis is unreachable, or while a loss is being recovered
// and Redis does not have the thread, it returns this process's copy, or an
// error wrapping ErrUnavailable: then nobody can vouch that the thread has
// nothing pending.
func (s *Store) GetThread(ctx context.Context, id string) (*Thread, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if s.rdb == nil {
		if e, ok := s.lookupThread(id); ok {
			s.met.cacheHits.Inc()
			return e.t.clone(), nil
		}
		s.met.cacheMisses.Inc()
		return &Thread{ID: id}, nil
	}
	it, mark := s.queuedAt(threadKey(id))
	if it != nil {
		s.met.cacheHits.Inc()
		return it.thread.clone(), nil
	}
	if s.up.Load() {
		s.met.cacheMisses.Inc()
		readAt := time.Now()
		t, ver, err := s.readThread(ctx, id)
		switch {
		case err == nil && t == nil:
			return s.absentThread(id, s.inLossWindow(), readAt, mark)
		case err == nil:
			s.cacheThreadRead(t, ver)
			return t.clone(), nil
		case !s.unreachable(ctx, err):
			return nil, fmt.Errorf("state: get thread %q: %w", id, err)
		}
		s.setDown(err)
	}
	if e, ok := s.lookupThread(id); ok {
		s.met.cacheHits.Inc()
		return e.t.clone(), nil
	}
	return nil, fmt.Errorf("state: get thread %q: %w", id, s.downError())
}

// absentThread answers for a thread Redis did not have when read at readAt,
// the queue at sequence mark when the read began. window reports that
// Redis lost data recently (this replica's loss window, or another replica
// writing back). A copy written since mark is in flight, not lost.
func (s *Store) absentThread(id string, window bool, readAt time.Time, mark uint64) (*Thread, error) {
	if it := s.queued(threadKey(id)); it != nil {
		return it.thread.clone(), nil
	}
	s.cacheMu.Lock()
	if e, ok := s.peekThreadLocked(id); ok && e.wseq > mark {
		s.cacheMu.Unlock()
		return e.t.clone(), nil
	}
	p, protected := s.prot.threads[id]
	var mem *Thread
	if protected && s.now().Before(p.until) { // else its keys expired: no loss
		mem = p.e.t
	}
	s.cacheMu.Unlock()
	if mem != nil {
		s.lostAfter(causeMissing, readAt)
		return mem.clone(), nil
	}
	if !window {
		return &Thread{ID: id}, nil
	}
	if e, ok := s.threads.Peek(id); ok {
		return e.t.clone(), nil
	}
	return nil, fmt.Errorf("state: thread %q: %w: redis lost data and this replica holds nothing of the thread", id, ErrUnavailable)
}

// PutThread stores a copy of t (UpdatedAt set to now) in memory, then
// Redis; like PutCall, it queues the write if Redis fails and returns an
// error only for invalid input (an empty id) or after Close.
func (s *Store) PutThread(ctx context.Context, t *Thread) error {
	n, err := s.prepareThread(t)
	if err != nil {
		return err
	}
	if s.rdb == nil {
		s.cacheThread(n, 0)
		s.met.writes.WithLabelValues(writeMemory).Inc()
		return nil
	}
	if !s.direct() {
		s.writeBehind([]*item{{thread: n}}, nil)
		return nil
	}
	s.cacheThread(n, 0)
	defer s.acks.end(s.acks.begin())
	res, err := s.runWrites(ctx, "w", groupWrites(nil, []*Thread{n}))
	if err != nil {
		s.writeFailed(ctx, err)
		s.writeBehind([]*item{{thread: n}}, nil)
		return nil
	}
	s.met.writes.WithLabelValues(writeRedis).Inc()
	s.cacheThread(n, res[0].tver)
	return nil
}

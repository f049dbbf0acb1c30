package state

import (
	"context"
	"fmt"
	"time"
)

// Writes behind the caller. A stream must never wait for Redis (README,
// "Bounded under every fault"): the proxy records each change of a call
// with Record, which puts it in memory and in the writer's queue and
// returns, and waits only for the write of a run's end (RecordSync), and
// only as long as it chooses. The writer drains the queue in order of last
// write (writer.go), so Redis receives every record's latest state, in the
// order the states were reached.
//
// Records handed to Record and RecordSync become the Store's: it normalizes
// them in place and keeps them, without a copy, so that a record's
// arguments are held once by the caller and the Store together. The caller
// may go on reading such a record but must never change it; to change a
// call, it makes a new record (Transition.Next) and records that.

// Record writes calls and t (either may be empty or nil) behind the caller:
// into memory at once and, with Redis, into the writer's queue; it never
// waits for Redis. The Store takes calls over (see above); t is copied. It
// returns an error only for invalid input (nothing is written then) or
// after Close.
func (s *Store) Record(calls []*ToolCall, t *Thread) error {
	items, err := s.adopt(calls, t)
	if err != nil || len(items) == 0 {
		return err
	}
	s.recordItems(items, nil)
	return nil
}

// RecordSync is Record, and then waits until Redis has acknowledged every
// write, until ctx ends, or until Redis is found unreachable: aguard calls it
// before a RUN_FINISHED that tells a consumer which calls are pending leaves
// the proxy, with a ctx of Options.RedisTimeout. It returns nil once Redis
// has the data (at once without Redis). When it stops waiting before, the
// writes stay queued (and in memory, where what protects something is never
// evicted), and the error wraps ErrQueued, so the caller can let the
// RUN_FINISHED go out and say so. Other errors mean invalid input (nothing
// was written), a write dropped from a full queue, or Close.
//
// The runs in ended are withdrawn from the runs registry (RunEnded) right
// behind these writes (in the same round trip, or the next at once) rather
// than after Options.WriteDelay: a run that ended cleanly is not taken for
// lost, and the calls it left pending ended, if this replica dies just
// after.
func (s *Store) RecordSync(ctx context.Context, calls []*ToolCall, t *Thread, ended ...RunRef) error {
	items, err := s.adopt(calls, t)
	if err != nil || len(items) == 0 {
		for _, r := range ended {
			s.endRun(r, true)
		}
		return err
	}
	if s.rdb == nil {
		s.recordItems(items, nil)
		return nil
	}
	w := &waiter{remaining: len(items), done: make(chan struct{})}
	s.recordItems(items, w)
	for _, r := range ended {
		s.endRun(r, true)
	}
	what := fmt.Sprintf("%d tool calls", len(calls))
	if t != nil {
		what += fmt.Sprintf(" and thread %q", t.ID)
	}
	return s.await(ctx, w, what)
}

// adopt validates and normalizes calls in place (the Store takes them over)
// and a copy of t, and returns them as queue items.
func (s *Store) adopt(calls []*ToolCall, t *Thread) ([]*item, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	now := time.Now()
	items := make([]*item, 0, len(calls)+1)
	for _, c := range calls {
		if c == nil {
			s.met.writes.WithLabelValues(writeInvalid).Inc()
			return nil, fmt.Errorf("state: %w: nil tool call", errInvalid)
		}
		if err := c.normalize(now); err != nil {
			s.met.writes.WithLabelValues(writeInvalid).Inc()
			return nil, err
		}
		items = append(items, &item{call: c})
	}
	if t != nil {
		n, err := s.prepareThread(t)
		if err != nil {
			return nil, err
		}
		items = append(items, &item{thread: n})
	}
	return items, nil
}

// recordItems stores items in memory, and with Redis queues them.
func (s *Store) recordItems(items []*item, w *waiter) {
	if s.rdb != nil {
		s.writeBehind(items, w)
		return
	}
	s.localMu.Lock()
	s.cacheQueued(items, nil)
	s.localMu.Unlock()
	s.met.writes.WithLabelValues(writeMemory).Add(float64(len(items)))
}

// await waits for w: until Redis has acknowledged its items (nil), one was
// dropped from the full queue, Redis is found unreachable, ctx ends or the
// Store closes (errors wrapping ErrQueued, what naming the writes).
func (s *Store) await(ctx context.Context, w *waiter, what string) error {
	for {
		s.mu.Lock()
		progress, downErr := s.progress, s.downErr
		s.mu.Unlock()
		select {
		case <-w.done:
			if w.dropped {
				return fmt.Errorf("state: sync write of %s: dropped from the full redis queue", what)
			}
			if w.superseded {
				return fmt.Errorf("state: sync write of %s: not applied to a record another replica changed while this one was cut off from redis", what)
			}
			return nil
		default:
		}
		if downErr != nil {
			return fmt.Errorf("state: sync write of %s: %w: %w", what, ErrQueued, downErr)
		}
		select {
		case <-w.done:
		case <-progress:
		case <-ctx.Done():
			s.met.writesLate.Inc()
			return fmt.Errorf("state: sync write of %s: %w: %w", what, ErrQueued, ctx.Err())
		case <-s.stop:
			return fmt.Errorf("state: sync write of %s: %w: %w", what, ErrQueued, errClosed)
		}
	}
}

// RedisTimeout is Options.RedisTimeout: how long a caller should wait for
// Redis (RecordSync) before it goes on with the write queued.
func (s *Store) RedisTimeout() time.Duration { return s.opt.RedisTimeout }

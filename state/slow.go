package state

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A slow Redis. Redis may answer, but late: a CLIENT PAUSE, a fork for a
// snapshot on a big dataset, a saturated network or CPU. Nothing on a
// stream's path waits for it (the proxy writes behind the stream, and gives
// a RUN_FINISHED's write only Options.RedisTimeout), but operators must know:
// every round trip of the main client is timed (slowHook), and one slower
// than Options.RedisTimeout, or one still unanswered after it, makes the
// Store report "degraded: redis slow: …" (Ready) until a hold (10 s) has
// passed since the last one, is counted in aguard_state_redis_slow_total,
// and is logged ("redis slow", once per episode; "redis answering in time
// again" when it ends). The bulk client, whose round trips grow with a
// request's size, is not timed.

// slowState is what the Store knows of Redis's answer times. Guarded by mu.
type slowState struct {
	mu sync.Mutex
	// inflight holds the start of every round trip under way, by a
	// sequence number.
	inflight map[uint64]time.Time
	seq      uint64
	// last is when the last slow round trip ended, took how long it took.
	last time.Time
	took time.Duration
	// episode is set from the first slow round trip logged until the end
	// is logged.
	episode bool
}

func (sl *slowState) init() { sl.inflight = map[uint64]time.Time{} }

// begin records a round trip starting now, and returns its token.
func (s *Store) slowBegin() uint64 {
	sl := &s.slow
	sl.mu.Lock()
	sl.seq++
	tok := sl.seq
	sl.inflight[tok] = time.Now()
	sl.mu.Unlock()
	return tok
}

// slowEnd records the end of round trip tok, which returned err, and
// whether it was slow. One that failed for want of a connection is an
// outage, reported as such (setDown), not as slowness.
func (s *Store) slowEnd(ctx context.Context, tok uint64, err error) {
	sl := &s.slow
	now := time.Now()
	sl.mu.Lock()
	took := now.Sub(sl.inflight[tok])
	delete(sl.inflight, tok)
	slow := took > s.opt.RedisTimeout && (err == nil || !s.unreachable(ctx, err))
	first := slow && !sl.episode
	if slow {
		sl.last, sl.took, sl.episode = now, took, true
	}
	sl.mu.Unlock()
	if slow {
		s.met.redisSlow.Inc()
	}
	if first {
		s.log.Warn("redis slow", "took", took, "timeout", s.opt.RedisTimeout,
			"detail", "Redis answered later than --redis-timeout; streams go on, ledger writes wait in the queue")
	}
}

// slowReason is Ready's reason while Redis is slow, "" otherwise: a round
// trip under way for longer than the timeout, or one that took longer, less
// than the hold ago.
func (s *Store) slowReason() string {
	sl := &s.slow
	now := time.Now()
	sl.mu.Lock()
	defer sl.mu.Unlock()
	var oldest time.Time
	for _, t := range sl.inflight {
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	if !oldest.IsZero() && now.Sub(oldest) > s.opt.RedisTimeout {
		return fmt.Sprintf("redis slow: a round trip has waited %s for its answer (--redis-timeout %s)",
			now.Sub(oldest).Round(time.Millisecond), s.opt.RedisTimeout)
	}
	if !sl.last.IsZero() && now.Sub(sl.last) < s.opt.slowHold {
		return fmt.Sprintf("redis slow: a round trip took %s (--redis-timeout %s), %s ago",
			sl.took.Round(time.Millisecond), s.opt.RedisTimeout, now.Sub(sl.last).Round(time.Second))
	}
	return ""
}

// slowRecovered logs the end of a slow episode, once the hold has passed
// with nothing slow under way. The monitor calls it every heartbeat.
func (s *Store) slowRecovered() {
	sl := &s.slow
	sl.mu.Lock()
	if !sl.episode || time.Since(sl.last) < s.opt.slowHold {
		sl.mu.Unlock()
		return
	}
	for _, t := range sl.inflight {
		if time.Since(t) > s.opt.RedisTimeout {
			sl.mu.Unlock()
			return
		}
	}
	sl.episode = false
	sl.mu.Unlock()
	s.log.Info("redis answering in time again", "timeout", s.opt.RedisTimeout)
}

// slowHook times every command and pipeline of the main Redis client.
type slowHook struct{ s *Store }

func (h slowHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h slowHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		tok := h.s.slowBegin()
		err := next(ctx, cmd)
		h.s.slowEnd(ctx, tok, err)
		return err
	}
}

func (h slowHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		tok := h.s.slowBegin()
		err := next(ctx, cmds)
		h.s.slowEnd(ctx, tok, err)
		return err
	}
}

package state

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// The runs registry: which runs each replica is streaming, so that when a
// replica dies (kill -9, a lost node) another one finds its runs and ends
// their open calls (CANCELLED, "run lost: …") instead of leaving them
// PENDING forever. Each replica keeps its runs in aguard:runs:<replica>
// (a HASH of run members), and beats in aguard:replicas (a ZSET scored by
// Redis's clock). A replica whose score is older than the liveness (10 s) is
// dead: the sweeper of any other replica claims its runs with one script
// (exactly one claimer), moves them into its own registry marked
// "lost <replica>", ends their open calls, and removes them. A claimer that
// dies in turn leaves them to the next.

// runRegistry is this replica's side of the registry. Guarded by mu.
type runRegistry struct {
	mu   sync.Mutex
	live map[RunRef]bool
	// lost are runs claimed from dead replicas, by the replica they died
	// with, until their calls are ended.
	lost map[RunRef]string
	// dirty: Redis may not match (a write failed, or Redis lost data); the
	// next heartbeat rewrites the registry whole.
	dirty bool
	// gen counts changes, so that a rewrite racing with one is redone.
	gen uint64
}

func (r *runRegistry) init() {
	r.live = map[RunRef]bool{}
	r.lost = map[RunRef]string{}
}

// RunStarted registers a run this replica streams, so that another replica
// can end the run's open calls if this one dies. It never waits for Redis:
// the registration is queued ahead of the run's records (writer.go), so it
// reaches Redis before any of them. Without Redis it does nothing (no
// replica would outlive this one).
func (s *Store) RunStarted(r RunRef) {
	if s.rdb == nil || s.closed.Load() {
		return
	}
	s.runs.mu.Lock()
	s.runs.live[r] = true
	s.runs.gen++
	s.runs.mu.Unlock()
	s.enqueue([]*item{{run: &runOp{ref: r, live: true}}}, nil)
}

// RunEnded withdraws a run registered with RunStarted: its stream is over,
// and its calls have been ended or handed to the application. Like
// RunStarted it never waits; the withdrawal reaches Redis after every
// record written before it.
func (s *Store) RunEnded(r RunRef) { s.endRun(r, false) }

// endRun is RunEnded; rush sends the withdrawal without waiting for other
// writes (Options.WriteDelay).
func (s *Store) endRun(r RunRef, rush bool) {
	if s.rdb == nil || s.closed.Load() {
		return
	}
	s.runs.mu.Lock()
	_, was := s.runs.live[r]
	delete(s.runs.live, r)
	s.runs.gen++
	s.runs.mu.Unlock()
	if was {
		s.enqueue([]*item{{run: &runOp{ref: r}}}, nil)
		if rush {
			s.rushWriter()
		}
	}
}

func (s *Store) markRunsDirty() {
	s.runs.mu.Lock()
	s.runs.dirty = true
	s.runs.mu.Unlock()
}

// syncRuns rewrites the registry in Redis when it may not match memory.
func (s *Store) syncRuns(ctx context.Context) error {
	s.runs.mu.Lock()
	if !s.runs.dirty {
		s.runs.mu.Unlock()
		return nil
	}
	s.runs.dirty = false
	gen := s.runs.gen
	fields := make([]any, 0, 2*(len(s.runs.live)+len(s.runs.lost)))
	for r := range s.runs.live {
		fields = append(fields, runMember(r), "live")
	}
	for r, dead := range s.runs.lost {
		fields = append(fields, runMember(r), "lost "+dead)
	}
	s.runs.mu.Unlock()
	key := s.ks.runsKey(s.origin)
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, key)
		if len(fields) > 0 {
			p.HSet(ctx, key, fields...)
			p.PExpire(ctx, key, s.opt.TTL)
		}
		return nil
	})
	s.runs.mu.Lock()
	if err != nil || s.runs.gen != gen {
		s.runs.dirty = true
	}
	s.runs.mu.Unlock()
	return err
}

package state

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The sweeper: one goroutine per Store that, every second,
//
//   - times out approvals nobody decided by requiresApprovalAt
//     (expire_approval: TIMED_OUT, "approval timeout"), without anyone
//     touching them. With Redis it reads the deadlines index
//     (aguard:deadlines); the transition is a compare-and-set, so of all
//     replicas sweeping at once exactly one applies it and reports it
//     (Options.OnEnd). Without Redis it looks through the protected set.
//     While Redis is unreachable it waits: an answer meanwhile is judged
//     against the deadline anyway (ThreadView.Judge).
//   - claims the runs of dead replicas and ends their open calls (runs.go);
//   - keeps the protected set: drops what has expired and re-reads what
//     other replicas rewrote (protect.go).

// sweepBatch bounds the deadlines, records and threads one sweep handles.
const sweepBatch = 256

func (s *Store) runSweeper() {
	defer s.wg.Done()
	tick := time.NewTicker(s.opt.sweep)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
		s.sweep(ctx)
		cancel()
	}
}

// sweep is one round of the sweeper.
func (s *Store) sweep(ctx context.Context) {
	now := s.now()
	s.fireDeadlines(ctx, now)
	if s.rdb != nil && s.up.Load() {
		s.recoverLostRuns(ctx, now)
	}
	calls, threads := s.upkeep(now, sweepBatch)
	if s.rdb != nil && s.up.Load() && (len(calls) > 0 || len(threads) > 0) {
		s.refresh(ctx, calls, threads)
	}
}

// fireDeadlines expires the approvals due at now.
func (s *Store) fireDeadlines(ctx context.Context, now time.Time) {
	var due []Ref
	switch {
	case s.rdb == nil:
		s.cacheMu.Lock()
		for r, p := range s.prot.calls {
			if p.e != nil && approvalExpired(p.e.call, now) && len(due) < sweepBatch {
				due = append(due, r)
			}
		}
		s.cacheMu.Unlock()
	case s.up.Load():
		keys := make([]string, len(s.ks.shards))
		for i, shard := range s.ks.shards {
			keys[i] = s.ks.deadlinesKey(shard)
		}
		members, err := s.indexMembers(ctx, keys, &redis.ZRangeBy{
			Min: "-inf", Max: strconv.FormatInt(now.UnixMilli(), 10), Count: sweepBatch})
		if err != nil {
			if s.unreachable(ctx, err) {
				s.setDown(err)
			}
			return
		}
		for _, m := range members[:min(len(members), sweepBatch)] {
			r, err := parseMember(m)
			if err != nil {
				for _, k := range keys {
					s.rdb.ZRem(ctx, k, m)
				}
				continue
			}
			due = append(due, r)
		}
	}
	for _, r := range due {
		c, err := s.Apply(ctx, r, ExpireApproval(now))
		switch {
		case err == nil:
			s.met.deadlinesFired.Inc()
			s.log.Info("approval timed out", "threadId", r.ThreadID, "toolCallId", r.ID, "requiresApprovalAt", c.RequiresApprovalAt)
			s.ended(c)
		case errors.Is(err, ErrNotFound) && s.rdb != nil:
			s.rdb.ZRem(ctx, s.ks.deadlinesKey(s.ks.shardOf(r.ThreadID)), member(r)) // the record expired
		case errors.Is(err, ErrTransition):
			// Decided or expired meanwhile, by this replica or another.
		default:
			s.log.Warn("could not time out an approval", "threadId", r.ThreadID, "toolCallId", r.ID, "err", err)
		}
	}
}

// ended reports a call the Store ended by itself.
func (s *Store) ended(c *ToolCall) {
	if s.opt.OnEnd != nil {
		s.opt.OnEnd(c)
	}
}

// recoverLostRuns claims the runs of dead replicas and ends their open
// calls.
func (s *Store) recoverLostRuns(ctx context.Context, now time.Time) {
	mine := s.ks.runsKey(s.origin)
	got, err := s.scripts.claim.Eval(ctx, s.rdb, []string{s.ks.replicasKey(), mine, s.ks.primaryKey()},
		s.origin, s.opt.liveness.Milliseconds(), s.ks.runsKey(""), s.opt.TTL.Milliseconds()).StringSlice()
	if err != nil && !errors.Is(err, redis.Nil) {
		if s.unreachable(ctx, err) {
			s.setDown(err)
		}
		return
	}
	s.runs.mu.Lock()
	for i := 0; i+1 < len(got); i += 2 {
		if r, err := parseRunMember(got[i+1]); err == nil {
			s.runs.lost[r] = got[i]
			s.runs.gen++
		}
	}
	lost := make(map[RunRef]string, len(s.runs.lost))
	for r, dead := range s.runs.lost {
		lost[r] = dead
	}
	s.runs.mu.Unlock()
	for r, dead := range lost {
		if err := s.endLostRun(ctx, r, dead, now); err != nil {
			if s.unreachable(ctx, err) {
				s.setDown(err)
			}
			return
		}
		if err := s.rdb.HDel(ctx, mine, runMember(r)).Err(); err != nil {
			return
		}
		s.runs.mu.Lock()
		delete(s.runs.lost, r)
		s.runs.gen++
		s.runs.mu.Unlock()
		s.met.runsLost.Inc()
	}
}

// endLostRun ends the open calls of run r, lost with replica dead.
func (s *Store) endLostRun(ctx context.Context, r RunRef, dead string, now time.Time) error {
	ids, err := s.rdb.ZRange(ctx, threadCallsKey(r.ThreadID), 0, -1).Result()
	if err != nil {
		return err
	}
	refs := make([]Ref, len(ids))
	for i, id := range ids {
		refs[i] = Ref{r.ThreadID, id}
	}
	stored, err := s.readCalls(ctx, refs)
	if err != nil {
		return err
	}
	detail := "its replica " + dead + " stopped"
	for _, sc := range stored {
		if sc.call == nil || sc.call.RunID != r.RunID || sc.call.Status.Terminal() {
			continue
		}
		c, err := s.Apply(ctx, RefOf(sc.call), LoseRun(r.RunID, detail, now))
		switch {
		case err == nil:
			s.log.Warn("tool call of a lost run ended", "threadId", c.ThreadID, "toolCallId", c.ID, "runId", r.RunID, "replica", dead)
			s.ended(c)
		case errors.Is(err, ErrTransition), errors.Is(err, ErrNotFound):
		default:
			return err
		}
	}
	return nil
}

// refresh re-reads protected records and threads another replica rewrote,
// and keeps what Redis has now; one absent from Redis is a loss.
func (s *Store) refresh(ctx context.Context, refs []Ref, threads []string) {
	seq, epoch := s.invalSeq.Load(), s.epoch.Load()
	s.mu.Lock()
	mark := s.q.seq
	for _, r := range refs {
		if it, ok := s.q.get(callKey(r)); ok {
			mark = min(mark, it.seq-1) // in flight during the read
		}
	}
	s.mu.Unlock()
	readAt := time.Now()
	stored, err := s.readCalls(ctx, refs)
	if err != nil {
		return
	}
	for i, sc := range stored {
		switch {
		case s.queued(callKey(refs[i])) != nil:
			continue // memory holds a newer write
		case sc.call == nil && s.writtenSince(refs[i], mark):
			continue // its write was in flight
		case sc.call == nil:
			s.suspectLoss(readAt)
			continue
		}
		s.cacheRead(sc.call, sc.ver, seq, epoch)
		s.settled(refs[i], sc.ver)
	}
	for _, id := range threads {
		if s.queued(threadKey(id)) != nil {
			continue
		}
		readAt := time.Now()
		t, ver, err := s.readThread(ctx, id)
		if err != nil {
			return
		}
		if t == nil {
			s.suspectLoss(readAt)
			continue
		}
		s.cacheThreadRead(t, ver)
		s.cacheMu.Lock()
		if p, ok := s.prot.threads[id]; ok && p.e.ver >= ver {
			delete(s.prot.staleThreads, id)
		}
		s.cacheMu.Unlock()
	}
}

// writtenSince reports whether memory holds a write of r queued after the
// queue's sequence mark.
func (s *Store) writtenSince(r Ref, mark uint64) bool {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	e, ok := s.peekCallLocked(r)
	return ok && e.wseq > mark
}

// settled clears the stale mark of a protected record Redis holds at ver,
// when memory holds that version or a newer one.
func (s *Store) settled(r Ref, ver int64) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	s.settledLocked(r, ver)
}

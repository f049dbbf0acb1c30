package state

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/redistest"
)

// clock is a settable clock for Options.Now.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }

// ends collects what a Store reports through Options.OnEnd.
type ends struct {
	mu    sync.Mutex
	calls []*ToolCall
}

func (e *ends) onEnd(c *ToolCall) {
	e.mu.Lock()
	e.calls = append(e.calls, c)
	e.mu.Unlock()
}

func (e *ends) list() []*ToolCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*ToolCall(nil), e.calls...)
}

// replicaToLose starts Redis, a replica that reaches it through link (cut
// it, and the replica stops beating), and another that takes a replica
// silent for 500 ms for dead and ends its runs' open calls, reporting each
// to e.
func replicaToLose(t *testing.T) (srv *redistest.Server, link *redistest.Link, lost, other *Store, e *ends) {
	t.Helper()
	srv = redistest.Start(t)
	link = srv.Link(t)
	lost = openStore(t, Options{RedisURL: link.URL()})
	await.For(t, "the first heartbeat", lost.markerSet)
	e = new(ends)
	other = openRedisStore(t, srv, Options{OnEnd: e.onEnd, liveness: 500 * time.Millisecond, sweep: 50 * time.Millisecond})
	return srv, link, lost, other, e
}

// holdUntil writes a call of thread t held for approval until deadline.
func holdUntil(t testing.TB, s *Store, thread, id string, deadline time.Time) {
	t.Helper()
	c := newCall(id, thread, StatusRequiresConfirmation, t0)
	c.RequiresApprovalAt = &deadline
	mustPut(t, s, c)
}

// TestApprovalsTimeOutOnTheirOwnExactlyOnceAcrossReplicas runs the sweeps of
// two replicas at once, many times, past an approval's deadline (an
// injected clock): the call times out once, reported once.
func TestApprovalsTimeOutOnTheirOwnExactlyOnceAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	clk := newClock(time.Now())
	var ea, eb ends
	a := openRedisStore(t, srv, Options{Now: clk.now, OnEnd: ea.onEnd, sweep: time.Hour})
	b := openRedisStore(t, srv, Options{Now: clk.now, OnEnd: eb.onEnd, sweep: time.Hour})
	deadline := clk.now().Add(time.Minute)
	holdUntil(t, a, "thread-c", "h", deadline)
	ctx := context.Background()

	a.sweep(ctx)
	b.sweep(ctx)
	if n := len(ea.list()) + len(eb.list()); n != 0 {
		t.Fatalf("%d approvals timed out before their deadline", n)
	}
	clk.set(deadline.Add(time.Millisecond))
	for range 10 {
		var wg sync.WaitGroup
		wg.Go(func() { a.sweep(ctx) })
		wg.Go(func() { b.sweep(ctx) })
		wg.Wait()
	}
	got := append(ea.list(), eb.list()...)
	if len(got) != 1 {
		t.Fatalf("the approval timed out %d times, want once", len(got))
	}
	if c := got[0]; c.Status != StatusTimedOut || c.Cause != CauseApprovalTimeout || c.EndReason != "approval timeout" {
		t.Fatalf("timed-out record = %+v", c)
	}
	if c := mustGet(t, b, "thread-c", "h"); c.Status != StatusTimedOut {
		t.Fatalf("stored record = %s", c.Status)
	}
	if n := rawClient(t, srv).ZCard(ctx, deadlinesKey).Val(); n != 0 {
		t.Errorf("the deadlines index still holds %d members", n)
	}
	if n := metricValue(t, a.met.deadlinesFired) + metricValue(t, b.met.deadlinesFired); n != 1 {
		t.Errorf("aguard_state_approvals_expired_total = %v across replicas, want 1", n)
	}
}

// TestApprovalsTimeOutWithinSecondsOfTheirDeadline lets the sweeper run on
// its own, with and without Redis: within 5 s of the deadline (moved past
// by the injected clock), the approval has timed out and been reported.
func TestApprovalsTimeOutWithinSecondsOfTheirDeadline(t *testing.T) {
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			clk := newClock(time.Now())
			var e ends
			opt := Options{Now: clk.now, OnEnd: e.onEnd}
			var s *Store
			if kind == "memory" {
				s = openStore(t, opt)
			} else {
				s = openRedisStore(t, redistest.Start(t), opt)
			}
			deadline := clk.now().Add(10 * time.Minute)
			holdUntil(t, s, "thread-c", "h", deadline)
			clk.set(deadline.Add(time.Millisecond))
			passed := time.Now()
			await.For(t, "the approval to time out", func() bool { return len(e.list()) == 1 })
			if d := time.Since(passed); d > 5*time.Second {
				t.Errorf("timed out %v after its deadline, want within 5 s", d)
			}
			if c := mustGet(t, s, "thread-c", "h"); c.Status != StatusTimedOut || c.EndReason != "approval timeout" {
				t.Errorf("record = %s %q", c.Status, c.EndReason)
			}
		})
	}
}

// TestTheRunsOfADeadReplicaAreEndedByAnother cuts a replica off (it stops
// beating, as when killed): another replica claims its running run and ends
// the run's open calls, CANCELLED with an endReason naming the run; the
// run's ended call and other runs' calls are left alone.
func TestTheRunsOfADeadReplicaAreEndedByAnother(t *testing.T) {
	srv, link, dead, other, e := replicaToLose(t)
	ctx := context.Background()
	run := RunRef{ThreadID: "thread-k", RunID: "run-1"}
	dead.RunStarted(run)
	open1 := newCall("streaming", "thread-k", StatusPending, t0)
	open2 := newCall("agent-side", "thread-k", StatusExecuting, t0)
	done := newCall("done", "thread-k", StatusCompleted, t0)
	later := newCall("next-run", "thread-k", StatusPending, t0)
	later.RunID = "run-2"
	for _, c := range []*ToolCall{open1, open2, done, later} {
		mustPut(t, dead, c)
	}
	// The registration and the records are written behind: what a killed
	// replica had not written yet is gone with it.
	await.For(t, "the replica's writes to reach Redis", func() bool { return dead.qlen.Load() == 0 })
	link.Cut() // the replica is gone: no heartbeat, no stream end

	await.For(t, "the lost run's calls to end", func() bool { return len(e.list()) == 2 })
	for _, id := range []string{"streaming", "agent-side"} {
		c := mustGet(t, other, "thread-k", id)
		if c.Status != StatusCancelled || c.Cause != CauseRunLost || c.EndReason != "run lost: run-1 (its replica "+dead.origin+" stopped)" {
			t.Errorf("%s = %s %q", id, c.Status, c.EndReason)
		}
	}
	if c := mustGet(t, other, "thread-k", "done"); c.Status != StatusCompleted {
		t.Errorf("the ended call became %s", c.Status)
	}
	if c := mustGet(t, other, "thread-k", "next-run"); c.Status != StatusPending {
		t.Errorf("another run's call became %s", c.Status)
	}
	await.For(t, "the claimed run to leave the registry", func() bool {
		return metricValue(t, other.met.runsLost) == 1 && rawClient(t, srv).Exists(ctx, runsKeyPrefix+dead.origin, runsKeyPrefix+other.origin).Val() == 0
	})
}

// TestALateWriteLeavesTheEndAnotherReplicaWrote: a replica cut off from
// Redis long enough to be taken for dead goes on with its stream, and what
// it writes meanwhile waits in its queue. Another replica ends the run's
// open call (CANCELLED, run lost). When the link heals, the queued write of
// that call was made from a version Redis no longer holds: it is not
// applied. Redis keeps the other replica's end, the superseded write is
// counted, and the cut-off replica reads that end from then on.
func TestALateWriteLeavesTheEndAnotherReplicaWrote(t *testing.T) {
	srv, link, cut, _, e := replicaToLose(t)
	cut.RunStarted(RunRef{ThreadID: "thread-l", RunID: "run-1"})
	mustPut(t, cut, newCall("open", "thread-l", StatusPending, t0))
	await.For(t, "the replica's writes to reach Redis", func() bool { return cut.qlen.Load() == 0 })
	link.Cut()
	await.For(t, "the lost run's call to end", func() bool { return len(e.list()) == 1 })

	// Its stream went on: the call was answered, and another call of the
	// run started, which no other replica has seen.
	mustPut(t, cut, newCall("open", "thread-l", StatusCompleted, t0))
	mustPut(t, cut, newCall("unseen", "thread-l", StatusPending, t0))
	link.Heal()
	await.For(t, "the queue to drain", func() bool { return cut.qlen.Load() == 0 })

	reader := openRedisStore(t, srv, Options{})
	if c := mustGet(t, reader, "thread-l", "open"); c.Status != StatusCancelled || c.Cause != CauseRunLost {
		t.Errorf("open in Redis = %s (%s), want the other replica's end: CANCELLED, run lost", c.Status, c.Cause)
	}
	if c := mustGet(t, reader, "thread-l", "unseen"); c.Status != StatusPending {
		t.Errorf("the call no other replica had seen = %s, want its write applied", c.Status)
	}
	// The queue empties before the write is counted: wait for the count.
	superseded := cut.met.writes.WithLabelValues(writeSuperseded)
	await.For(t, "the late write to be counted superseded", func() bool { return metricValue(t, superseded) > 0 })
	await.For(t, "the cut-off replica to read the other's end", func() bool {
		c := mustGet(t, cut, "thread-l", "open")
		return c.Status == StatusCancelled
	})
	if n := metricValue(t, superseded); n != 1 {
		t.Errorf("superseded writes = %v, want 1", n)
	}
}

// TestAQueuedWriteBehindThisReplicasOwnIsWritten: a queued record made from
// a version that this replica itself has since moved on (its earlier write
// reached Redis while the later one waited) is written from the version
// Redis holds, not given up: only another replica's change supersedes.
func TestAQueuedWriteBehindThisReplicasOwnIsWritten(t *testing.T) {
	srv := redistest.Start(t)
	s := openRedisStore(t, srv, Options{})
	mustPut(t, s, newCall("c", "t", StatusPending, t0))
	s.cacheMu.Lock()
	first := s.knownVersionLocked(Ref{"t", "c"})
	s.cacheMu.Unlock()
	mustPut(t, s, newCall("c", "t", StatusExecuting, t0)) // straight to Redis: a newer version
	n, err := s.prepare(newCall("c", "t", StatusCompleted, t0))
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.q.push(&item{call: n, base: first})
	s.qlen.Store(int64(s.q.len()))
	s.mu.Unlock()
	s.wakeWriter()
	s.rushWriter()
	wantQueuedWriteApplied(t, srv, s)
}

// TestAQueuedWriteRestoresARecordRedisLost: a record written, then changed
// while Redis was unreachable, then lost by Redis (emptied meanwhile): the
// queued write finds no record where it expected its version, and writes
// it: absence is a loss, never another replica's doing.
func TestAQueuedWriteRestoresARecordRedisLost(t *testing.T) {
	srv := redistest.Start(t)
	link := srv.Link(t)
	s := openStore(t, Options{RedisURL: link.URL()})
	await.For(t, "the invalidation subscription to go live", s.subLive.Load)
	mustPut(t, s, newCall("c", "t", StatusPending, t0))
	link.Cut()
	await.For(t, "the cut to be noticed", func() bool { return !s.up.Load() })
	mustPut(t, s, newCall("c", "t", StatusCompleted, t0))
	if err := rawClient(t, srv).FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	link.Heal()
	wantQueuedWriteApplied(t, srv, s)
}

// wantQueuedWriteApplied waits for s's queue to drain and checks that its
// queued write of record c in thread t (COMPLETED) reached Redis, with no
// write superseded.
func wantQueuedWriteApplied(t *testing.T, srv *redistest.Server, s *Store) {
	t.Helper()
	await.For(t, "the queue to drain", func() bool { return s.qlen.Load() == 0 })
	if c := mustGet(t, openRedisStore(t, srv, Options{}), "t", "c"); c.Status != StatusCompleted {
		t.Errorf("c in Redis = %s, want the queued write", c.Status)
	}
	if n := metricValue(t, s.met.writes.WithLabelValues(writeSuperseded)); n != 0 {
		t.Errorf("superseded writes = %v, want 0", n)
	}
}

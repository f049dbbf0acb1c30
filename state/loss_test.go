package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/redistest"
)

// holdAndPend writes what a run leaves when it ends with a call held for
// approval (thread-c, call h) and one pending for the application
// (thread-p, call p), as the proxy's ledger writes them.
func holdAndPend(t testing.TB, s *Store) {
	t.Helper()
	ctx := context.Background()
	h := newCall("h", "thread-c", StatusRequiresConfirmation, t0)
	h.RequiresApprovalAt = ptr(time.Now().Add(time.Hour))
	mustPut(t, s, h)
	if err := s.PutCallsSync(ctx, nil, &Thread{ID: "thread-c", LastRunID: "r1", PendingCalls: []string{"h"}, Approvals: []string{"h"}}); err != nil {
		t.Fatal(err)
	}
	p := newCall("p", "thread-p", StatusExecuting, t0)
	p.ClientToolDeadlineAt = ptr(time.Now().Add(time.Hour))
	if err := s.PutCallsSync(ctx, []*ToolCall{p}, &Thread{ID: "thread-p", LastRunID: "r1", PendingCalls: []string{"p"}}); err != nil {
		t.Fatal(err)
	}
}

// ledgerKeys are the keys holdAndPend writes.
var ledgerKeys = []string{"aguard:{thread-c}:call:h", "aguard:{thread-c}:thread", "aguard:{thread-p}:call:p", "aguard:{thread-p}:thread"}

func waitKeys(t testing.TB, srv *redistest.Server, keys ...string) {
	t.Helper()
	rc := rawClient(t, srv)
	await.For(t, fmt.Sprintf("%v to be back in redis", keys), func() bool {
		return rc.Exists(context.Background(), keys...).Val() == int64(len(keys))
	})
}

// TestFlushallIsDetectedAndWrittenBack pins the loss path on FLUSHALL: the
// loss is noticed within 5 s (the marker), logged, counted and reported
// degraded; everything this replica held comes back, flagged restored;
// and until then the lost thread is not read as empty.
func TestFlushallIsDetectedAndWrittenBack(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	s := openRedisStore(t, srv, Options{Registerer: reg})
	holdAndPend(t, s)
	await.For(t, "the first heartbeat", s.markerSet)
	rc := rawClient(t, srv)
	ctx := context.Background()

	if err := rc.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	flushed := time.Now()
	await.For(t, "the loss to be reported", func() bool {
		_, reason := s.Ready()
		return strings.Contains(reason, "degraded: redis lost data (marker)")
	})
	if d := time.Since(flushed); d > 5*time.Second {
		t.Errorf("the loss was noticed %v after FLUSHALL, want within 5s", d)
	}
	waitKeys(t, srv, ledgerKeys...)
	if got := metricValue(t, s.met.dataLost.WithLabelValues("marker")); got != 1 {
		t.Errorf("aguard_state_redis_data_lost_total{cause=marker} = %v, want 1", got)
	}
	await.For(t, "the write-back to be counted", func() bool {
		return metricValue(t, s.met.writeBack.WithLabelValues("written")) >= 4
	})
	if r := rc.HGet(ctx, "aguard:{thread-c}:call:h", "r").Val(); r != "1" {
		t.Errorf("the restored record is not flagged restored: r=%q", r)
	}
	// Still degraded: at least 10 s after the loss.
	if _, reason := s.Ready(); !strings.Contains(reason, "redis lost data") {
		t.Errorf("Ready() = %q right after the write-back, want degraded for at least 10 s", reason)
	}
	// Another replica finds the threads as they were.
	other := openRedisStore(t, srv, Options{})
	th, err := other.GetThread(ctx, "thread-c")
	if err != nil || !slices.Equal(th.Approvals, []string{"h"}) || !slices.Equal(th.PendingCalls, []string{"h"}) {
		t.Errorf("thread-c after the write-back = %+v, %v", th, err)
	}
	if held, err := other.ListCalls(ctx, Filter{Status: StatusRequiresConfirmation}); err != nil || len(held) != 1 {
		t.Errorf("held calls after the write-back = %v, %v", held, err)
	}
	if c := mustGet(t, other, "thread-p", "p"); c.Status != StatusExecuting || c.ClientToolDeadlineAt == nil {
		t.Errorf("pending call after the write-back = %+v", c)
	}
}

// TestALostThreadIsNotReadAsNothingPending reads threads in the loss window
// (the write-back held back): a thread this replica protects is served from
// memory, an answer to its held call is declined (the approval cannot be
// vouched for), and a thread it knows nothing of is unavailable, not empty.
func TestALostThreadIsNotReadAsNothingPending(t *testing.T) {
	srv := redistest.Start(t)
	s := openRedisStore(t, srv, Options{heartbeat: time.Hour}) // the request finds the loss itself
	holdAndPend(t, s)
	await.For(t, "the first heartbeat", s.markerSet)
	ctx := context.Background()
	if err := rawClient(t, srv).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	v, err := s.ReadThread(ctx, "thread-p", nil)
	if err != nil || !slices.Equal(v.Thread.PendingCalls, []string{"p"}) || !v.FromMemory {
		t.Fatalf("ReadThread(thread-p) after FLUSHALL = %+v, %v; want its pending call, from memory", v, err)
	}
	if !s.inLossWindow() {
		t.Fatal("the read did not notice the loss")
	}
	v, err = s.ReadThread(ctx, "thread-c", []string{"h"})
	if err != nil {
		t.Fatal(err)
	}
	verdict := v.Judge("h", []byte(`"paid"`), "", false, time.Now())
	if verdict.Action != AnswerDecline || verdict.Reason != "approval lost" {
		t.Fatalf("answer to the held call = %+v, want a decline (approval lost)", verdict)
	}
	res := s.ApplyAnswers(ctx, v, []Change{{"h", verdict.Transition}})
	if res[0].Err != nil || res[0].Call.Status != StatusCancelled || res[0].Call.Cause != CauseApprovalLost {
		t.Fatalf("recorded decline = %+v", res[0])
	}
	if _, err := s.ReadThread(ctx, "thread-never-seen", nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("ReadThread of an unknown thread in the loss window = %v, want ErrUnavailable", err)
	}
	// The write-back does not bring the approval back: the decline is newer.
	await.For(t, "the write-back", func() bool {
		s.loss.mu.Lock()
		defer s.loss.mu.Unlock()
		return s.loss.completed
	})
	if c := mustGet(t, openRedisStore(t, srv, Options{}), "thread-c", "h"); c.Status != StatusCancelled {
		t.Fatalf("held call after the write-back = %s, want the decline to stand", c.Status)
	}
}

// TestWriteBackKeepsWhatAnotherReplicaWroteAfterTheLoss: a record another
// replica writes after the loss is newer than this replica's copy, and the
// write-back leaves it.
func TestWriteBackKeepsWhatAnotherReplicaWroteAfterTheLoss(t *testing.T) {
	srv := redistest.Start(t)
	a := openRedisStore(t, srv, Options{heartbeat: time.Hour})
	b := openRedisStore(t, srv, Options{})
	holdAndPend(t, a)
	await.For(t, "the first heartbeat", a.markerSet)
	ctx := context.Background()
	if err := rawClient(t, srv).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// B, after the loss, records a rejection of h (its own copy of it).
	rejected := newCall("h", "thread-c", StatusRequiresConfirmation, t0)
	rejected.RequiresApprovalAt = ptr(time.Now().Add(time.Hour))
	if err := Reject("bob", time.Now()).To(rejected); err != nil {
		t.Fatal(err)
	}
	mustPut(t, b, rejected)

	a.wakeMonitor() // the heartbeat finds the marker gone and writes back
	await.For(t, "A's write-back", func() bool {
		a.loss.mu.Lock()
		defer a.loss.mu.Unlock()
		return a.loss.completed
	})
	if c := mustGet(t, openRedisStore(t, srv, Options{}), "thread-c", "h"); c.Status != StatusCancelled || c.ApprovedBy != "bob" {
		t.Fatalf("h after A's write-back = %s by %q, want B's rejection", c.Status, c.ApprovedBy)
	}
	if got := metricValue(t, a.met.writeBack.WithLabelValues("newer_in_redis")); got != 1 {
		t.Errorf("records found newer in redis = %v, want 1", got)
	}
	waitKeys(t, srv, "aguard:{thread-c}:thread", "aguard:{thread-p}:call:p", "aguard:{thread-p}:thread")
}

// TestARestartWithoutPersistenceIsALoss: Redis killed (-9) and restarted
// empty while an approval is held: the restart is noticed (run_id, marker),
// and the records are back afterwards.
func TestARestartWithoutPersistenceIsALoss(t *testing.T) {
	srv := redistest.Start(t)
	s := openRedisStore(t, srv, Options{})
	holdAndPend(t, s)
	await.For(t, "the first heartbeat", s.markerSet)
	srv.Stop()
	srv.Restart()
	await.For(t, "the loss to be reported", func() bool {
		_, reason := s.Ready()
		return strings.Contains(reason, "redis lost data (restart)")
	})
	waitKeys(t, srv, ledgerKeys...)
	// The goroutine whose connection met the restarted server counts the
	// loss just after Ready can report it, and the monitor may write back
	// meanwhile: wait for the count.
	restarts := s.met.dataLost.WithLabelValues("restart")
	await.For(t, "the loss to be counted", func() bool { return metricValue(t, restarts) >= 1 })
	if got := metricValue(t, restarts); got != 1 {
		t.Errorf("aguard_state_redis_data_lost_total{cause=restart} = %v, want 1", got)
	}
}

// probeGate is a go-redis hook that fails the writer's probe (PING) while
// shut, so that a Store that found Redis unreachable stays down whatever
// Redis does; other commands, and new connections, pass.
type probeGate struct{ shut atomic.Bool }

// errProbeShut is the probe's failure while the gate is shut.
var errProbeShut = errors.New("the test holds the probe back")

func (g *probeGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *probeGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (g *probeGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if g.shut.Load() && cmd.Name() == "ping" {
			return errProbeShut
		}
		return next(ctx, cmd)
	}
}

// TestAHeldCallReadFromMemoryAfterALossIsDeclined: Redis is killed (-9)
// while an approval is held, the Store finds it unreachable, and Redis
// restarts empty. A new connection (the invalidation subscription's) finds
// the loss before the writer's probe finds Redis back: the Store reports
// the loss while it still serves from memory. An answer to the held call
// read then is declined (approval lost), as it is once Redis answers, not
// refused as awaiting an approval nobody can vouch for.
func TestAHeldCallReadFromMemoryAfterALossIsDeclined(t *testing.T) {
	srv := redistest.Start(t)
	gate := &probeGate{}
	s := openRedisStore(t, srv, Options{Hooks: []redis.Hook{gate}})
	holdAndPend(t, s)
	await.For(t, "the first heartbeat", s.markerSet)
	ctx := context.Background()
	read := func(when string) (*ThreadView, AnswerVerdict) {
		t.Helper()
		v, err := s.ReadThread(ctx, "thread-c", []string{"h"})
		if err != nil {
			t.Fatalf("ReadThread(thread-c) %s: %v", when, err)
		}
		return v, v.Judge("h", []byte(`"paid"`), "", false, time.Now())
	}

	gate.shut.Store(true)
	srv.Stop()
	// Unreachable, nothing lost yet: the held call is held to its last
	// known state.
	if _, verdict := read("with Redis down"); verdict.Action != AnswerAwait {
		t.Fatalf("answer to the held call with Redis down = %+v, want it awaiting approval", verdict)
	}
	srv.Restart()
	await.For(t, "the loss to be reported while Redis is still taken for unreachable", func() bool {
		_, reason := s.Ready()
		return strings.Contains(reason, "redis unreachable") && strings.Contains(reason, "redis lost data (restart)")
	})
	v, verdict := read("after the loss, from memory")
	if !v.FromMemory || verdict.Action != AnswerDecline || verdict.Reason != "approval lost" {
		t.Fatalf("answer to the held call after the loss (from memory: %v) = %+v, want a decline (approval lost)", v.FromMemory, verdict)
	}
	res := s.ApplyAnswers(ctx, v, []Change{{"h", verdict.Transition}})
	if (res[0].Err != nil && !errors.Is(res[0].Err, ErrQueued)) || res[0].Call == nil || res[0].Call.Cause != CauseApprovalLost {
		t.Fatalf("recorded decline = %+v", res[0])
	}

	gate.shut.Store(false)
	await.For(t, "the write-back", func() bool {
		s.loss.mu.Lock()
		defer s.loss.mu.Unlock()
		return s.loss.completed
	})
	waitKeys(t, srv, "aguard:{thread-c}:call:h")
	if c := mustGet(t, openRedisStore(t, srv, Options{}), "thread-c", "h"); c.Status != StatusCancelled || c.Cause != CauseApprovalLost {
		t.Fatalf("held call after the write-back = %s %q, want the decline to stand", c.Status, c.Cause)
	}
}

// TestEvictionIsALoss: keys evicted under maxmemory (evicted_keys grows) are
// a loss too.
func TestEvictionIsALoss(t *testing.T) {
	srv := redistest.Start(t)
	s := openRedisStore(t, srv, Options{})
	holdAndPend(t, s)
	await.For(t, "the first heartbeat", s.markerSet)
	ctx := context.Background()
	rc := rawClient(t, srv)
	used := rc.InfoMap(ctx, "memory").Item("Memory", "used_memory")
	var n int64
	fmt.Sscan(used, &n)
	if err := rc.ConfigSet(ctx, "maxmemory-policy", "allkeys-random").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.ConfigSet(ctx, "maxmemory", fmt.Sprint(n+256<<10)).Err(); err != nil {
		t.Fatal(err)
	}
	junk := strings.Repeat("x", 4096)
	for i := 0; ; i++ {
		rc.Set(ctx, fmt.Sprint("junk-", i), junk, 0)
		if rc.InfoMap(ctx, "stats").Item("Stats", "evicted_keys") != "0" {
			break
		}
		if i > 10000 {
			t.Fatal("nothing was evicted")
		}
	}
	await.For(t, "the eviction to be reported", func() bool {
		return metricValue(t, s.met.dataLost.WithLabelValues("eviction"))+metricValue(t, s.met.dataLost.WithLabelValues("marker")) >= 1
	})
}

// TestDegradedLastsAtLeastTheHoldAndUntilWrittenBack pins Ready's loss
// window: 10 s by default, longer while the write-back is not done.
func TestDegradedLastsAtLeastTheHoldAndUntilWrittenBack(t *testing.T) {
	srv := redistest.Start(t)
	s := openRedisStore(t, srv, Options{heartbeat: time.Hour})
	set := func(ago time.Duration, pending, completed bool) {
		s.loss.mu.Lock()
		s.loss.detected, s.loss.cause, s.loss.pending, s.loss.completed = time.Now().Add(-ago), causeMarker, pending, completed
		s.loss.mu.Unlock()
	}
	set(9*time.Second, false, true)
	if _, reason := s.Ready(); !strings.Contains(reason, "redis lost data (marker)") || !strings.Contains(reason, "written back") {
		t.Errorf("9 s after a loss written back: Ready() = %q, want degraded", reason)
	}
	set(11*time.Second, false, true)
	if _, reason := s.Ready(); reason != "" {
		t.Errorf("11 s after a loss written back: Ready() = %q, want ok", reason)
	}
	set(time.Minute, true, false)
	if _, reason := s.Ready(); !strings.Contains(reason, "writing back") {
		t.Errorf("a minute after a loss not yet written back: Ready() = %q, want degraded", reason)
	}
}

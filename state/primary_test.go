package state

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/redistest"
)

// TestAThreadIsNotReadFromANewPrimaryThatLacksItsLastWrite fails the
// primary over under two replicas A and B as Sentinel does: its replica is
// promoted (REPLICAOF NO ONE) while A and B still write to the old one,
// then their endpoint moves to the new one. A answered the thread's call
// in between, on the old primary only, and made a call on another thread.
// Reading the thread from the new primary, neither A nor B gets the copy
// that still lists the call as pending, and B's answer to the other call,
// read before the move, is recorded: they wait until A has written back
// what it holds.
func TestAThreadIsNotReadFromANewPrimaryThatLacksItsLastWrite(t *testing.T) {
	old, promoted, oc, pc := replicaPair(t)
	ctx := context.Background()
	link := old.Link(t)
	// Beats an hour apart: only the connections can notice the new primary.
	opt := Options{RedisURL: link.URL(), heartbeat: time.Hour}
	a, b := openStore(t, opt), openStore(t, opt)
	await.For(t, "A's first heartbeat", a.markerSet)
	await.For(t, "B's first heartbeat", b.markerSet)

	th := "t-failover"
	c := newCall("c1", th, StatusExecuting, t0)
	if err := a.PutCallsSync(ctx, []*ToolCall{c}, &Thread{ID: th, LastRunID: "r1", PendingCalls: []string{"c1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ReadThread(ctx, th, nil); err != nil { // B holds the pending copy
		t.Fatal(err)
	}
	promote(t, oc, pc)

	// On the old primary only: the call answered, the thread with nothing pending.
	v, err := a.ReadThread(ctx, th, []string{"c1"})
	if err != nil {
		t.Fatal(err)
	}
	res := a.ApplyAnswers(ctx, v, []Change{{ID: "c1", Transition: Answer([]byte(`"yes"`), "", false, time.Now())}})
	if res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	if err := a.PutCallsSync(ctx, nil, &Thread{ID: th, LastRunID: "r2"}); err != nil {
		t.Fatal(err)
	}
	if got := pc.HGet(ctx, threadKey(th), "d").Val(); !strings.Contains(got, `"c1"`) {
		t.Fatalf("the new primary has the answer already: %s", got)
	}
	// And a call A made on another thread, which B reads there too.
	c2 := newCall("c2", "t-other", StatusExecuting, t0)
	if err := a.PutCallsSync(ctx, []*ToolCall{c2}, &Thread{ID: "t-other", LastRunID: "r1", PendingCalls: []string{"c2"}}); err != nil {
		t.Fatal(err)
	}
	v2, err := b.ReadThread(ctx, "t-other", []string{"c2"})
	if err != nil {
		t.Fatal(err)
	}

	link.Redirect(promoted)
	// B's answer, read from the old primary, is written to the new one,
	// which lacks the call: the compare-and-set reads it again, once A
	// has written it back.
	res = b.ApplyAnswers(ctx, v2, []Change{{ID: "c2", Transition: Answer([]byte(`"ok"`), "", false, time.Now())}})
	if res[0].Err != nil || res[0].Call.Status != StatusCompleted {
		t.Fatalf("B's answer to the call read before the failover: %+v", res[0])
	}
	for name, s := range map[string]*Store{"B": b, "A": a} {
		v, err := s.ReadThread(ctx, th, []string{"c1"})
		if err != nil {
			t.Fatalf("%s reads the thread after the failover: %v", name, err)
		}
		if len(v.Thread.PendingCalls) != 0 {
			t.Fatalf("%s reads the thread from the new primary as pending %v: the copy from before the answer", name, v.Thread.PendingCalls)
		}
	}
	if got, err := b.GetCall(ctx, Ref{th, "c1"}); err != nil || got.Status != StatusCompleted {
		t.Fatalf("B reads the answered call as %v (%v)", got, err)
	}
	// The connection that met the new primary may be another goroutine's,
	// which counts the loss just after the Store has begun to act on it.
	for name, s := range map[string]*Store{"A": a, "B": b} {
		restarts := s.met.dataLost.WithLabelValues(string(causeRestart))
		await.For(t, name+" to count the new primary as a loss", func() bool { return metricValue(t, restarts) >= 1 })
		if got := metricValue(t, restarts); got != 1 {
			t.Errorf("%s counted %v losses by restart, want 1", name, got)
		}
	}
}

// replicaPair starts a Redis and a replica of it, as Sentinel watches
// them, with a client of each.
func replicaPair(t *testing.T) (old, promoted *redistest.Server, oc, pc *redis.Client) {
	t.Helper()
	old, promoted = redistest.Start(t), redistest.Start(t)
	oc, pc = rawClient(t, old), rawClient(t, promoted)
	ctx := context.Background()
	host, port, _ := strings.Cut(old.Addr(), ":")
	if err := oc.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := pc.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	return old, promoted, oc, pc
}

// promote waits until the replica (pc) has every write its primary (oc)
// took so far, then promotes it (REPLICAOF NO ONE), as Sentinel does; the
// old primary goes on taking writes.
func promote(t *testing.T, oc, pc *redis.Client) {
	t.Helper()
	await.For(t, "the replica to have every write so far", func() bool {
		return replOffset(t, oc, "master_repl_offset") <= replOffset(t, pc, "slave_repl_offset")
	})
	if err := pc.ReplicaOf(context.Background(), "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
}

// replOffset reads a replication offset (field of INFO replication).
func replOffset(t *testing.T, c *redis.Client, field string) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}

// holdWrite is a redis.Hook that, once armed, holds the first pipeline
// carrying the write script after its reply has arrived: the write is in
// Redis, its acknowledgement not yet in the Store's memory.
type holdWrite struct {
	sha     string
	armed   atomic.Bool
	replied chan struct{}
	release chan struct{}
}

func (h *holdWrite) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *holdWrite) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *holdWrite) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if args := c.Args(); len(args) > 1 && c.Name() == "evalsha" && args[1] == h.sha && h.armed.CompareAndSwap(true, false) {
				close(h.replied)
				<-h.release
				break
			}
		}
		return err
	}
}

// TestAWriteTheOldPrimaryAcknowledgedJustBeforeAFailoverIsWrittenBack
// answers a call on the old primary after its replica was promoted, and
// holds the reply between Redis and the Store's memory while the endpoint
// moves to the new primary and the Store notices: its write-back must
// carry the answer there. Taken before the answer reached memory, the
// write-back would skip the call (the new primary has the version it knew)
// and the new primary would keep the call executing for good.
func TestAWriteTheOldPrimaryAcknowledgedJustBeforeAFailoverIsWrittenBack(t *testing.T) {
	old, promoted, oc, pc := replicaPair(t)
	ctx := context.Background()
	link := old.Link(t)
	hold := &holdWrite{sha: redis.NewScript(writeScriptSrc).Hash(), replied: make(chan struct{}), release: make(chan struct{})}
	a := openStore(t, Options{RedisURL: link.URL(), heartbeat: time.Hour, Hooks: []redis.Hook{hold}})
	await.For(t, "the first heartbeat", a.markerSet)

	th := "t-held-ack"
	c := newCall("c1", th, StatusExecuting, t0)
	if err := a.PutCallsSync(ctx, []*ToolCall{c}, &Thread{ID: th, LastRunID: "r1", PendingCalls: []string{"c1"}}); err != nil {
		t.Fatal(err)
	}
	promote(t, oc, pc)

	hold.armed.Store(true)
	answered := make(chan error, 1)
	go func() {
		_, err := a.Apply(ctx, Ref{th, "c1"}, Answer([]byte(`"yes"`), "", false, time.Now()))
		answered <- err
	}()
	<-hold.replied
	if got := oc.HGet(ctx, callKey(Ref{th, "c1"}), "s").Val(); got != string(StatusCompleted) {
		t.Fatalf("the old primary has the call %q, want it answered", got)
	}
	link.Redirect(promoted)
	if err := a.rdb.Ping(ctx).Err(); err != nil { // a new connection: to the new primary
		t.Fatal(err)
	}
	lost := a.met.dataLost.WithLabelValues(string(causeRestart))
	await.For(t, "the Store to count the new primary as a loss", func() bool { return metricValue(t, lost) == 1 })
	await.For(t, "the write-back to wait for the answer, or to be done without it", func() bool {
		a.loss.mu.Lock()
		done := a.loss.completed
		a.loss.mu.Unlock()
		return done || a.acks.settling()
	})
	close(hold.release)
	if err := <-answered; err != nil {
		t.Fatalf("the answer: %v", err)
	}
	await.For(t, "the write-back to be done", func() bool {
		a.loss.mu.Lock()
		defer a.loss.mu.Unlock()
		return a.loss.completed && !a.loss.pending && !a.loss.writing
	})
	if got := pc.HGet(ctx, callKey(Ref{th, "c1"}), "s").Val(); got != string(StatusCompleted) {
		t.Fatalf("the new primary has the answered call as %q after the write-back", got)
	}
}

// TestNoWriteReachesTheOldPrimaryOnceTheNewOneIsSeen fails the primary
// over under a Store whose two clients move to the new primary one after
// the other, as each moves when it next dials: the endpoint moves new
// connections only (a managed Redis's name; go-redis's Sentinel client
// dials the new address likewise), and the bulk client keeps the
// connection it made to the old primary. The other client's first new
// connection sees the new primary, and the Store writes back what it holds
// there and marks itself caught up. An answer to a thread's 512 pending
// calls then goes through the bulk client: it must reach the new primary.
// Sent to the old one, it would be lost when the old one follows the new:
// the new primary would keep every call EXECUTING, though the Store told
// its caller they were answered.
func TestNoWriteReachesTheOldPrimaryOnceTheNewOneIsSeen(t *testing.T) {
	old, promoted, oc, pc := replicaPair(t)
	ctx := context.Background()
	link := old.Link(t)
	// Beats and sweeps an hour apart: the Store's connections stay as the
	// test leaves them.
	a := openStore(t, Options{RedisURL: link.URL(), heartbeat: time.Hour, sweep: time.Hour})
	await.For(t, "the first heartbeat", a.markerSet)

	th := "t-two-clients"
	ids := make([]string, bulkThreshold)
	calls := make([]*ToolCall, bulkThreshold)
	for i := range ids {
		ids[i] = "c" + strconv.Itoa(i)
		calls[i] = newCall(ids[i], th, StatusExecuting, t0)
	}
	if err := a.PutCallsSync(ctx, calls, &Thread{ID: th, LastRunID: "r1", PendingCalls: ids}); err != nil {
		t.Fatal(err)
	}
	promote(t, oc, pc)
	// The Store's connections so far are gone (the bulk client has none
	// yet); the bulk client's first one for pipelines, which carry its reads
	// and writes, reaches the old primary, which the Store takes for the
	// primary still.
	if err := oc.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.bulk.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	link.Follow(promoted)
	if err := a.rdb.Ping(ctx).Err(); err != nil { // a new connection: to the new primary
		t.Fatal(err)
	}
	newID := parseInfo(pc.Info(ctx, "server").Val()).runID
	await.For(t, "the Store to write back and mark itself caught up with the new primary", func() bool {
		a.loss.mu.Lock()
		done := a.loss.completed && !a.loss.pending && !a.loss.writing
		a.loss.mu.Unlock()
		return done && pc.HGet(ctx, a.ks.primaryKey(), a.origin).Val() == newID
	})

	v, err := a.ReadThread(ctx, th, ids)
	if err != nil {
		t.Fatal(err)
	}
	changes := make([]Change, len(ids))
	for i, id := range ids {
		changes[i] = Change{ID: id, Transition: Answer([]byte(`"yes"`), "", false, time.Now())}
	}
	for i, r := range a.ApplyAnswers(ctx, v, changes) {
		if r.Err != nil {
			t.Fatalf("the answer to %s: %v", ids[i], r.Err)
		}
	}
	for _, id := range []string{ids[0], ids[len(ids)-1]} {
		if got := pc.HGet(ctx, callKey(Ref{th, id}), "s").Val(); got != string(StatusCompleted) {
			t.Errorf("the new primary has %s as %q after the Store answered it; want it COMPLETED", id, got)
		}
		if got := oc.HGet(ctx, callKey(Ref{th, id}), "s").Val(); got != string(StatusExecuting) {
			t.Errorf("the old primary took the answer to %s (%q) after the Store had seen the new one", id, got)
		}
	}
	if got := metricValue(t, a.met.dataLost.WithLabelValues(string(causeRestart))); got != 1 {
		t.Errorf("the Store counted %v losses by restart, want 1", got)
	}
}

// TestAConnectionThatReachesTheReplacedPrimaryIsRefused: once a Store has
// seen the new primary, a new connection that still reaches the old one
// (a dial that began before the endpoint moved, a Sentinel that has not
// heard of the failover yet) is refused before it serves anything: the old
// primary's replication ID is the one the new primary took over. Taken for
// yet another new primary, it would count a second loss and have the Store
// write there what the old primary drops when it follows the new one.
func TestAConnectionThatReachesTheReplacedPrimaryIsRefused(t *testing.T) {
	old, promoted, oc, pc := replicaPair(t)
	ctx := context.Background()
	link := old.Link(t)
	a := openStore(t, Options{RedisURL: link.URL(), heartbeat: time.Hour, sweep: time.Hour})
	await.For(t, "the first heartbeat", a.markerSet)
	promote(t, oc, pc)
	link.Redirect(promoted)
	if err := a.rdb.Ping(ctx).Err(); err != nil { // a new connection: to the new primary
		t.Fatal(err)
	}
	lost := a.met.dataLost.WithLabelValues(string(causeRestart))
	await.For(t, "the Store to count the new primary as a loss", func() bool { return metricValue(t, lost) == 1 })

	link.Redirect(old)
	if err := a.rdb.Ping(ctx).Err(); !errors.Is(err, errOldPrimary) {
		t.Fatalf("a command on a new connection to the old primary: %v; want it refused (errOldPrimary)", err)
	}
	link.Redirect(promoted)
	if err := a.rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("a command on a new connection to the new primary: %v", err)
	}
	if got := metricValue(t, lost); got != 1 {
		t.Errorf("the Store counted %v losses by restart, want 1: the old primary taken for a new one", got)
	}
}

// TestAReplicaStillOnTheOldPrimaryDoesNotReadWhatTheNewOneLacks fails the
// primary over (SENTINEL FAILOVER, three real redis-sentinel processes)
// under two replicas that hear of it at different times: B's only
// sentinel is frozen, so B's connections stay on the old primary, which
// takes writes and answers reads until Sentinel makes it follow the new
// one. A sees the new primary and records a run that leaves a call pending
// there. B must not read the thread from the old primary, where the call
// is missing: it would let the thread's next run through without the
// answer, or take the answer for one to a call it does not know and record
// nothing. Once B's sentinel names the new primary, B reads the call.
func TestAReplicaStillOnTheOldPrimaryDoesNotReadWhatTheNewOneLacks(t *testing.T) {
	ss := redistest.StartSentinels(t)
	ctx := context.Background()
	a := openStore(t, Options{RedisURL: ss.URLOf(0, 1), RedisMode: ModeSentinel, heartbeat: time.Hour, sweep: time.Hour})
	b := openStore(t, Options{RedisURL: ss.URLOf(2), RedisMode: ModeSentinel, heartbeat: time.Hour, sweep: time.Hour})
	await.For(t, "the first heartbeats", func() bool { return a.markerSet() && b.markerSet() })
	th := "t-lagging-replica"
	if err := a.PutCallsSync(ctx, nil, &Thread{ID: th, LastRunID: "r0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ReadThread(ctx, th, nil); err != nil { // B holds the thread as it was
		t.Fatal(err)
	}

	ss.Freeze(t, 2)
	ss.Failover(t)
	lost := a.met.dataLost.WithLabelValues(string(causeRestart))
	await.For(t, "A to see the new primary", func() bool {
		_ = a.rdb.Ping(ctx).Err() // go-redis dials the new primary once it has heard of it
		return metricValue(t, lost) == 1
	})
	c := newCall("c1", th, StatusExecuting, t0)
	if err := a.PutCallsSync(ctx, []*ToolCall{c}, &Thread{ID: th, LastRunID: "r1", PendingCalls: []string{"c1"}}); err != nil {
		t.Fatal(err)
	}
	old := rawClient(t, ss.Replica)
	if got := old.HGet(ctx, callKey(Ref{th, "c1"}), "s").Val(); got != "" {
		t.Fatalf("the old primary has the call A recorded after it saw the new one (%q)", got)
	}

	v, err := b.ReadThread(ctx, th, []string{"c1"})
	if err == nil {
		t.Fatalf("B read the thread from the old primary, which lacks the call A left pending: pending %v, call %v",
			v.Thread.PendingCalls, v.calls["c1"])
	}
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, errReplaced) {
		t.Fatalf("B's read from the old primary: %v; want it refused (ErrUnavailable, errReplaced)", err)
	}
	ss.Thaw(t, 2)
	await.For(t, "B to read the call A left pending, from the new primary", func() bool {
		v, err := b.ReadThread(ctx, th, []string{"c1"})
		return err == nil && slices.Equal(v.Thread.PendingCalls, []string{"c1"}) && v.calls["c1"] != nil
	})
}

package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// openClusterStore opens a Store on the cluster c and waits until its
// invalidation subscription is live.
func openClusterStore(t testing.TB, c *redistest.Cluster, opt Options) *Store {
	t.Helper()
	opt.RedisURL, opt.RedisMode = c.URL(), ModeCluster
	s := openStore(t, opt)
	await.For(t, "the invalidation subscription to go live", s.subLive.Load)
	return s
}

// mastersOf returns the addresses of the masters holding the threads' keys.
func mastersOf(t *testing.T, c *redistest.Cluster, threads []string) map[string]bool {
	t.Helper()
	rc := c.Client(t)
	out := map[string]bool{}
	for _, th := range threads {
		slot, err := rc.ClusterKeySlot(context.Background(), threadKey(th)).Result()
		if err != nil {
			t.Fatal(err)
		}
		m, _ := c.MasterOf(t, int(slot))
		out[m.Addr()] = true
	}
	return out
}

// TestTheLedgerWorksAcrossTheMastersOfARedisCluster runs the cross-replica
// ledger on a real Redis Cluster (three masters with a replica each): two
// replicas see each other's writes, lists and the id index cover threads on
// every master, a call approved from both has one winner, approvals time
// out exactly once, and the runs of a replica that left are ended by the
// other.
func TestTheLedgerWorksAcrossTheMastersOfARedisCluster(t *testing.T) {
	c := redistest.SharedCluster(t)
	clk := newClock(time.Now())
	var ea, eb ends
	a := openClusterStore(t, c, Options{Now: clk.now, OnEnd: ea.onEnd, sweep: time.Hour})
	b := openClusterStore(t, c, Options{Now: clk.now, OnEnd: eb.onEnd, sweep: time.Hour})
	ctx := context.Background()

	var threads []string
	deadline := clk.now().Add(time.Minute)
	for i := range 30 {
		th := fmt.Sprintf("thread-%d", i)
		threads = append(threads, th)
		holdUntil(t, a, th, "h", deadline)
	}
	if n := len(mastersOf(t, c, threads)); n != 3 {
		t.Fatalf("the threads live on %d masters, want all 3", n)
	}
	held, err := b.ListCalls(ctx, Filter{Status: StatusRequiresConfirmation})
	if err != nil || len(held) != len(threads) {
		t.Fatalf("B lists %d held calls (%v), want %d", len(held), err, len(threads))
	}
	got, err := b.ThreadsOf(ctx, "h")
	if err != nil || !slices.Equal(got, slices.Sorted(slices.Values(threads))) {
		t.Fatalf("ThreadsOf(h) = %v, %v", got, err)
	}

	// One winner for concurrent approvals from both replicas.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		s := []*Store{a, b}[i%2]
		wg.Go(func() { _, errs[i] = s.update(ctx, Ref{"thread-0", "h"}, approve(fmt.Sprint("reviewer-", i))) })
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, errAlreadyDecided):
			t.Fatalf("approval: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d approvals won, want 1", wins)
	}
	if c := mustGet(t, b, "thread-0", "h"); c.Status != StatusExecuting {
		t.Fatalf("approved call read from B = %s", c.Status)
	}
	if l, _ := a.ListCalls(ctx, Filter{Status: StatusRequiresConfirmation}); len(l) != len(threads)-1 {
		t.Fatalf("after the approval A lists %d held calls, want %d", len(l), len(threads)-1)
	}

	// A terminal record B caches is invalidated by A's rewrite.
	mustPut(t, a, newCall("done", "thread-1", StatusCompleted, t0))
	mustGet(t, b, "thread-1", "done")
	if _, err := a.update(ctx, Ref{"thread-1", "done"}, func(c *ToolCall) error { c.ApprovedBy = "auditor"; return nil }); err != nil {
		t.Fatal(err)
	}
	await.For(t, "B to see A's rewrite of a terminal call", func() bool {
		return mustGet(t, b, "thread-1", "done").ApprovedBy == "auditor"
	})

	// The other held calls time out once, across both replicas' sweeps.
	clk.set(deadline.Add(time.Millisecond))
	for range 3 {
		wg.Go(func() { a.sweep(ctx) })
		wg.Go(func() { b.sweep(ctx) })
		wg.Wait()
	}
	if n := len(ea.list()) + len(eb.list()); n != len(threads)-1 {
		t.Fatalf("%d approvals timed out, want %d", n, len(threads)-1)
	}
	if l, _ := b.ListCalls(ctx, Filter{Status: StatusTimedOut}); len(l) != len(threads)-1 {
		t.Fatalf("B lists %d timed-out calls, want %d", len(l), len(threads)-1)
	}

	// A replica that leaves with a run open: the other ends its calls.
	gone := openClusterStore(t, c, Options{})
	await.For(t, "the first heartbeat", gone.markerSet)
	run := RunRef{ThreadID: "thread-k", RunID: "run-1"}
	gone.RunStarted(run)
	mustPut(t, gone, newCall("open", "thread-k", StatusPending, t0))
	gone.Close()
	b.sweep(ctx)
	if c := mustGet(t, a, "thread-k", "open"); c.Status != StatusCancelled || c.Cause != CauseRunLost {
		t.Fatalf("the left run's call = %s %q", c.Status, c.EndReason)
	}
}

// ledgerTraffic runs runs through two replicas until stop is closed: on
// each of its threads, a worker records a call and the thread listing it
// pending through one replica (as a RUN_FINISHED does), then completes it
// through the other (the next run's answer, a compare-and-set). It returns
// per thread the number of calls it made, and counts the calls done in
// done.
func ledgerTraffic(t *testing.T, a, b *Store, threads []string, stop <-chan struct{}, done *atomic.Int64) func() map[string]int {
	ctx := context.Background()
	made := make(map[string]int, len(threads))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, th := range threads {
		wg.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-stop:
					if k >= 3 {
						return
					}
				default:
				}
				id := "call-" + strconv.Itoa(k)
				c := newCall(id, th, StatusExecuting, t0)
				err := a.PutCallsSync(ctx, []*ToolCall{c}, &Thread{ID: th, PendingCalls: []string{id}})
				if err != nil && !errors.Is(err, ErrQueued) {
					t.Errorf("record %s/%s: %v", th, id, err)
					return
				}
				give := time.Now().Add(20 * time.Second)
				for {
					_, err = b.update(ctx, Ref{th, id}, func(c *ToolCall) error {
						c.end(StatusCompleted, "", "", t0.Add(time.Second))
						return nil
					})
					if err == nil || errors.Is(err, ErrQueued) {
						break
					}
					if time.Now().After(give) {
						t.Errorf("complete %s/%s: %v", th, id, err)
						return
					}
					time.Sleep(10 * time.Millisecond) // A's write still queued
				}
				mu.Lock()
				made[th] = k + 1
				mu.Unlock()
				done.Add(1)
			}
		})
	}
	return func() map[string]int {
		wg.Wait()
		return made
	}
}

// checkNothingLost waits until both replicas have written everything they
// queued, then reads every call and thread through a fresh replica: every
// call completed, every thread listing its last call as pending.
func checkNothingLost(t *testing.T, open func() *Store, made map[string]int, stores ...*Store) {
	t.Helper()
	for _, s := range stores {
		await.For(t, "the replicas' queues to drain", func() bool { return s.up.Load() && s.qlen.Load() == 0 })
	}
	fresh := open()
	ctx := context.Background()
	total := 0
	for th, n := range made {
		for k := range n {
			id := "call-" + strconv.Itoa(k)
			got, err := fresh.GetCall(ctx, Ref{th, id})
			if err != nil || got.Status != StatusCompleted {
				t.Errorf("%s/%s after the traffic: %v %v", th, id, got, err)
			}
			total++
		}
		tt, err := fresh.GetThread(ctx, th)
		if err != nil || !slices.Equal(tt.PendingCalls, []string{"call-" + strconv.Itoa(n-1)}) {
			t.Errorf("thread %s after the traffic: %+v %v", th, tt, err)
		}
	}
	if l, err := fresh.ListCalls(ctx, Filter{Status: StatusCompleted}); err != nil || len(l) != total {
		t.Errorf("the completed list holds %d calls (%v), want %d", len(l), err, total)
	}
	t.Logf("%d calls on %d threads, each recorded through one replica and completed through the other: none lost", total, len(made))
}

// TestAClusterFailoverDuringRunsLosesNothing fails a master over to its
// replica (CLUSTER FAILOVER) while runs write to threads on every master.
func TestAClusterFailoverDuringRunsLosesNothing(t *testing.T) {
	c := redistest.SharedCluster(t)
	a := openClusterStore(t, c, Options{})
	b := openClusterStore(t, c, Options{})
	threads := []string{"f-0", "f-1", "f-2", "f-3", "f-4", "f-5"}
	if n := len(mastersOf(t, c, threads)); n < 2 {
		t.Fatalf("the threads live on %d masters, want several", n)
	}
	stop := make(chan struct{})
	var done atomic.Int64
	wait := ledgerTraffic(t, a, b, threads, stop, &done)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(stop) }); wait() })

	rc := c.Client(t)
	ctx := context.Background()
	slot, err := rc.ClusterKeySlot(ctx, threadKey(threads[0])).Result()
	if err != nil {
		t.Fatal(err)
	}
	old, replica := c.MasterOf(t, int(slot))
	if replica == nil {
		t.Fatal("the thread's master has no replica")
	}
	c.Failover(t, replica)
	t.Logf("slot %d failed over from %s to %s during the runs", slot, old.Addr(), replica.Addr())
	after := done.Load()
	await.For(t, "runs to go on against the new master", func() bool { return done.Load() >= after+50 })
	once.Do(func() { close(stop) })
	checkNothingLost(t, func() *Store { return openClusterStore(t, c, Options{}) }, wait(), a, b)
}

// TestReshardingAThreadsSlotDuringRunsLosesNothing moves the slot one
// thread lives in to another master (CLUSTER SETSLOT IMPORTING/MIGRATING,
// MIGRATE of its keys, SETSLOT NODE) while runs write to it.
func TestReshardingAThreadsSlotDuringRunsLosesNothing(t *testing.T) {
	c := redistest.SharedCluster(t)
	a := openClusterStore(t, c, Options{})
	b := openClusterStore(t, c, Options{})
	threads := []string{"r-0", "r-1", "r-2", "r-3"}
	stop := make(chan struct{})
	var done atomic.Int64
	wait := ledgerTraffic(t, a, b, threads, stop, &done)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(stop) }); wait() })

	ctx := context.Background()
	rc := c.Client(t)
	slot, err := rc.ClusterKeySlot(ctx, threadKey(threads[0])).Result()
	if err != nil {
		t.Fatal(err)
	}
	src, _ := c.MasterOf(t, int(slot))
	var dst *redistest.Server
	for _, m := range c.Masters(t) {
		if m != src {
			dst = m
			break
		}
	}
	srcc, dstc := c.Node(t, src), c.Node(t, dst)
	srcID, _ := srcc.Do(ctx, "CLUSTER", "MYID").Text()
	dstID, _ := dstc.Do(ctx, "CLUSTER", "MYID").Text()
	await.For(t, "keys of the thread on its master", func() bool {
		n, _ := srcc.Do(ctx, "CLUSTER", "COUNTKEYSINSLOT", slot).Int()
		return n >= 3
	})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(dstc.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	must(srcc.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	dhost, dport := dst.Addr()[:len("127.0.0.1")], dst.Addr()[len("127.0.0.1:"):]
	moved := 0
	for {
		keys, err := srcc.Do(ctx, "CLUSTER", "GETKEYSINSLOT", slot, 100).StringSlice()
		must(err)
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", dhost, dport, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must(srcc.Do(ctx, args...).Err())
		moved += len(keys)
	}
	for _, m := range c.Masters(t) {
		must(c.Node(t, m).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
	}
	t.Logf("slot %d moved from %s to %s during the runs (%d keys migrated)", slot, src.Addr(), dst.Addr(), moved)
	if m, _ := c.MasterOf(t, int(slot)); m != dst {
		t.Fatalf("slot %d is served by %s after the move", slot, m.Addr())
	}
	after := done.Load()
	await.For(t, "runs to go on against the slot's new owner", func() bool { return done.Load() >= after+50 })
	once.Do(func() { close(stop) })
	checkNothingLost(t, func() *Store { return openClusterStore(t, c, Options{}) }, wait(), a, b)
}

// TestASentinelFailoverDuringRunsLosesNothing runs the ledger on a primary
// found through three real redis-sentinel processes (--redis-mode
// sentinel) and fails it over with SENTINEL FAILOVER during runs.
func TestASentinelFailoverDuringRunsLosesNothing(t *testing.T) {
	ss := redistest.StartSentinels(t)
	open := func() *Store {
		s := openStore(t, Options{RedisURL: ss.URL(), RedisMode: ModeSentinel})
		await.For(t, "the invalidation subscription to go live", s.subLive.Load)
		return s
	}
	a, b := open(), open()
	threads := []string{"s-0", "s-1", "s-2", "s-3"}
	stop := make(chan struct{})
	var done atomic.Int64
	wait := ledgerTraffic(t, a, b, threads, stop, &done)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(stop) }); wait() })
	await.For(t, "runs before the failover", func() bool { return done.Load() >= 50 })
	for name, s := range map[string]*Store{"A": a, "B": b} {
		if n := metricValue(t, s.met.dataLost.WithLabelValues(string(causeRestart))); n != 0 {
			t.Fatalf("%s counted %v losses before the failover", name, n)
		}
	}

	old := ss.Primary.Addr()
	failedOver := time.Now()
	ss.Failover(t)
	t.Logf("sentinels failed the primary over from %s to %s during the runs", old, ss.Primary.Addr())
	after := done.Load()
	await.Within(t, 30*time.Second, "runs to go on against the new primary", func() bool { return done.Load() >= after+50 })
	once.Do(func() { close(stop) })
	// Writes the old primary took after the sentinels promoted its replica
	// are gone once it follows the new one: each replica sees the new
	// primary's run_id, counts a loss and writes back what it holds.
	for _, s := range []*Store{a, b} {
		await.For(t, "each replica to see the failover and write back", func() bool {
			s.loss.mu.Lock()
			defer s.loss.mu.Unlock()
			return s.loss.detected.After(failedOver) && s.loss.cause == causeRestart && !s.loss.pending && !s.loss.writing
		})
	}
	written := func(s *Store) int { s.loss.mu.Lock(); defer s.loss.mu.Unlock(); return s.loss.written }
	t.Logf("written back after the failover: %d and %d records and threads", written(a), written(b))
	checkNothingLost(t, open, wait(), a, b)
}

// failedPipelines is a go-redis hook that reports, on its channel, every
// pipeline holding a command named one of names that failed (but for
// NOSCRIPT, which a script's first call on a master gets at once).
type failedPipelines struct {
	names []string
	ch    chan error
}

func (h failedPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h failedPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h failedPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err != nil && !isNoScript(err) && slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return slices.Contains(h.names, c.Name()) }) {
			select {
			case h.ch <- err:
			default:
			}
		}
		return err
	}
}

// TestOnAClusterARunIsRegisteredBeforeItsRecordsAndWithdrawnAfter: the
// writer sends a run's registration ahead of its records and its
// withdrawal behind them, which on one Redis one pipeline keeps in order.
// A Redis Cluster's client sends a pipeline to each master at once, in no
// order between them: with the master of the registry paused (CLIENT
// PAUSE WRITE), a record of a run on another master must not reach Redis
// while its registration has not (a replica dying then would leave the
// call open for good, with no run for another replica to end); with the
// thread's master paused, the withdrawal must not reach Redis before the
// record that ends the call.
func TestOnAClusterARunIsRegisteredBeforeItsRecordsAndWithdrawnAfter(t *testing.T) {
	c := redistest.SharedCluster(t)
	ctx := context.Background()
	hset := failedPipelines{[]string{"hset"}, make(chan error, 8)}
	script := failedPipelines{[]string{"evalsha", "eval"}, make(chan error, 8)}
	s := openClusterStore(t, c, Options{Hooks: []redis.Hook{hset, script}})
	rc := c.Client(t)
	masterOf := func(key string) *redistest.Server {
		slot, err := rc.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		m, _ := c.MasterOf(t, int(slot))
		return m
	}
	registry := masterOf(s.ks.runsKey(s.origin))
	thread := ""
	for i := 0; thread == ""; i++ {
		if th := "order-" + strconv.Itoa(i); masterOf(threadKey(th)) != registry {
			thread = th
		}
	}
	pause := func(m *redistest.Server) (unpause func()) {
		t.Helper()
		n := c.Node(t, m)
		if err := n.Do(ctx, "CLIENT", "PAUSE", 60_000, "WRITE").Err(); err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		unpause = func() { once.Do(func() { n.Do(ctx, "CLIENT", "UNPAUSE") }) }
		t.Cleanup(unpause)
		return unpause
	}
	run := RunRef{ThreadID: thread, RunID: "run-1"}
	r := Ref{thread, "call-1"}
	registered := func() bool { return rc.HExists(ctx, s.ks.runsKey(s.origin), runMember(run)).Val() }
	stored := func() *ToolCall {
		d, err := rc.HGet(ctx, callKey(r), "d").Result()
		if err != nil {
			return nil
		}
		var c ToolCall
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatal(err)
		}
		return &c
	}
	drained := func() bool { return s.up.Load() && s.qlen.Load() == 0 }
	// The writer may take the first write alone: by its second try it has
	// both in one batch.
	twoFailures := func(h failedPipelines, what string) {
		t.Helper()
		for i := range 2 {
			select {
			case err := <-h.ch:
				t.Logf("try %d of the %s failed: %v", i+1, what, err)
			case <-time.After(time.Minute):
				t.Fatalf("no write of the %s failed while its master was paused", what)
			}
		}
	}

	// Every master has the scripts (a NOSCRIPT would stop the write
	// without a pause).
	if err := s.Record([]*ToolCall{newCall("warm", thread, StatusCompleted, t0)}, nil); err != nil {
		t.Fatal(err)
	}
	await.For(t, "the writes to drain", drained)

	// The registry's master is paused: the run starts and its call is
	// recorded.
	unpause := pause(registry)
	s.RunStarted(run)
	if err := s.Record([]*ToolCall{newCall(r.ID, r.ThreadID, StatusExecuting, t0)}, nil); err != nil {
		t.Fatal(err)
	}
	twoFailures(hset, "registration")
	if c := stored(); c != nil {
		t.Fatalf("the call reached Redis (%s) before the run's registration did", c.Status)
	}
	unpause()
	await.For(t, "the writes to drain", drained)
	if c := stored(); !registered() || c == nil || c.Status != StatusExecuting {
		t.Fatalf("after the pause: registered %v, call %+v", registered(), c)
	}

	// The thread's master is paused: the call ends and the run is
	// withdrawn.
	unpause = pause(masterOf(threadKey(thread)))
	ended := newCall(r.ID, r.ThreadID, StatusCompleted, t0)
	if err := s.Record([]*ToolCall{ended}, nil); err != nil {
		t.Fatal(err)
	}
	s.RunEnded(run)
	twoFailures(script, "record")
	if !registered() {
		t.Fatal("the run was withdrawn before the record that ends its call reached Redis")
	}
	unpause()
	await.For(t, "the writes to drain", drained)
	if c := stored(); registered() || c == nil || c.Status != StatusCompleted {
		t.Fatalf("after the pause: registered %v, call %+v", registered(), c)
	}
}

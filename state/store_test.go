package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/redistest"
)

// openStore opens a Store and closes it at cleanup.
func openStore(t testing.TB, opt Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), opt)
	if err != nil {
		t.Fatalf("Open(%+v): %v", opt, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// openRedisStore opens a Store on srv and waits until its invalidation
// subscription is live.
func openRedisStore(t testing.TB, srv *redistest.Server, opt Options) *Store {
	t.Helper()
	opt.RedisURL = srv.URL()
	s := openStore(t, opt)
	await.For(t, "the invalidation subscription to go live", s.subLive.Load)
	return s
}

// rawClient is a plain go-redis client on srv, for looking behind the Store.
func rawClient(t testing.TB, srv *redistest.Server) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// metricValue reads a counter or gauge.
func metricValue(t testing.TB, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

func newCall(id, thread string, st Status, created time.Time) *ToolCall {
	return &ToolCall{
		ID: id, Name: "tool", Status: st, ThreadID: thread, RunID: "run-1",
		ArgumentsJSON: json.RawMessage(`{"n":1}`), IsClientTool: true, CreatedAt: created,
	}
}

func mustPut(t testing.TB, s *Store, c *ToolCall) {
	t.Helper()
	if err := s.PutCall(context.Background(), c); err != nil {
		t.Fatalf("PutCall(%s): %v", c.ID, err)
	}
}

func mustGet(t testing.TB, s *Store, thread, id string) *ToolCall {
	t.Helper()
	c, err := s.GetCall(context.Background(), Ref{thread, id})
	if err != nil {
		t.Fatalf("GetCall(%s, %s): %v", thread, id, err)
	}
	return c
}

func ids(calls []*ToolCall) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = c.ID
	}
	return out
}

var errAlreadyDecided = errors.New("already decided")

// approve is the approve-once update the admin API makes.
func approve(by string) func(c *ToolCall) error {
	return func(c *ToolCall) error {
		if c.Approved != nil {
			return errAlreadyDecided
		}
		c.Approved, c.ApprovedBy, c.Status = ptr(true), by, StatusExecuting
		return nil
	}
}

// storeKinds runs f against a memory-only Store and a Redis-backed one.
func storeKinds(t *testing.T, f func(t *testing.T, s *Store)) {
	t.Run("memory", func(t *testing.T) { f(t, openStore(t, Options{})) })
	t.Run("redis", func(t *testing.T) { f(t, openRedisStore(t, redistest.Start(t), Options{})) })
}

func TestStoreRoundTripsCallsAndThreads(t *testing.T) {
	storeKinds(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		in := fullCall()
		mustPut(t, s, in)
		in.Name = "mutated after PutCall" // the Store holds its own copy
		got := mustGet(t, s, "thread-1", "call-1")
		if got.Name != "get_weather" || got.EndReason != "approval rejected" || got.UpdatedAt.IsZero() {
			t.Errorf("GetCall = %+v", got)
		}
		got.ApprovedBy = "mutated after GetCall" // and hands out copies
		if again := mustGet(t, s, "thread-1", "call-1"); again.ApprovedBy != "alice@example.com" {
			t.Errorf("a caller's change leaked into the store: %q", again.ApprovedBy)
		}
		if _, err := s.GetCall(ctx, Ref{"thread-1", "nope"}); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetCall(unknown) error = %v, want ErrNotFound", err)
		}

		th, err := s.GetThread(ctx, "never-seen")
		if err != nil || th.ID != "never-seen" || th.PendingCalls != nil || th.LastRunID != "" {
			t.Errorf("GetThread(never seen) = %+v, %v; want an empty thread", th, err)
		}
		want := &Thread{ID: "t1", PendingCalls: []string{"a", "b"}, LastRunID: "r1",
			Interrupts: []Interrupt{{ID: "i1", ExpiresAt: "2026-03-01T13:00:00Z"}}}
		if err := s.PutThread(ctx, want); err != nil {
			t.Fatal(err)
		}
		got2, err := s.GetThread(ctx, "t1")
		if err != nil || !slices.Equal(got2.PendingCalls, want.PendingCalls) || got2.LastRunID != "r1" ||
			!slices.Equal(got2.Interrupts, want.Interrupts) || got2.UpdatedAt.IsZero() {
			t.Errorf("GetThread = %+v, %v; want %+v", got2, err, want)
		}
	})
}

func TestStoreRefusesInvalidInput(t *testing.T) {
	storeKinds(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		for _, err := range []error{
			s.PutCall(ctx, nil),
			s.PutCall(ctx, &ToolCall{Status: StatusPending}),
			s.PutCall(ctx, &ToolCall{ID: "c", Status: "DONE"}),
			s.PutThread(ctx, &Thread{}),
			s.PutCallsSync(ctx, []*ToolCall{newCall("ok", "t", StatusPending, t0), {ID: "bad"}}, nil),
		} {
			if !errors.Is(err, errInvalid) {
				t.Errorf("error = %v, want invalid input", err)
			}
		}
		if _, err := s.GetCall(ctx, Ref{"t", "ok"}); !errors.Is(err, ErrNotFound) {
			t.Errorf("a refused PutCallsSync wrote part of its input: %v", err)
		}
		mustPut(t, s, newCall("c", "t", StatusPending, t0))
		_, err := s.update(ctx, Ref{"t", "c"}, func(c *ToolCall) error { c.ID = "other"; return nil })
		if !errors.Is(err, errInvalid) || !strings.Contains(err.Error(), `"other"`) {
			t.Errorf("UpdateCall changing the id: %v", err)
		}
		if _, err := s.ListCalls(ctx, Filter{Status: "DONE"}); err == nil || !strings.Contains(err.Error(), `"DONE"`) {
			t.Errorf("ListCalls(bad status) = %v", err)
		}
	})
}

func TestUpdateCallAppliesFnOrReturnsItsError(t *testing.T) {
	storeKinds(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		mustPut(t, s, newCall("c", "t", StatusRequiresConfirmation, t0))
		got, err := s.update(ctx, Ref{"t", "c"}, approve("bob"))
		if err != nil || got.ApprovedBy != "bob" || got.Status != StatusExecuting || !*got.Approved {
			t.Fatalf("UpdateCall(approve) = %+v, %v", got, err)
		}
		if stored := mustGet(t, s, "t", "c"); stored.ApprovedBy != "bob" {
			t.Errorf("stored approvedBy = %q", stored.ApprovedBy)
		}
		_, err = s.update(ctx, Ref{"t", "c"}, approve("carol"))
		if !errors.Is(err, errAlreadyDecided) || !strings.Contains(err.Error(), `"c"`) {
			t.Errorf("second approval error = %v, want errAlreadyDecided wrapped with the id", err)
		}
		if _, err := s.update(ctx, Ref{"t", "missing"}, approve("x")); !errors.Is(err, ErrNotFound) {
			t.Errorf("UpdateCall(missing) = %v, want ErrNotFound", err)
		}
	})
}

func TestListCallsFiltersByThreadAndStatusSortedByCreation(t *testing.T) {
	storeKinds(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		for _, c := range []*ToolCall{
			newCall("c3", "t1", StatusRequiresConfirmation, t0.Add(3*time.Second)),
			newCall("c1", "t1", StatusExecuting, t0.Add(1*time.Second)),
			newCall("c2", "t2", StatusRequiresConfirmation, t0.Add(2*time.Second)),
			newCall("c4", "t2", StatusCompleted, t0.Add(4*time.Second)),
			newCall("c0", "t1", StatusCompleted, t0),
		} {
			mustPut(t, s, c)
		}
		tests := []struct {
			f    Filter
			want []string
		}{
			{Filter{}, []string{"c0", "c1", "c2", "c3", "c4"}},
			{Filter{ThreadID: "t1"}, []string{"c0", "c1", "c3"}},
			{Filter{Status: StatusRequiresConfirmation}, []string{"c2", "c3"}},
			{Filter{ThreadID: "t2", Status: StatusRequiresConfirmation}, []string{"c2"}},
			{Filter{Status: "TOOL_EXECUTION_STATUS_SUCCESS"}, []string{"c0", "c4"}},
			{Filter{Status: "3"}, []string{"c0", "c4"}},
			{Filter{ThreadID: "t3"}, []string{}},
		}
		check := func() {
			t.Helper()
			for _, tt := range tests {
				got, err := s.ListCalls(ctx, tt.f)
				if err != nil || !slices.Equal(ids(got), tt.want) {
					t.Errorf("ListCalls(%+v) = %v, %v; want %v", tt.f, ids(got), err, tt.want)
				}
			}
		}
		check()
		// A status change moves the call between status indexes.
		if _, err := s.update(ctx, Ref{"t1", "c3"}, approve("bob")); err != nil {
			t.Fatal(err)
		}
		tests[2].want = []string{"c2"}
		check()
		if got, _ := s.ListCalls(ctx, Filter{Status: StatusExecuting}); !slices.Equal(ids(got), []string{"c1", "c3"}) {
			t.Errorf("EXECUTING after approval = %v", ids(got))
		}
	})
}

func TestRedisKeysFollowTheDocumentedLayoutAndExpire(t *testing.T) {
	srv := redistest.Start(t)
	s := openRedisStore(t, srv, Options{TTL: time.Hour})
	await.For(t, "the first heartbeat", s.markerSet)
	ctx := context.Background()
	before := time.Now().UnixMilli()
	if err := s.PutCallsSync(ctx, []*ToolCall{newCall("c1", "t1", StatusExecuting, t0)},
		&Thread{ID: "t1", PendingCalls: []string{"c1"}}); err != nil {
		t.Fatal(err)
	}
	// A thread id with the characters that delimit a hash tag, and the
	// escape character itself, keeps one tag of its own.
	mustPut(t, s, newCall("x", "a}b{%c", StatusCompleted, t0))
	rc := rawClient(t, srv)
	keys, err := rc.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	ledger := []string{
		"aguard:ids:c1", "aguard:ids:x",
		"aguard:status:TOOL_EXECUTION_STATUS_COMPLETED", "aguard:status:TOOL_EXECUTION_STATUS_EXECUTING",
		"aguard:{a%7Db%7B%25c}:call:x", "aguard:{a%7Db%7B%25c}:calls",
		"aguard:{t1}:call:c1", "aguard:{t1}:calls", "aguard:{t1}:thread",
	}
	want := slices.Sorted(slices.Values(append(slices.Clone(ledger), "aguard:replica:"+s.origin, "aguard:replicas", "aguard:primary")))
	if !slices.Equal(keys, want) {
		t.Errorf("keys = %v, want %v", keys, want)
	}
	for _, k := range append(ledger, "aguard:replica:"+s.origin) {
		if ttl := rc.PTTL(ctx, k).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
			t.Errorf("PTTL(%s) = %v, want about 1h", k, ttl)
		}
	}
	h := rc.HGetAll(ctx, "aguard:{t1}:call:c1").Val()
	v, err := strconv.ParseInt(h["v"], 10, 64)
	if err != nil || v < before || h["s"] != string(StatusExecuting) || !strings.HasPrefix(h["d"], `{"id":"c1"`) || h["o"] != s.origin || len(h) != 4 {
		t.Errorf("record hash = %v; want v (a version past the write's time in ms), s, d and o (its writer)", h)
	}
	if m := rc.ZRange(ctx, "aguard:status:TOOL_EXECUTION_STATUS_EXECUTING", 0, -1).Val(); !slices.Equal(m, []string{`["t1","c1"]`}) {
		t.Errorf("status index members = %q", m)
	}
	if m := rc.ZRange(ctx, "aguard:ids:x", 0, -1).Val(); !slices.Equal(m, []string{"a}b{%c"}) {
		t.Errorf("id index members = %q", m)
	}
}

func TestTwoStoresSharingRedisSeeEachOthersWrites(t *testing.T) {
	srv := redistest.Start(t)
	a := openRedisStore(t, srv, Options{})
	b := openRedisStore(t, srv, Options{})
	ctx := context.Background()

	mustPut(t, a, newCall("c", "t", StatusRequiresConfirmation, t0))
	if got := mustGet(t, b, "t", "c"); got.Status != StatusRequiresConfirmation {
		t.Fatalf("B read status %s after A's write", got.Status)
	}
	// B has it cached now; A's approval must still be what B reads next.
	if _, err := a.update(ctx, Ref{"t", "c"}, approve("alice")); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, b, "t", "c"); got.ApprovedBy != "alice" || got.Status != StatusExecuting {
		t.Fatalf("B read %s by %q after A approved", got.Status, got.ApprovedBy)
	}
	// And the other way round, through UpdateCall on B.
	if _, err := b.update(ctx, Ref{"t", "c"}, func(c *ToolCall) error { c.end(StatusCompleted, "", "", t0.Add(time.Second)); return nil }); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, a, "t", "c"); got.Status != StatusCompleted || got.ExecutionDuration != "1.000s" {
		t.Fatalf("A read %s %q after B completed the call", got.Status, got.ExecutionDuration)
	}
	// Threads too.
	if err := a.PutThread(ctx, &Thread{ID: "t", PendingCalls: []string{"c"}}); err != nil {
		t.Fatal(err)
	}
	if th, err := b.GetThread(ctx, "t"); err != nil || !slices.Equal(th.PendingCalls, []string{"c"}) {
		t.Fatalf("B's thread = %+v, %v", th, err)
	}
	if err := b.PutThread(ctx, &Thread{ID: "t", LastRunID: "r2"}); err != nil {
		t.Fatal(err)
	}
	if th, err := a.GetThread(ctx, "t"); err != nil || th.PendingCalls != nil || th.LastRunID != "r2" {
		t.Fatalf("A's thread after B's write = %+v, %v", th, err)
	}
}

func TestTerminalCallsAreServedFromLRUAndInvalidatedByOtherReplicas(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	a := openRedisStore(t, srv, Options{})
	b := openRedisStore(t, srv, Options{Registerer: reg})
	ctx := context.Background()

	done := newCall("done", "t", StatusCompleted, t0)
	mustPut(t, a, done)
	mustGet(t, b, "t", "done") // miss: read from Redis and cached
	hits := metricValue(t, b.met.cacheHits)
	mustGet(t, b, "t", "done")
	if got := metricValue(t, b.met.cacheHits); got != hits+1 {
		t.Errorf("second read of a terminal call: cache hits %v -> %v, want a hit", hits, got)
	}
	// A rewrites the terminal record; B's copy is invalidated by pub/sub
	// within moments.
	if _, err := a.update(ctx, Ref{"t", "done"}, func(c *ToolCall) error { c.ApprovedBy = "auditor"; return nil }); err != nil {
		t.Fatal(err)
	}
	await.For(t, "B to see A's rewrite of a terminal call", func() bool {
		return mustGet(t, b, "t", "done").ApprovedBy == "auditor"
	})
	// A live call is never served from B's LRU while Redis is up.
	mustPut(t, a, newCall("live", "t", StatusExecuting, t0))
	mustGet(t, b, "t", "live")
	misses := metricValue(t, b.met.cacheMisses)
	mustGet(t, b, "t", "live")
	if got := metricValue(t, b.met.cacheMisses); got != misses+1 {
		t.Errorf("second read of a live call: cache misses %v -> %v, want a Redis read", misses, got)
	}
	// With Redis gone, B answers from memory: the terminal call as it was,
	// the live one as last read, and readiness says degraded.
	srv.Stop()
	if got := mustGet(t, b, "t", "done"); got.ApprovedBy != "auditor" {
		t.Errorf("cached terminal call = %+v", got)
	}
	if got := mustGet(t, b, "t", "live"); got.Status != StatusExecuting {
		t.Errorf("degraded read of a live call = %+v", got)
	}
	if ok, reason := b.Ready(); !ok || !strings.HasPrefix(reason, "degraded: redis unreachable: ") {
		t.Errorf("Ready() = %v, %q; want degraded", ok, reason)
	}
}

func TestConcurrentUpdateCallsAcrossReplicasLoseNothing(t *testing.T) {
	srv := redistest.Start(t)
	stores := []*Store{openRedisStore(t, srv, Options{}), openRedisStore(t, srv, Options{})}
	ctx := context.Background()
	mustPut(t, stores[0], &ToolCall{ID: "n", Status: StatusExecuting, DecisionID: "0"})

	const workers, each = 4, 25
	var wg sync.WaitGroup
	for i := range workers {
		s := stores[i%len(stores)]
		wg.Go(func() {
			for range each {
				_, err := s.update(ctx, Ref{"", "n"}, func(c *ToolCall) error {
					n, err := strconv.Atoi(c.DecisionID)
					c.DecisionID = strconv.Itoa(n + 1)
					return err
				})
				if err != nil {
					t.Errorf("UpdateCall: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, s := range stores {
		if got := mustGet(t, s, "", "n").DecisionID; got != strconv.Itoa(workers*each) {
			t.Errorf("counter = %s after %d increments", got, workers*each)
		}
	}
	conflicts := 0.0
	for _, s := range stores {
		conflicts += metricValue(t, s.met.writes.WithLabelValues(writeConflict))
	}
	t.Logf("%d increments from 2 replicas needed %v retries", workers*each, conflicts)
}

func TestConcurrentApprovalsAcrossReplicasHaveExactlyOneWinner(t *testing.T) {
	srv := redistest.Start(t)
	a, b := openRedisStore(t, srv, Options{}), openRedisStore(t, srv, Options{})
	ctx := context.Background()
	for round := range 20 {
		id := fmt.Sprintf("c%d", round)
		mustPut(t, a, newCall(id, "t", StatusRequiresConfirmation, t0))
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			s := []*Store{a, b}[i%2]
			wg.Go(func() { _, errs[i] = s.update(ctx, Ref{"t", id}, approve(fmt.Sprint("reviewer-", i))) })
		}
		wg.Wait()
		wins, winner := 0, ""
		for i, err := range errs {
			switch {
			case err == nil:
				wins++
				winner = fmt.Sprint("reviewer-", i)
			case !errors.Is(err, errAlreadyDecided):
				t.Errorf("round %d: unexpected error %v", round, err)
			}
		}
		if wins != 1 {
			t.Fatalf("round %d: %d approvals won, want exactly 1", round, wins)
		}
		if got := mustGet(t, b, "t", id).ApprovedBy; got != winner {
			t.Errorf("round %d: stored approver %q, winner %q", round, got, winner)
		}
	}
}

func TestPutCallsSyncReturnsOnceRedisHasEverything(t *testing.T) {
	srv := redistest.Start(t)
	s := openRedisStore(t, srv, Options{})
	ctx := context.Background()
	calls := []*ToolCall{newCall("p1", "t", StatusExecuting, t0), newCall("p2", "t", StatusExecuting, t0.Add(time.Second))}
	if err := s.PutCallsSync(ctx, calls, &Thread{ID: "t", PendingCalls: []string{"p1", "p2"}, LastRunID: "r"}); err != nil {
		t.Fatalf("PutCallsSync: %v", err)
	}
	rc := rawClient(t, srv)
	for _, k := range []string{"aguard:{t}:call:p1", "aguard:{t}:call:p2", "aguard:{t}:thread"} {
		if n := rc.Exists(ctx, k).Val(); n != 1 {
			t.Errorf("%s missing from Redis when PutCallsSync returned", k)
		}
	}
	if err := s.PutCallsSync(ctx, nil, nil); err != nil {
		t.Errorf("empty PutCallsSync: %v", err)
	}
}

func TestRedisOutageQueuesWritesAndRestartDeliversThemAll(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	s := openRedisStore(t, srv, Options{Registerer: reg, lossHold: 300 * time.Millisecond})
	ctx := context.Background()
	mustPut(t, s, newCall("before", "t", StatusRequiresConfirmation, t0))
	if ok, reason := s.Ready(); !ok || reason != "" {
		t.Fatalf("Ready() = %v, %q before the outage", ok, reason)
	}

	srv.Stop()
	start := time.Now()
	mustPut(t, s, newCall("w1", "t", StatusExecuting, t0.Add(1*time.Second))) // finds Redis gone
	if ok, reason := s.Ready(); !ok || !strings.HasPrefix(reason, "degraded: redis unreachable: ") {
		t.Fatalf("Ready() = %v, %q during the outage", ok, reason)
	}
	if metricValue(t, s.met.redisUp) != 0 {
		t.Error("aguard_state_redis_up is not 0 during the outage")
	}
	mustPut(t, s, newCall("w2", "t", StatusExecuting, t0.Add(2*time.Second)))
	err := s.PutCallsSync(ctx, []*ToolCall{newCall("w3", "t", StatusExecuting, t0.Add(3*time.Second))},
		&Thread{ID: "t", PendingCalls: []string{"w1", "w2", "w3"}, LastRunID: "r2"})
	if !errors.Is(err, ErrQueued) {
		t.Errorf("PutCallsSync during the outage = %v, want ErrQueued", err)
	}
	got, err := s.update(ctx, Ref{"t", "before"}, approve("bob"))
	if !errors.Is(err, ErrQueued) || got == nil || got.ApprovedBy != "bob" {
		t.Errorf("UpdateCall during the outage = %+v, %v; want the record and ErrQueued", got, err)
	}
	mustPut(t, s, newCall("w2", "t", StatusCompleted, t0.Add(2*time.Second))) // supersedes the queued w2
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("writes during the outage took %v; they must not wait for Redis", elapsed)
	}
	// Reads are served from memory meanwhile.
	if c := mustGet(t, s, "t", "w2"); c.Status != StatusCompleted {
		t.Errorf("GetCall(w2) during the outage = %s", c.Status)
	}
	if th, err := s.GetThread(ctx, "t"); err != nil || th.LastRunID != "r2" {
		t.Errorf("GetThread during the outage = %+v, %v", th, err)
	}
	if l, err := s.ListCalls(ctx, Filter{ThreadID: "t"}); err != nil || !slices.Equal(ids(l), []string{"before", "w1", "w2", "w3"}) {
		t.Errorf("ListCalls during the outage = %v, %v", ids(l), err)
	}
	if _, err := s.GetCall(ctx, Ref{"t", "never-written"}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("GetCall of an unknown id during the outage = %v, want ErrUnavailable", err)
	}
	if d := metricValue(t, s.met.queueDepth); d != 5 {
		t.Errorf("queue depth = %v, want 5 (w1, w2, w3, thread t, before)", d)
	}

	srv.Restart() // empty: nothing from before the outage survives in Redis
	// That is a loss: degraded until it is written back, and for at least
	// the loss hold (shortened here), then ok again.
	// Awaited as counted, not as reported by Ready: the degraded window
	// (300 ms here) may be over before a loaded machine polls again, and
	// TestFlushallIsDetectedAndWrittenBack checks what Ready reports in it.
	await.For(t, "the loss to be counted", func() bool {
		n := 0.0
		for _, c := range []lossCause{causeMarker, causeRestart, causeEviction, causeMissing} {
			n += metricValue(t, s.met.dataLost.WithLabelValues(string(c)))
		}
		return n >= 1
	})
	await.For(t, "the queue to drain and readiness to recover", func() bool {
		ok, reason := s.Ready()
		return ok && reason == "" && metricValue(t, s.met.queueDepth) == 0
	})
	if metricValue(t, s.met.redisUp) != 1 {
		t.Error("aguard_state_redis_up is not 1 after recovery")
	}
	// Another replica, with an empty LRU, finds everything in Redis.
	other := openRedisStore(t, srv, Options{})
	want := map[string]Status{"w1": StatusExecuting, "w2": StatusCompleted, "w3": StatusExecuting, "before": StatusExecuting}
	for id, st := range want {
		if c := mustGet(t, other, "t", id); c.Status != st {
			t.Errorf("after recovery %s is %s, want %s", id, c.Status, st)
		}
	}
	if c := mustGet(t, other, "t", "before"); c.ApprovedBy != "bob" {
		t.Errorf("the approval made during the outage was lost: %+v", c)
	}
	if th, err := other.GetThread(ctx, "t"); err != nil || !slices.Equal(th.PendingCalls, []string{"w1", "w2", "w3"}) {
		t.Errorf("thread after recovery = %+v, %v", th, err)
	}
	if l, err := other.ListCalls(ctx, Filter{ThreadID: "t"}); err != nil || len(l) != 4 {
		t.Errorf("ListCalls after recovery = %v, %v", ids(l), err)
	}
	if n := metricValue(t, s.met.dropped); n != 0 {
		t.Errorf("%v writes dropped", n)
	}
	// And writes go straight to Redis again.
	if err := s.PutCallsSync(ctx, []*ToolCall{newCall("after", "t", StatusExecuting, t0)}, nil); err != nil {
		t.Errorf("PutCallsSync after recovery: %v", err)
	}
}

func TestQueueKeepsTheNewestWritesAndCountsDrops(t *testing.T) {
	srv := redistest.Start(t)
	link := srv.Link(t) // a partition, not a loss: Redis keeps its data
	s := openStore(t, Options{RedisURL: link.URL(), QueueSize: 3})
	await.For(t, "the invalidation subscription to go live", s.subLive.Load)
	link.Cut()
	for i := range 5 {
		mustPut(t, s, newCall(fmt.Sprint("q", i), "t", StatusExecuting, t0))
	}
	mustPut(t, s, newCall("q4", "t", StatusCompleted, t0)) // same key: replaces, no drop
	if d, n := metricValue(t, s.met.queueDepth), metricValue(t, s.met.dropped); d != 3 || n != 2 {
		t.Fatalf("queue depth %v, dropped %v; want 3 and 2", d, n)
	}
	w := &waiter{remaining: 1, done: make(chan struct{})}
	s.enqueue([]*item{{call: &ToolCall{ID: "q5", Status: StatusPending}}}, nil)
	s.enqueue([]*item{{call: &ToolCall{ID: "q6", Status: StatusPending}}}, w)
	select {
	case <-w.done:
		t.Fatal("waiter finished while its write is still queued")
	default:
	}
	link.Heal()
	await.For(t, "the queue to drain", func() bool { return metricValue(t, s.met.queueDepth) == 0 })
	<-w.done
	other := openRedisStore(t, srv, Options{})
	for _, id := range []string{"q0", "q1", "q2", "q3"} {
		if _, err := other.GetCall(context.Background(), Ref{"t", id}); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: %v, want it dropped (only the 3 newest writes are kept)", id, err)
		}
	}
	if c := mustGet(t, other, "t", "q4"); c.Status != StatusCompleted {
		t.Errorf("q4 = %s, want its latest write", c.Status)
	}
	mustGet(t, other, "", "q5")
	mustGet(t, other, "", "q6")
	if n := metricValue(t, s.met.dropped); n != 4 {
		t.Errorf("dropped = %v, want 4", n)
	}
}

func TestOpenWithRedisDownStartsDegradedAndRecovers(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	s := openStore(t, Options{RedisURL: srv.URL()})
	if ok, reason := s.Ready(); !ok || !strings.HasPrefix(reason, "degraded: redis unreachable: ") {
		t.Fatalf("Ready() = %v, %q with Redis down at Open", ok, reason)
	}
	mustPut(t, s, newCall("c", "t", StatusExecuting, t0))
	srv.Restart()
	await.For(t, "recovery", func() bool { _, reason := s.Ready(); return reason == "" && s.qlen.Load() == 0 })
	if c := mustGet(t, openRedisStore(t, srv, Options{}), "t", "c"); c.ID != "c" {
		t.Errorf("GetCall = %+v", c)
	}
}

func TestOpenRejectsMalformedRedisURLWithoutLeakingThePassword(t *testing.T) {
	for _, u := range []string{
		"http://127.0.0.1:6379",
		"redis://:s3cret@127.0.0.1:6379/notadb",
		"redis://:s3cret@127.0.0.1:port",
		"redis://user:s3cret@[::1",
	} {
		s, err := Open(context.Background(), Options{RedisURL: u})
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", u)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q) error leaks the password: %v", u, err)
		}
	}
}

func TestOpenReportsAMetricsRegistrationConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	openStore(t, Options{Registerer: reg})
	if _, err := Open(context.Background(), Options{Registerer: reg}); err == nil || !strings.Contains(err.Error(), "register metrics") {
		t.Fatalf("second Open on one registry = %v, want a registration error", err)
	}
}

func TestWriteMetricsCountByResult(t *testing.T) {
	s := openStore(t, Options{})
	mustPut(t, s, newCall("c", "t", StatusPending, t0))
	_ = s.PutCall(context.Background(), &ToolCall{})
	if got := metricValue(t, s.met.writes.WithLabelValues(writeMemory)); got != 1 {
		t.Errorf("writes{memory} = %v", got)
	}
	if got := metricValue(t, s.met.writes.WithLabelValues(writeInvalid)); got != 1 {
		t.Errorf("writes{invalid} = %v", got)
	}
	srv := redistest.Start(t)
	r := openRedisStore(t, srv, Options{})
	mustPut(t, r, newCall("c", "t", StatusPending, t0))
	if got := metricValue(t, r.met.writes.WithLabelValues(writeRedis)); got != 1 {
		t.Errorf("writes{redis} = %v", got)
	}
}

func TestCloseStopsEverythingAndFlushesTheQueue(t *testing.T) {
	srv := redistest.Start(t) // its process-wait goroutine predates the check
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	mem, err := Open(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(context.Background(), Options{RedisURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	await.For(t, "subscription", r.subLive.Load)
	ctx := context.Background()
	mustPut(t, r, newCall("c", "t", StatusPending, t0))
	// Queue a write behind Redis's back, then Close: it must be flushed.
	r.enqueue([]*item{{call: &ToolCall{ID: "late", Status: StatusPending, CreatedAt: t0, UpdatedAt: t0}}}, nil)
	for _, s := range []*Store{mem, r} {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if err := s.PutCall(ctx, newCall("x", "t", StatusPending, t0)); err == nil {
			t.Error("PutCall after Close succeeded")
		}
		if _, err := s.GetCall(ctx, Ref{"t", "c"}); err == nil {
			t.Error("GetCall after Close succeeded")
		}
	}
	if n := rawClient(t, srv).Exists(ctx, callKey(Ref{"", "late"})).Val(); n != 1 {
		t.Error("Close did not flush the queued write")
	}
}

func TestCloseWithRedisDownDoesNotHang(t *testing.T) {
	srv := redistest.Start(t)
	s, err := Open(context.Background(), Options{RedisURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	mustPut(t, s, newCall("c", "t", StatusPending, t0))
	start := time.Now()
	_ = s.Close()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %v with Redis down", d)
	}
}

func TestRedisCallsGiveUpWithTheCallersContext(t *testing.T) {
	srv := redistest.Start(t)
	s := openRedisStore(t, srv, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// A cancelled caller is not an outage: the write is queued, Redis stays up.
	if err := s.PutCall(ctx, newCall("c", "t", StatusPending, t0)); err != nil {
		t.Fatalf("PutCall with a cancelled ctx = %v", err)
	}
	if _, reason := s.Ready(); reason != "" {
		t.Errorf("a cancelled caller degraded the store: %q", reason)
	}
	await.For(t, "the queued write to drain", func() bool { return s.qlen.Load() == 0 })
	if _, err := s.GetCall(ctx, Ref{"t", "other"}); !errors.Is(err, context.Canceled) {
		t.Errorf("GetCall with a cancelled ctx = %v", err)
	}
	mustGet(t, s, "t", "c")
}

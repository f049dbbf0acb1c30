package state

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/redistest"
)

// TestHeldAndPendingCallsAreNeverEvicted floods a memory-only store, far
// past its LRU, with another thread's calls: the held approval, the pending
// call and their threads are all still there, and only the flood was
// evicted.
func TestHeldAndPendingCallsAreNeverEvicted(t *testing.T) {
	s := openStore(t, Options{CacheSize: 100})
	holdAndPend(t, s)
	for i := range 10_000 {
		mustPut(t, s, newCall(fmt.Sprint("flood-", i), "thread-flood", StatusCompleted, t0))
	}
	ctx := context.Background()
	if c := mustGet(t, s, "thread-c", "h"); c.Status != StatusRequiresConfirmation {
		t.Errorf("held call after the flood: %s", c.Status)
	}
	if c := mustGet(t, s, "thread-p", "p"); c.Status != StatusExecuting {
		t.Errorf("pending call after the flood: %s", c.Status)
	}
	for _, id := range []string{"thread-c", "thread-p"} {
		if v, err := s.ReadThread(ctx, id, nil); err != nil || len(v.Thread.PendingCalls) != 1 {
			t.Errorf("thread %s after the flood: %+v, %v", id, v, err)
		}
	}
	if _, err := s.GetCall(ctx, Ref{"thread-flood", "flood-0"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("the oldest flood record was not evicted: %v", err)
	}
	// Once answered, a call protects nothing and leaves the protected set.
	if _, err := s.Apply(ctx, Ref{"thread-p", "p"}, Answer([]byte(`"ok"`), "", false, time.Now())); err != nil {
		t.Fatal(err)
	}
	if n := metricValue(t, s.met.protectedEntries); n != 3 {
		t.Errorf("protected entries after the answer = %v, want 3 (h and both threads)", n)
	}
}

// TestAFullProtectedSetRefusesNewHolds: the set is bounded in entries and in
// bytes; a hold that does not fit is refused (and counted), and a pending
// call that does not fit stays in the LRU, counted.
func TestAFullProtectedSetRefusesNewHolds(t *testing.T) {
	s := openStore(t, Options{CacheSize: 5})
	holdAndPend(t, s) // 4 entries: h, p and their threads
	if err := s.ReserveHold(Ref{"thread-x", "x1"}, 100); err != nil {
		t.Fatalf("a fifth entry: %v", err)
	}
	err := s.ReserveHold(Ref{"thread-x", "x2"}, 100)
	if !errors.Is(err, ErrProtectedFull) {
		t.Fatalf("a sixth entry = %v, want ErrProtectedFull", err)
	}
	if n := metricValue(t, s.met.holdsRefused); n != 1 {
		t.Errorf("holds refused = %v", n)
	}
	// A reservation is the held record's place: writing it takes no more.
	x1 := newCall("x1", "thread-x", StatusRequiresConfirmation, t0)
	x1.RequiresApprovalAt = ptr(time.Now().Add(time.Hour))
	mustPut(t, s, x1)
	if n := metricValue(t, s.met.protectedEntries); n != 5 {
		t.Errorf("protected entries = %v, want 5", n)
	}
	// A pending call that finds the set full is kept, evictable, and counted.
	q := newCall("q", "thread-q", StatusExecuting, t0)
	q.ClientToolDeadlineAt = ptr(time.Now().Add(time.Hour))
	mustPut(t, s, q)
	if n := metricValue(t, s.met.protectedOverflow.WithLabelValues("call")); n != 1 {
		t.Errorf("overflow{call} = %v, want 1", n)
	}
	mustGet(t, s, "thread-q", "q")

	b := openStore(t, Options{ProtectedBytes: 4096})
	if err := b.ReserveHold(Ref{"t", "big"}, 1<<20); !errors.Is(err, ErrProtectedFull) {
		t.Errorf("a hold of 1 MiB in 4 KiB = %v, want ErrProtectedFull", err)
	}
	if err := b.ReserveHold(Ref{"t", "small"}, 10); err != nil {
		t.Errorf("a small hold: %v", err)
	}
	b.ReleaseHold(Ref{"t", "small"})
	if n := metricValue(t, b.met.protectedEntries); n != 0 {
		t.Errorf("after ReleaseHold: %v entries", n)
	}
}

// TestRedisExpiryOutlivesTheDeadlines: a record held past the TTL (a policy
// approvalTimeout of 30 days, the TTL 1 hour) lives in Redis until its
// deadline and a TTL beyond, and so does its thread.
func TestRedisExpiryOutlivesTheDeadlines(t *testing.T) {
	srv := redistest.Start(t)
	s := openRedisStore(t, srv, Options{TTL: time.Hour})
	ctx := context.Background()
	month := 30 * 24 * time.Hour
	h := newCall("h", "thread-c", StatusRequiresConfirmation, t0)
	h.RequiresApprovalAt = ptr(time.Now().Add(month))
	mustPut(t, s, h)
	if err := s.PutCallsSync(ctx, nil, &Thread{ID: "thread-c", PendingCalls: []string{"h"}, Approvals: []string{"h"}}); err != nil {
		t.Fatal(err)
	}
	rc := rawClient(t, srv)
	for _, k := range []string{"aguard:{thread-c}:call:h", "aguard:{thread-c}:thread", "aguard:{thread-c}:calls",
		"aguard:ids:h", "aguard:status:TOOL_EXECUTION_STATUS_REQUIRES_CONFIRMATION"} {
		if ttl := rc.PTTL(ctx, k).Val(); ttl < month {
			t.Errorf("PTTL(%s) = %v, shorter than the approval deadline (%v)", k, ttl, month)
		}
	}
	if c := mustGet(t, s, "thread-c", "h"); c.Status != StatusRequiresConfirmation {
		t.Errorf("GetCall = %+v", c)
	}
}

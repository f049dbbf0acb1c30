package state

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aguard/aguard/internal/redistest"
)

// roundTrips is a go-redis hook that counts round trips (a command, or a
// pipeline) whose arguments name a key containing mark.
type roundTrips struct {
	mark string
	mu   sync.Mutex
	n    int
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds)
		return next(ctx, cmds)
	}
}

func (h *roundTrips) count(cmds []redis.Cmder) {
	for _, c := range cmds {
		for _, a := range c.Args() {
			if s, ok := a.(string); ok && strings.Contains(s, h.mark) {
				h.mu.Lock()
				h.n++
				h.mu.Unlock()
				return
			}
		}
	}
}

func (h *roundTrips) take() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.n
	h.n = 0
	return n
}

// TestCheckingManyAnswersTakesTwoRoundTrips reads a thread with 5,000
// answered calls and records every answer: one round trip for the reads,
// one for the writes (the proxy's test does it with 60,000).
func TestCheckingManyAnswersTakesTwoRoundTrips(t *testing.T) {
	const n = 5_000
	rt := &roundTrips{mark: "{thread-big}"}
	s := openRedisStore(t, redistest.Start(t), Options{Hooks: []redis.Hook{rt}})
	ctx := context.Background()
	ids := make([]string, n)
	var batch []*ToolCall
	for i := range ids {
		ids[i] = fmt.Sprint("call_", i)
		c := newCall(ids[i], "thread-big", StatusExecuting, t0)
		c.ClientToolDeadlineAt = ptr(time.Now().Add(time.Hour))
		batch = append(batch, c)
		if len(batch) == 1000 {
			if err := s.PutCallsSync(ctx, batch, nil); err != nil {
				t.Fatal(err)
			}
			batch = nil
		}
	}
	if err := s.PutCallsSync(ctx, nil, &Thread{ID: "thread-big", PendingCalls: ids}); err != nil {
		t.Fatal(err)
	}
	rt.take()

	v, err := s.ReadThread(ctx, "thread-big", ids)
	if err != nil || len(v.Thread.PendingCalls) != n {
		t.Fatalf("ReadThread: %v", err)
	}
	if got := rt.take(); got != 1 {
		t.Errorf("ReadThread of %d calls took %d round trips, want 1", n, got)
	}
	now := time.Now()
	changes := make([]Change, 0, n)
	for _, id := range ids {
		verdict := v.Judge(id, []byte(`"ok"`), "", false, now)
		if verdict.Action != AnswerAccept {
			t.Fatalf("answer to %s: %+v", id, verdict)
		}
		changes = append(changes, Change{id, verdict.Transition})
	}
	res := s.ApplyAnswers(ctx, v, changes)

	if got := rt.take(); got != 1 {
		t.Errorf("ApplyAnswers of %d answers took %d round trips, want 1", n, got)
	}
	for i, r := range res {
		if r.Err != nil || r.Call.Status != StatusCompleted {
			t.Fatalf("answer %d: %+v", i, r)
		}
	}
	if c := mustGet(t, s, "thread-big", ids[n-1]); c.Status != StatusCompleted || string(c.ResultJSON) != `{"content":"ok"}` {
		t.Errorf("last record = %+v", c)
	}
}

// TestApplyAnswersRetriesOnlyWhatConflicted: a record another replica
// changed between the read and the write is read again and judged by the
// transition again; the rest are written once.
func TestApplyAnswersRetriesOnlyWhatConflicted(t *testing.T) {
	srv := redistest.Start(t)
	a := openRedisStore(t, srv, Options{})
	b := openRedisStore(t, srv, Options{})
	ctx := context.Background()
	for _, id := range []string{"x", "y"} {
		c := newCall(id, "thread-r", StatusExecuting, t0)
		c.ClientToolDeadlineAt = ptr(time.Now().Add(time.Hour))
		mustPut(t, a, c)
	}
	held := newCall("h", "thread-r", StatusRequiresConfirmation, t0)
	held.RequiresApprovalAt = ptr(time.Now().Add(time.Hour))
	mustPut(t, a, held)
	v, err := a.ReadThread(ctx, "thread-r", []string{"x", "y", "h"})
	if err != nil {
		t.Fatal(err)
	}
	// Meanwhile, on B: x is answered, h rejected.
	if _, err := b.Apply(ctx, Ref{"thread-r", "x"}, Answer([]byte(`"from b"`), "", false, time.Now())); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Apply(ctx, Ref{"thread-r", "h"}, Reject("bob", time.Now())); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	res := a.ApplyAnswers(ctx, v, []Change{
		{"x", Answer([]byte(`"from a"`), "", false, now)},
		{"y", Answer([]byte(`"from a"`), "", false, now)},
		{"h", ExpireApproval(now.Add(2 * time.Hour))},
	})
	if res[0].Err == nil || res[2].Err == nil {
		t.Errorf("transitions on records changed meanwhile were applied: %+v", res)
	}
	if res[1].Err != nil || res[1].Call.Status != StatusCompleted {
		t.Errorf("y = %+v", res[1])
	}
	if c := mustGet(t, a, "thread-r", "x"); string(c.ResultJSON) != `{"content":"from b"}` {
		t.Errorf("x = %s, want B's answer kept", c.ResultJSON)
	}
	if c := mustGet(t, a, "thread-r", "h"); c.Cause != CauseApprovalRejected {
		t.Errorf("h = %s %q, want B's rejection kept", c.Status, c.Cause)
	}
}

// gate is a go-redis hook that holds the writer's write pipeline until a
// ReadThread pipeline has had its answer, then holds that answer until the
// writer's write is acknowledged (the queue empty): the interleaving in
// which a read begins with a write queued and ends after it was written.
type gate struct {
	armed     atomic.Bool
	readDone  chan struct{}
	store     atomic.Pointer[Store]
	closeOnce sync.Once
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !g.armed.Load() {
			return next(ctx, cmds)
		}
		switch name := cmds[0].Name(); {
		case name == "evalsha" || name == "eval": // the writer
			<-g.readDone
			return next(ctx, cmds)
		case name == "hmget" && len(cmds) > 2 && cmds[2].Name() == "exists": // ReadThread
			err := next(ctx, cmds)
			g.closeOnce.Do(func() { close(g.readDone) })
			s := g.store.Load()
			for s.qlen.Load() > 0 {
				time.Sleep(time.Millisecond)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// TestAReadDoesNotMissAWriteAcknowledgedWhileRedisAnswered reads a thread
// whose record and thread writes were queued when the read began and were
// acknowledged before it looked at the queue: the read returns what was
// written, not Redis's answer from just before.
func TestAReadDoesNotMissAWriteAcknowledgedWhileRedisAnswered(t *testing.T) {
	srv := redistest.Start(t)
	g := &gate{readDone: make(chan struct{})}
	s := openRedisStore(t, srv, Options{Hooks: []redis.Hook{g}})
	g.store.Store(s)
	ctx := context.Background()
	held := newCall("c1", "t1", StatusRequiresConfirmation, t0)
	held.RequiresApprovalAt = ptr(time.Now().Add(time.Hour))
	if err := s.RecordSync(ctx, []*ToolCall{held}, &Thread{ID: "t1", PendingCalls: []string{"c1"}, Approvals: []string{"c1"}}); err != nil {
		t.Fatal(err)
	}

	g.armed.Store(true)
	approved := newCall("c1", "t1", StatusExecuting, t0)
	if err := s.Record([]*ToolCall{approved}, &Thread{ID: "t1", PendingCalls: []string{"c1"}}); err != nil {
		t.Fatal(err)
	}
	v, err := s.ReadThread(ctx, "t1", []string{"c1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := v.calls["c1"].call.Status; got != StatusExecuting {
		t.Errorf("the record read while its write was acknowledged: %s, want %s", got, StatusExecuting)
	}
	if len(v.Thread.Approvals) != 0 {
		t.Errorf("the thread read while its write was acknowledged still holds approvals %v", v.Thread.Approvals)
	}
}

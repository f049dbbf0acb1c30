package state

import (
	"context"
	"fmt"
	"testing"

	"github.com/aguard/aguard/internal/redistest"
)

// BenchmarkGetCallLRUHit is a read served from memory: any record in
// memory-only mode, a terminal one with Redis (live calls always go to
// Redis, see BenchmarkGetCallRedis).
func BenchmarkGetCallLRUHit(b *testing.B) {
	run := func(b *testing.B, s *Store) {
		c := fullCall()
		c.Status = StatusCompleted
		mustPut(b, s, c)
		ctx := context.Background()
		hits := metricValue(b, s.met.cacheHits)
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if _, err := s.GetCall(ctx, RefOf(c)); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		if got := metricValue(b, s.met.cacheHits) - hits; got < float64(b.N) {
			b.Fatalf("%v cache hits for %d reads", got, b.N)
		}
	}
	b.Run("memory", func(b *testing.B) { run(b, openStore(b, Options{})) })
	b.Run("redis", func(b *testing.B) { run(b, openRedisStore(b, redistest.Start(b), Options{})) })
}

// BenchmarkGetCallRedis is the read of a live call, which always asks Redis.
func BenchmarkGetCallRedis(b *testing.B) {
	s := openRedisStore(b, redistest.Start(b), Options{})
	mustPut(b, s, fullCall()) // CANCELLED, but make it live:
	c := fullCall()
	c.Status = StatusExecuting
	mustPut(b, s, c)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.GetCall(ctx, RefOf(c)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPutCallsSyncRedis is what aguard adds before a RUN_FINISHED: one
// atomic write of the run's pending calls and its thread, waiting for Redis.
func BenchmarkPutCallsSyncRedis(b *testing.B) {
	for _, n := range []int{1, 3, 10} {
		b.Run(fmt.Sprintf("calls=%d", n), func(b *testing.B) {
			s := openRedisStore(b, redistest.Start(b), Options{})
			calls := make([]*ToolCall, n)
			th := &Thread{ID: "thread-1", LastRunID: "run-1"}
			for i := range calls {
				calls[i] = newCall(fmt.Sprintf("call-%d", i), "thread-1", StatusExecuting, t0)
				th.PendingCalls = append(th.PendingCalls, calls[i].ID)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := s.PutCallsSync(ctx, calls, th); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPutCallRedis is one write-through record write.
func BenchmarkPutCallRedis(b *testing.B) {
	s := openRedisStore(b, redistest.Start(b), Options{})
	c := fullCall()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := s.PutCall(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpdateCallRedis is one compare-and-set update (read + CAS).
func BenchmarkUpdateCallRedis(b *testing.B) {
	s := openRedisStore(b, redistest.Start(b), Options{})
	mustPut(b, s, newCall("c", "t", StatusExecuting, t0))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.update(ctx, Ref{"t", "c"}, func(c *ToolCall) error { c.ApprovedBy = "x"; return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

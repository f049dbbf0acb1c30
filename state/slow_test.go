package state

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestARedisAnsweringLateIsReportedSlow pauses the Redis a thread's keys
// live on (CLIENT PAUSE WRITE, shorter than the client's timeouts) while a
// write to that thread waits behind the caller: the Store counts a slow
// round trip and reports "redis slow" in Ready, without taking Redis for
// down, and the write reaches Redis when the pause ends. On one Redis and
// on a Redis Cluster, whose client times the round trips to every master.
func TestARedisAnsweringLateIsReportedSlow(t *testing.T) {
	const pause = 1500 * time.Millisecond
	check := func(t *testing.T, s *Store, node *redis.Client) {
		ctx := context.Background()
		if _, reason := s.Ready(); reason != "" {
			t.Fatalf("Ready before the pause = %q", reason)
		}
		mustPut(t, s, newCall("warm", "thread-slow", StatusCompleted, t0)) // every script loaded
		await.For(t, "the first write to drain", func() bool { return s.qlen.Load() == 0 })
		if err := node.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "WRITE").Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Record([]*ToolCall{newCall("late", "thread-slow", StatusExecuting, t0)}, nil); err != nil {
			t.Fatal(err)
		}
		await.For(t, "Ready to say Redis is slow", func() bool {
			_, reason := s.Ready()
			return strings.Contains(reason, "redis slow")
		})
		await.For(t, "the late write to reach Redis", func() bool { return s.qlen.Load() == 0 })
		if n := metricValue(t, s.met.redisSlow); n < 1 || !s.up.Load() {
			t.Errorf("after the pause: %v slow round trips counted, redis up %v; want at least 1, up", n, s.up.Load())
		}
		if got := mustGet(t, s, "thread-slow", "late"); got.Status != StatusExecuting {
			t.Errorf("the late write = %+v", got)
		}
	}
	opt := Options{RedisTimeout: 200 * time.Millisecond}
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		check(t, openRedisStore(t, srv, opt), rawClient(t, srv))
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.SharedCluster(t)
		slot, err := c.Client(t).ClusterKeySlot(context.Background(), threadKey("thread-slow")).Result()
		if err != nil {
			t.Fatal(err)
		}
		m, _ := c.MasterOf(t, int(slot))
		check(t, openClusterStore(t, c, opt), c.Node(t, m))
	})
}

package webhook

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/redistest"
	"github.com/aguard/aguard/state"
)

// redisClient is a client on srv, closed at cleanup.
func redisClient(t *testing.T, srv *redistest.Server) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	opt.DisableIdentity = true
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// downURL is a URL on a loopback port nobody listens on (connections are
// refused), and a function that starts rc's server on that port.
func downURL(t *testing.T) (string, func(rc *receiver)) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr + "/hook", func(rc *receiver) {
		rc.srv.Close()
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listen again on %s: %v", addr, err)
		}
		rc.srv = &httptest.Server{Listener: ln, Config: &http.Server{Handler: rc}}
		rc.srv.Start()
		t.Cleanup(rc.srv.Close)
	}
}

// TestDeliveriesQueuedInRedisByAStoppedReplicaAreDeliveredByAnother queues
// deliveries through replica A while the receiver is down; A stops without
// delivering them (as a killed replica would, they stay in Redis, claimed
// by A); once the receiver is up, replica B takes them over after the claim
// idle time and delivers each once, under the id A gave it.
func TestDeliveriesQueuedInRedisByAStoppedReplicaAreDeliveredByAnother(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redisClient(t, srv)
	url, up := downURL(t)
	regA := prometheus.NewRegistry()
	opt := testOptions(regA)
	opt.URLs, opt.Redis, opt.ClaimIdle = []string{url}, rdb, 300*time.Millisecond
	a := startNotifier(t, opt)
	for i := range 5 {
		a.Notify(state.CallStarted, testCall("c"+strconv.Itoa(i)))
	}
	await.For(t, "replica A to try the receiver", func() bool {
		return metric(t, regA, "aguard_webhook_attempts_total", "error") >= 1
	})
	// A stops: what it holds stays in Redis, pending in its name.
	if err := closeNow(t, a, 2*time.Second); err != nil {
		t.Fatalf("Close A: %v", err)
	}
	keys := streamKeys(url)
	entries, err := rdb.XRange(context.Background(), keys[0], "-", "+").Result()
	if err != nil || len(entries) != 5 {
		t.Fatalf("the stream holds %d deliveries (%v), want 5", len(entries), err)
	}
	var queued []string
	for _, e := range entries {
		queued = append(queued, e.Values["i"].(string))
	}

	rc := newReceiver(t, func(int, *http.Request) int { return http.StatusOK })
	up(rc)
	opt = testOptions(prometheus.NewRegistry())
	opt.URLs, opt.Redis, opt.ClaimIdle = []string{url}, rdb, 300*time.Millisecond
	startNotifier(t, opt)
	got := rc.waitRequests(t, 5)
	var ids, calls []string
	for _, r := range got {
		ids = append(ids, r.delivery)
		calls = append(calls, r.callID(t))
	}
	slices.Sort(ids)
	slices.Sort(queued)
	slices.Sort(calls)
	if !slices.Equal(ids, queued) {
		t.Errorf("delivered ids %v, want the ids A queued %v", ids, queued)
	}
	if want := []string{"c0", "c1", "c2", "c3", "c4"}; !slices.Equal(calls, want) {
		t.Errorf("delivered calls %v, want %v", calls, want)
	}
	await.For(t, "the delivered entries and their bytes to leave the stream", func() bool {
		n, _ := rdb.XLen(context.Background(), keys[0]).Result()
		b, _ := rdb.Get(context.Background(), keys[1]).Int()
		return n == 0 && b == 0
	})
}

// TestTheByteBudgetBoundsTheStreamAcrossReplicas pins QueueBytes with
// Redis: two replicas queue big bodies for one stuck URL; the bytes in the
// stream never exceed the budget, and the oldest are dropped and counted.
func TestTheByteBudgetBoundsTheStreamAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redisClient(t, srv)
	url, _ := downURL(t)
	var regs []*prometheus.Registry
	var ns []*Notifier
	for range 2 {
		reg := prometheus.NewRegistry()
		opt := testOptions(reg)
		opt.URLs, opt.Redis, opt.QueueBytes = []string{url}, rdb, 30_000
		regs, ns = append(regs, reg), append(ns, startNotifier(t, opt))
	}
	keys := streamKeys(url)
	for i := range 10 {
		ns[i%2].Notify(state.CallStarted, bigCall("c"+strconv.Itoa(i), 10_000))
		b, _ := rdb.Get(context.Background(), keys[1]).Int64()
		if b > 30_000 {
			t.Fatalf("after %d events %d bytes queued in redis, over the budget of 30000", i+1, b)
		}
	}
	n, _ := rdb.XLen(context.Background(), keys[0]).Result()
	dropped := metric(t, regs[0], "aguard_webhook_deliveries_total", "dropped") + metric(t, regs[1], "aguard_webhook_deliveries_total", "dropped")
	if n != 2 || dropped != 8 {
		t.Errorf("the stream holds %d deliveries with %v dropped, want 2 and 8", n, dropped)
	}
}

// pipelines counts the round trips that add to a webhook stream.
type pipelines struct{ n atomic.Int64 }

func (h *pipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && strings.HasPrefix(cmds[0].Name(), "eval") {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// TestEventsNotifiedTogetherGoToRedisInOneRoundTrip: NotifyAll's events go
// to the URL's stream in one round trip, keep their order, and are each
// delivered once.
func TestEventsNotifiedTogetherGoToRedisInOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redisClient(t, srv)
	rc := newReceiver(t, nil)
	opt := testOptions(prometheus.NewRegistry())
	opt.URLs, opt.Redis = []string{rc.srv.URL}, rdb
	n := startNotifier(t, opt)
	// Redis learns the script first (a fresh one answers NOSCRIPT).
	n.Notify(state.CallStarted, testCall("c0"))
	rc.waitRequests(t, 1)
	rt := &pipelines{}
	rdb.AddHook(rt)
	var all []state.Notification
	for _, id := range []string{"c1", "c2", "c3"} {
		all = append(all, state.Notification{Notice: state.CallStarted, Call: testCall(id)})
	}
	n.NotifyAll(all)
	if got := rt.n.Load(); got != 1 {
		t.Errorf("three events took %d round trips to Redis, want 1", got)
	}
	got := rc.waitRequests(t, 4)
	seen := map[string]int{}
	for _, r := range got {
		seen[r.delivery]++
		if seen[r.delivery] > 1 {
			t.Errorf("delivery %s arrived twice", r.delivery)
		}
	}
	for i, id := range []string{"c1", "c2", "c3"} {
		if !strings.Contains(string(got[1+i].body), `"id":"`+id+`"`) {
			t.Errorf("delivery %d: %s, want the event about %s", 2+i, got[1+i].body, id)
		}
	}
	// The receiver answers before the notifier removes the entry, so the
	// last one may still be there when its request is seen.
	await.For(t, "the delivered entries to leave the stream", func() bool {
		n, err := rdb.XLen(context.Background(), streamKeys(rc.srv.URL)[0]).Result()
		return err == nil && n == 0
	})
}

package state

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/redistest"
)

// told is a Notifier that reads, as each notice arrives, the status of its
// record in Redis, as a webhook's receiver would from another replica.
type told struct {
	raw *redis.Client
	mu  sync.Mutex
	got []toldNotice
}

type toldNotice struct {
	n       Notice
	id      string
	status  Status // the notice's copy
	inRedis string // the record's status in Redis when the notice arrived ("" = absent)
}

func (w *told) Notify(n Notice, c *ToolCall) {
	inRedis := ""
	if w.raw != nil {
		inRedis = w.raw.HGet(context.Background(), callKey(RefOf(c)), "s").Val()
	}
	w.mu.Lock()
	w.got = append(w.got, toldNotice{n, c.ID, c.Status, inRedis})
	w.mu.Unlock()
}

func (w *told) notices() []toldNotice {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]toldNotice(nil), w.got...)
}

// TestANoticeLeavesOnceItsRecordIsInRedis: a call recorded behind the
// stream and told of is not told of before its write has reached Redis,
// however long the write gathers; and three calls recorded and told of
// within one gathering reach Redis in one round trip, their notices after
// it, in order.
func TestANoticeLeavesOnceItsRecordIsInRedis(t *testing.T) {
	srv := redistest.Start(t)
	rt := &roundTrips{mark: "{tell-1}"}
	s := openRedisStore(t, srv, Options{WriteDelay: time.Hour, Hooks: []redis.Hook{rt}})
	w := &told{raw: rawClient(t, srv)}
	// Redis learns the write script first (a fresh one answers NOSCRIPT).
	if err := s.PutCall(context.Background(), newCall("c0", "tell-0", StatusExecuting, t0)); err != nil {
		t.Fatal(err)
	}
	var calls []*ToolCall
	for _, id := range []string{"c1", "c2", "c3"} {
		c := newCall(id, "tell-1", StatusExecuting, t0)
		if err := s.Record([]*ToolCall{c}, nil); err != nil {
			t.Fatal(err)
		}
		s.Tell(w, CallStarted, c)
		calls = append(calls, c)
	}
	if got := w.notices(); len(got) > 0 {
		t.Fatalf("told of %v while the writes gather", got)
	}
	if n := rt.take(); n != 0 {
		t.Fatalf("%d round trips while the writes gather: a notice sent them", n)
	}
	s.rushWriter() // the gathering's end
	await.For(t, "three notices", func() bool { return len(w.notices()) == 3 })
	for i, got := range w.notices() {
		if got.id != calls[i].ID || got.n != CallStarted || got.inRedis != string(StatusExecuting) {
			t.Errorf("notice %d: %+v, want %s started, its record in Redis", i, got, calls[i].ID)
		}
	}
	if n := rt.take(); n != 1 {
		t.Errorf("the three records took %d round trips, want 1", n)
	}
}

// TestANoticeFollowsTheNewestWriteOfItsRecord: a call told of as started,
// then written again (ended) before the first write left, is told of
// twice, in order, both after the newest write is in Redis; the notices
// carry the record as it was when each was made.
func TestANoticeFollowsTheNewestWriteOfItsRecord(t *testing.T) {
	srv := redistest.Start(t)
	s := openRedisStore(t, srv, Options{WriteDelay: time.Hour})
	w := &told{raw: rawClient(t, srv)}
	c := newCall("c1", "tell-2", StatusExecuting, t0)
	if err := s.Record([]*ToolCall{c}, nil); err != nil {
		t.Fatal(err)
	}
	s.Tell(w, CallStarted, c)
	done := c.clone()
	done.Status = StatusCompleted
	if err := s.Record([]*ToolCall{done}, nil); err != nil {
		t.Fatal(err)
	}
	s.Tell(w, CallEnded, done)
	s.rushWriter()
	await.For(t, "two notices", func() bool { return len(w.notices()) == 2 })
	got := w.notices()
	if got[0].n != CallStarted || got[0].status != StatusExecuting || got[1].n != CallEnded || got[1].status != StatusCompleted {
		t.Errorf("notices %+v, want started (executing) then ended (completed)", got)
	}
	for _, g := range got {
		if g.inRedis != string(StatusCompleted) {
			t.Errorf("%+v arrived with the record %q in Redis, want the newest write there", g, g.inRedis)
		}
	}
}

// TestANoticeIsNotHeldBackByRedisFailing: with Redis unreachable, a
// notice waiting on a queued write goes at once, and so does one made
// meanwhile; without Redis (memory only) Tell is Notify.
func TestANoticeIsNotHeldBackByRedisFailing(t *testing.T) {
	srv := redistest.Start(t)
	link := srv.Link(t)
	s := openStore(t, Options{RedisURL: link.URL(), WriteDelay: time.Hour})
	w := &told{}
	c := newCall("c1", "tell-3", StatusExecuting, t0)
	if err := s.Record([]*ToolCall{c}, nil); err != nil {
		t.Fatal(err)
	}
	s.Tell(w, CallStarted, c)
	link.Cut()
	s.rushWriter() // the write fails: Redis is unreachable
	await.For(t, "the waiting notice", func() bool { return len(w.notices()) == 1 })
	c2 := newCall("c2", "tell-3", StatusExecuting, t0)
	if err := s.Record([]*ToolCall{c2}, nil); err != nil {
		t.Fatal(err)
	}
	s.Tell(w, CallStarted, c2)
	await.For(t, "the notice made while Redis is unreachable", func() bool { return len(w.notices()) == 2 })

	mem := openStore(t, Options{})
	m := &told{}
	mem.Tell(m, CallStarted, c)
	if got := m.notices(); len(got) != 1 {
		t.Errorf("memory only: %d notices right after Tell, want 1", len(got))
	}
}

// TestCloseTellsOfWhatItFlushes: Close writes what gathers, and the
// notices waiting on it have been passed on when Close returns; one told
// after Close goes to its Notifier at once.
func TestCloseTellsOfWhatItFlushes(t *testing.T) {
	srv := redistest.Start(t)
	s, err := Open(context.Background(), Options{RedisURL: srv.URL(), WriteDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	w := &told{raw: rawClient(t, srv)}
	c := newCall("c1", "tell-4", StatusExecuting, t0)
	if err := s.Record([]*ToolCall{c}, nil); err != nil {
		t.Fatal(err)
	}
	s.Tell(w, CallStarted, c)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := w.notices(); len(got) != 1 || got[0].inRedis != string(StatusExecuting) {
		t.Errorf("after Close: %+v, want the notice, its record in Redis", got)
	}
	s.Tell(w, CallEnded, c) // late: straight to the Notifier, which counts it
	if got := w.notices(); len(got) != 2 {
		t.Errorf("a notice told after Close: %d notices, want 2", len(got))
	}
}

// holdingNotifier is a Notifier that holds its first notice until released.
type holdingNotifier struct {
	entered, release chan struct{}
	once             sync.Once
	told
}

func (g *holdingNotifier) Notify(n Notice, c *ToolCall) {
	g.once.Do(func() { close(g.entered); <-g.release })
	g.told.Notify(n, c)
}

// TestNoticesWaitingForASlowNotifierAreBounded: while the notifier holds
// a notice, at most maxNoticesDue wait behind it; the oldest past that are
// dropped and counted, and the rest are passed on in order.
func TestNoticesWaitingForASlowNotifierAreBounded(t *testing.T) {
	s := openRedisStore(t, redistest.Start(t), Options{})
	g := &holdingNotifier{entered: make(chan struct{}), release: make(chan struct{})}
	s.Tell(g, CallStarted, newCall("first", "slow-1", StatusExecuting, t0))
	<-g.entered
	const extra = 3
	for i := range maxNoticesDue + extra {
		s.Tell(g, CallStarted, newCall(fmt.Sprintf("c%d", i), "slow-1", StatusExecuting, t0))
	}
	if got := metricValue(t, s.met.noticesLost); got != extra {
		t.Errorf("dropped %v notices, want %d", got, extra)
	}
	close(g.release)
	await.For(t, "the notices kept", func() bool { return len(g.notices()) == 1+maxNoticesDue })
	got := g.notices()
	if got[0].id != "first" || got[1].id != fmt.Sprintf("c%d", extra) || got[len(got)-1].id != fmt.Sprintf("c%d", maxNoticesDue+extra-1) {
		t.Errorf("kept %s, %s … %s; want first, c%d … c%d", got[0].id, got[1].id, got[len(got)-1].id, extra, maxNoticesDue+extra-1)
	}
}

// batchTold is a told that also takes notices together, and records how
// many came in each hand-over.
type batchTold struct {
	told
	batches []int // guarded by told.mu
}

func (b *batchTold) NotifyAll(ns []Notification) {
	b.mu.Lock()
	b.batches = append(b.batches, len(ns))
	b.mu.Unlock()
	for _, x := range ns {
		b.told.Notify(x.Notice, x.Call)
	}
}

// TestABatchNotifierTakesWhatOneWriteReleasedTogether: the notices one
// acknowledgement releases reach a BatchNotifier in one NotifyAll, in order.
func TestABatchNotifierTakesWhatOneWriteReleasedTogether(t *testing.T) {
	srv := redistest.Start(t)
	s := openRedisStore(t, srv, Options{WriteDelay: time.Hour})
	b := &batchTold{}
	for _, id := range []string{"c1", "c2", "c3"} {
		c := newCall(id, "batch-1", StatusExecuting, t0)
		if err := s.Record([]*ToolCall{c}, nil); err != nil {
			t.Fatal(err)
		}
		s.Tell(b, CallStarted, c)
	}
	s.rushWriter()
	await.For(t, "three notices", func() bool { return len(b.notices()) == 3 })
	b.mu.Lock()
	batches := b.batches
	b.mu.Unlock()
	if len(batches) != 1 || batches[0] != 3 {
		t.Errorf("hand-overs %v, want one of 3", batches)
	}
	for i, got := range b.notices() {
		if want := fmt.Sprintf("c%d", i+1); got.id != want {
			t.Errorf("notice %d about %s, want %s", i, got.id, want)
		}
	}
}

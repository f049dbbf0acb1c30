package state

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestWritesBehindGatherIntoOneRoundTrip: writes made behind their callers
// wait up to Options.WriteDelay for others, so that one round trip carries
// them all and a record changed twice in the meantime is written once; a
// caller that waits for its write (RecordSync) sends what has gathered at
// once.
func TestWritesBehindGatherIntoOneRoundTrip(t *testing.T) {
	rt := &roundTrips{mark: "{gather-"}
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Redis learns the write script (a round trip of its own) from another
	// Store first, so that this one's writer starts idle.
	if err := openRedisStore(t, srv, Options{}).RecordSync(ctx, []*ToolCall{newCall("c1", "warm", StatusPending, t0)}, nil); err != nil {
		t.Fatalf("RecordSync: %v", err)
	}
	s := openRedisStore(t, srv, Options{WriteDelay: time.Hour, Hooks: []redis.Hook{rt}})
	awaitCaughtUp(t, s)
	for i := range 3 {
		if err := s.Record([]*ToolCall{newCall("c1", fmt.Sprint("gather-", i), StatusPending, t0)}, nil); err != nil {
			t.Fatal(err)
		}
		// Input pacing, not a wait for an outcome: a writer that sends
		// each write as it comes has sent this one before the next.
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Record([]*ToolCall{newCall("c1", "gather-0", StatusExecuting, t0)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordSync(ctx, []*ToolCall{newCall("c1", "gather-3", StatusExecuting, t0)}, nil); err != nil {
		t.Fatalf("RecordSync: %v", err)
	}
	if got := rt.take(); got != 1 {
		t.Errorf("five writes of four records took %d round trips, want 1", got)
	}
	raw := rawClient(t, srv)
	for i, want := range []Status{StatusExecuting, StatusPending, StatusPending, StatusExecuting} {
		key := fmt.Sprintf("aguard:{gather-%d}:call:c1", i)
		if got := raw.HGet(ctx, key, "s").Val(); got != string(want) {
			t.Errorf("%s has status %q in Redis, want %q", key, got, want)
		}
	}
}

// TestWritesBehindGoOnTheirOwn: with no caller waiting, what has gathered
// is sent once Options.WriteDelay has passed.
func TestWritesBehindGoOnTheirOwn(t *testing.T) {
	_, srv := recordGathering(t, 20*time.Millisecond, newCall("c1", "alone-1", StatusPending, t0))
	awaitKey(t, srv, "aguard:{alone-1}:call:c1", "the record to reach Redis")
}

// TestHeldCallIsWrittenAtOnce: a call held for approval does not wait for
// others: reviewers decide on it from any replica, which reads it from
// Redis.
func TestHeldCallIsWrittenAtOnce(t *testing.T) {
	c := newCall("c1", "held-1", StatusRequiresConfirmation, t0)
	c.RequiresApprovalAt = ptr(time.Now().Add(time.Hour))
	_, srv := recordGathering(t, time.Hour, c)
	awaitKey(t, srv, "aguard:{held-1}:call:c1", "the held call to reach Redis")
}

// TestTransitionOnAGatheredRecordSendsIt: a compare-and-set on a record
// whose write is gathering starts from that write, which it sends at once
// rather than waiting out Options.WriteDelay.
func TestTransitionOnAGatheredRecordSendsIt(t *testing.T) {
	c := newCall("c1", "cas-1", StatusExecuting, t0)
	c.ClientToolDeadlineAt = ptr(time.Now().Add(time.Hour))
	s, srv := recordGathering(t, time.Hour, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := s.Apply(ctx, Ref{"cas-1", "c1"}, Answer([]byte(`"done"`), "", false, time.Now()))
	if err != nil {
		t.Fatalf("Apply on a gathered record: %v", err)
	}
	if got.Status != StatusCompleted {
		t.Fatalf("Apply left status %s, want %s", got.Status, StatusCompleted)
	}
	if st := rawClient(t, srv).HGet(ctx, "aguard:{cas-1}:call:c1", "s").Val(); st != string(StatusCompleted) {
		t.Errorf("Redis has status %q, want %q", st, StatusCompleted)
	}
}

// TestCloseSendsWhatGathered: closing the Store writes what was gathering.
func TestCloseSendsWhatGathered(t *testing.T) {
	s, srv := recordGathering(t, time.Hour, newCall("c1", "close-1", StatusPending, t0))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := rawClient(t, srv).Exists(context.Background(), "aguard:{close-1}:call:c1").Val(); n != 1 {
		t.Errorf("after Close the gathered record is not in Redis")
	}
}

// TestCatchingUpWithANewPrimaryWaitsForQueuedWrites: after a primary
// change a replica says it has caught up with the new primary (which lets
// other replicas read there) only once the writes it had waiting are in
// it; it sends them at once rather than after Options.WriteDelay.
func TestCatchingUpWithANewPrimaryWaitsForQueuedWrites(t *testing.T) {
	s, link, promoted := caughtUpReplica(t)
	if err := s.Record([]*ToolCall{newCall("c1", "queued-1", StatusPending, t0)}, nil); err != nil {
		t.Fatal(err)
	}
	pc := failOverTo(t, s, link, promoted)
	if pc.Exists(context.Background(), "aguard:{queued-1}:call:c1").Val() != 1 {
		t.Fatal("the replica said it caught up with the new primary before its queued write was in it")
	}
}

// awaitCaughtUp waits until s has said it caught up with the primary, as
// it does at start: saying so sends what is queued.
func awaitCaughtUp(t *testing.T, s *Store) {
	t.Helper()
	await.For(t, "the Store to say it caught up with the primary", func() bool {
		s.loss.mu.Lock()
		defer s.loss.mu.Unlock()
		return s.loss.primary.caughtUp != ""
	})
}

// caughtUpReplica opens a Store whose writes wait an hour for others,
// through a link to one Redis that it has said it caught up with, and
// starts a second Redis for the link to fail over to (failOverTo).
func caughtUpReplica(t *testing.T) (*Store, *redistest.Link, *redistest.Server) {
	t.Helper()
	old, promoted := redistest.Start(t), redistest.Start(t)
	link := old.Link(t)
	s := openStore(t, Options{RedisURL: link.URL(), WriteDelay: time.Hour, heartbeat: 20 * time.Millisecond})
	await.For(t, "the first heartbeat", s.markerSet)
	awaitCaughtUp(t, s)
	return s, link, promoted
}

// failOverTo sends s's Redis connections to promoted, as a failover does,
// and waits for s to say in promoted that it caught up with it; it
// returns a client of promoted.
func failOverTo(t *testing.T, s *Store, link *redistest.Link, promoted *redistest.Server) *redis.Client {
	t.Helper()
	link.Redirect(promoted)
	pc := rawClient(t, promoted)
	ctx := context.Background()
	info, err := pc.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	id := parseInfo(info).runID
	await.For(t, "the replica to say it caught up with the new primary", func() bool {
		return pc.HGet(ctx, s.ks.primaryKey(), s.origin).Val() == id
	})
	return pc
}

// TestCatchingUpIsNotHeldBackByNewWrites: writes that keep coming after a
// replica first looked, each waiting for others (an hour here), do not keep
// it from saying it caught up with a new primary once the ones it had
// queued before are in.
func TestCatchingUpIsNotHeldBackByNewWrites(t *testing.T) {
	s, link, promoted := caughtUpReplica(t)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				runtime.Gosched()
			}
			// A hundred records changing without pause: never is nothing
			// queued.
			if err := s.Record([]*ToolCall{newCall(fmt.Sprint("c", i%100), "busy-1", StatusPending, t0)}, nil); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()
	failOverTo(t, s, link, promoted)
}

// awaitKey waits until Redis srv has key: what, written behind.
func awaitKey(t *testing.T, srv *redistest.Server, key, what string) {
	t.Helper()
	raw := rawClient(t, srv)
	await.For(t, what, func() bool { return raw.Exists(context.Background(), key).Val() == 1 })
}

// recordGathering opens a Store on a Redis of its own whose writes gather
// for delay, and records c behind the caller.
func recordGathering(t *testing.T, delay time.Duration, c *ToolCall) (*Store, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	s := openRedisStore(t, srv, Options{WriteDelay: delay})
	if err := s.Record([]*ToolCall{c}, nil); err != nil {
		t.Fatal(err)
	}
	return s, srv
}

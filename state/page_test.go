package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/redistest"
)

// putMany records n calls over n/100 threads behind the caller; every
// tenth is COMPLETED, the others EXECUTING, and every other one a frontend
// call.
func putMany(t *testing.T, s recorder, n int) {
	t.Helper()
	t0 := time.Now()
	batch := make([]*ToolCall, 0, 1000)
	for i := range n {
		st := StatusExecuting
		if i%10 == 0 {
			st = StatusCompleted
		}
		c := newCall(fmt.Sprintf("call-%d", i), fmt.Sprintf("thread-%d", i%(n/100)), st, t0.Add(time.Duration(i)))
		c.IsClientTool = i%2 == 0
		batch = append(batch, c)
		if len(batch) == cap(batch) || i == n-1 {
			if err := s.Record(batch, nil); err != nil {
				t.Fatal(err)
			}
			batch = make([]*ToolCall, 0, 1000)
		}
	}
	s.Wait(t)
}

// recorder is a Store that Record writes to, and whose writes Wait waits
// for.
type recorder interface {
	Record([]*ToolCall, *Thread) error
	Wait(t *testing.T)
}

// Wait returns at once: a Store without Redis has its writes in memory.
func (s *Store) Wait(*testing.T) {}

// drained is a Store on Redis whose Wait waits until Redis has every write
// queued.
type drained struct{ *Store }

func (d *drained) Wait(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for d.qlen.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes still queued for Redis", d.qlen.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMemberIsWhatJSONWrites: the fast path of member writes the bytes
// json.Marshal does, which Redis's indexes hold.
func TestMemberIsWhatJSONWrites(t *testing.T) {
	for _, s := range []string{"", "call_0", "thread-1", `a"b`, `a\b`, "a<b>&", "é", "\x7f", "\x00", "\u2028", "\xff"} {
		r := Ref{ThreadID: s, ID: "x" + s}
		b, _ := json.Marshal([2]string{r.ThreadID, r.ID})
		if got := member(r); got != string(b) {
			t.Errorf("member(%q) = %s, want %s", r, got, b)
		}
	}
}

// pageAll reads every page of f (and keep) with limit, checking that no
// page is over it and no record comes twice; it returns the records' ids
// and the number of pages.
func pageAll(t *testing.T, s *Store, f Filter, limit int, keep func(*ToolCall) bool) (map[string]bool, int) {
	t.Helper()
	seen := map[string]bool{}
	cursor, pages := "", 0
	for {
		calls, next, err := s.ListPage(context.Background(), f, Page{Limit: limit, Cursor: cursor, Keep: keep})
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		if len(calls) > limit {
			t.Fatalf("page %d holds %d records; limit %d", pages, len(calls), limit)
		}
		for _, c := range calls {
			k := c.ThreadID + "/" + c.ID
			if seen[k] {
				t.Fatalf("page %d repeats %s", pages, k)
			}
			if !f.match(c) || keep != nil && !keep(c) {
				t.Fatalf("page %d holds %s in %s, outside the filter", pages, k, c.Status)
			}
			seen[k] = true
		}
		if next == "" {
			return seen, pages
		}
		if len(calls) < limit && f == (Filter{}) && keep == nil {
			t.Fatalf("page %d holds %d records and is not the last", pages, len(calls))
		}
		cursor = next
	}
}

// TestPagesVisitEveryOneOf100000RecordsOnce writes 100,000 records and
// lists them a page at a time: without a filter in pages of 1,000, every
// page full but the last; then the EXECUTING frontend calls only (a
// status and a further selection). Each record comes exactly once. With
// Redis the pages are read by another replica, from Redis alone. Under the
// race detector, which makes it minutes long, it writes 10,000. On a Redis
// Cluster (three masters), whose index is split into shards over them, it
// writes 10,000 (2,000 under the race detector) over threads on every
// master and reads them in pages of 100, so that pages end and begin
// within and across shards.
//
//	go test -count=1 -run TestPagesVisitEveryOneOf100000RecordsOnce -v ./state
func TestPagesVisitEveryOneOf100000RecordsOnce(t *testing.T) {
	n := 100_000
	if raceBuild {
		n = 10_000
	}
	check := func(t *testing.T, writer recorder, reader *Store, n, limit int) {
		putMany(t, writer, n)
		start := time.Now()
		all, pages := pageAll(t, reader, Filter{}, limit, nil)
		t.Logf("%d records in %d pages of %d in %v", len(all), pages, limit, time.Since(start).Round(time.Millisecond))
		if len(all) != n || pages != n/limit {
			t.Fatalf("listed %d records in %d pages; want %d in %d", len(all), pages, n, n/limit)
		}
		frontend := func(c *ToolCall) bool { return c.IsClientTool }
		start = time.Now()
		some, pages := pageAll(t, reader, Filter{Status: StatusExecuting}, limit, frontend)
		t.Logf("%d EXECUTING frontend calls in %d pages of %d in %v", len(some), pages, limit, time.Since(start).Round(time.Millisecond))
		if want := n * 4 / 10; len(some) != want {
			t.Fatalf("listed %d EXECUTING frontend calls; want %d", len(some), want)
		}
		for i := range n {
			k := fmt.Sprintf("thread-%d/call-%d", i%(n/100), i)
			if !all[k] || some[k] != (i%10 != 0 && i%2 == 0) {
				t.Fatalf("%s: listed %v, among EXECUTING frontend calls %v", k, all[k], some[k])
			}
		}
	}
	t.Run("memory", func(t *testing.T) {
		// Without Redis the records are wherever memory holds them: a
		// cache large enough for all of them (about 60 MiB).
		s := openStore(t, Options{CacheBytes: 256 << 20})
		check(t, s, s, n, MaxPageLimit)
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		writer := openRedisStore(t, srv, Options{})
		reader := openRedisStore(t, srv, Options{})
		check(t, &drained{writer}, reader, n, MaxPageLimit)
	})
	t.Run("cluster", func(t *testing.T) {
		n := 10_000
		if raceBuild {
			n = 2_000
		}
		c := redistest.SharedCluster(t)
		threads := make([]string, n/100)
		shards := map[string]bool{}
		for i := range threads {
			threads[i] = fmt.Sprintf("thread-%d", i)
		}
		writer := openClusterStore(t, c, Options{})
		reader := openClusterStore(t, c, Options{})
		for _, th := range threads {
			shards[writer.ks.shardOf(th)] = true
		}
		if m := len(mastersOf(t, c, threads)); m < 3 || len(shards) < indexShards/2 {
			t.Fatalf("the threads live on %d masters and %d index shards; want every master and most shards", m, len(shards))
		}
		check(t, &drained{writer}, reader, n, 100)
	})
}

// TestAPageFollowsItsCursorWhileRecordsChange lists records two a page
// while they change between pages: a record changed after it was listed
// does not come again, one created after the cursor comes in a later page,
// and writes still queued are listed. It lists one thread's records, and
// then the whole ledger with records on as many threads (on a Redis
// Cluster, in several index shards); in memory, on one Redis and on a
// Redis Cluster.
func TestAPageFollowsItsCursorWhileRecordsChange(t *testing.T) {
	follow := func(t *testing.T, s *Store, f Filter, thread func(id string) string) {
		ctx := context.Background()
		t0 := time.Now()
		for _, id := range []string{"a", "b", "c", "d"} {
			mustPut(t, s, newCall(id, thread(id), StatusExecuting, t0))
		}
		page, next, err := s.ListPage(ctx, f, Page{Limit: 2})
		if err != nil || len(page) != 2 || next == "" {
			t.Fatalf("first page = %v, %q, %v", ids(page), next, err)
		}
		done := page[0].clone()
		done.Status = StatusCompleted
		mustPut(t, s, done)
		mustPut(t, s, newCall("e", thread("e"), StatusExecuting, t0))
		var rest []string
		for next != "" {
			page, next, err = s.ListPage(ctx, f, Page{Limit: 2, Cursor: next})
			if err != nil {
				t.Fatal(err)
			}
			rest = append(rest, ids(page)...)
		}
		if fmt.Sprint(rest) != "[c d e]" {
			t.Errorf("later pages = %v, want [c d e]", rest)
		}
	}
	both := func(t *testing.T, open func(t *testing.T) *Store) {
		t.Run("thread", func(t *testing.T) {
			follow(t, open(t), Filter{ThreadID: "thread-p"}, func(string) string { return "thread-p" })
		})
		t.Run("ledger", func(t *testing.T) {
			follow(t, open(t), Filter{}, func(id string) string { return "thread-" + id })
		})
	}
	t.Run("memory", func(t *testing.T) {
		both(t, func(t *testing.T) *Store { return openStore(t, Options{}) })
	})
	t.Run("redis", func(t *testing.T) {
		both(t, func(t *testing.T) *Store { return openRedisStore(t, redistest.Start(t), Options{}) })
	})
	t.Run("cluster", func(t *testing.T) {
		both(t, func(t *testing.T) *Store { return openClusterStore(t, redistest.SharedCluster(t), Options{}) })
	})
}

// TestAPageRefusesALimitOrCursorItDidNotIssue: a limit outside 1..1000 and
// a cursor ListPage did not make are errors naming them.
func TestAPageRefusesALimitOrCursorItDidNotIssue(t *testing.T) {
	s := openStore(t, Options{})
	ctx := context.Background()
	for _, limit := range []int{-1, MaxPageLimit + 1} {
		if _, _, err := s.ListPage(ctx, Filter{}, Page{Limit: limit}); !errors.Is(err, errInvalid) {
			t.Errorf("limit %d: err = %v, want invalid input", limit, err)
		}
	}
	for _, cursor := range []string{"%%%", "bm90IGEgbWVtYmVy"} {
		if _, _, err := s.ListPage(ctx, Filter{}, Page{Cursor: cursor}); !errors.Is(err, ErrCursor) {
			t.Errorf("cursor %q: err = %v, want ErrCursor", cursor, err)
		}
	}
}

package logging

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is an underlying writer that keeps each write it gets and
// reports it on a channel.
type recorder struct {
	mu     sync.Mutex
	writes []string
	wrote  chan string
	fail   error
}

func newRecorder() *recorder { return &recorder{wrote: make(chan string, 1024)} }

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return 0, r.fail
	}
	r.writes = append(r.writes, string(p))
	r.wrote <- string(p)
	return len(p), nil
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.writes...)
}

// TestBatchedLinesGoOutInOneWrite pins that lines logged one after the
// other wait, and go out together, in order, in one write.
func TestBatchedLinesGoOutInOneWrite(t *testing.T) {
	rec := newRecorder()
	b := newBatch(rec, time.Hour, BatchBytes)
	for _, l := range []string{"one\n", "two\n", "three\n"} {
		buf := []byte(l)
		b.Write(buf)
		copy(buf, "xxx") // the caller may reuse its buffer
	}
	if w := rec.all(); len(w) != 0 {
		t.Fatalf("written before the batch was due: %q", w)
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	if w := rec.all(); len(w) != 1 || w[0] != "one\ntwo\nthree\n" {
		t.Fatalf("writes %q, want one of the three lines in order", w)
	}
}

// TestBatchedLinesGoOutAfterTheDelay pins that a batch is written when its
// delay runs out, without a Flush.
func TestBatchedLinesGoOutAfterTheDelay(t *testing.T) {
	rec := newRecorder()
	b := newBatch(rec, 10*time.Millisecond, BatchBytes)
	b.Write([]byte("one\n"))
	b.Write([]byte("two\n"))
	select {
	case w := <-rec.wrote:
		if w != "one\ntwo\n" && w != "one\n" {
			t.Fatalf("first write %q", w)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the batch was never written")
	}
	b.Write([]byte("three\n")) // a new batch, with a timer of its own
	for !strings.HasSuffix(strings.Join(rec.all(), ""), "three\n") {
		select {
		case <-rec.wrote:
		case <-time.After(10 * time.Second):
			t.Fatalf("the second batch was never written: %q", rec.all())
		}
	}
	if got := strings.Join(rec.all(), ""); got != "one\ntwo\nthree\n" {
		t.Fatalf("wrote %q", got)
	}
}

// TestALineOverTheBoundIsWrittenAtOnce pins that the line that would take
// the pending lines past their bound is written, with them and after them,
// before its Write returns.
func TestALineOverTheBoundIsWrittenAtOnce(t *testing.T) {
	rec := newRecorder()
	b := newBatch(rec, time.Hour, 100)
	first, second := strings.Repeat("a", 59)+"\n", strings.Repeat("b", 59)+"\n"
	b.Write([]byte(first))
	if w := rec.all(); len(w) != 0 {
		t.Fatalf("written under the bound: %q", w)
	}
	b.Write([]byte(second))
	if w := rec.all(); len(w) != 1 || w[0] != first+second {
		t.Fatalf("writes %q, want both lines in one write", w)
	}
}

// TestCloseWritesWhatIsPendingAndThenWritesThrough pins that Close writes
// the pending lines, and that a line logged after it is written at once.
func TestCloseWritesWhatIsPendingAndThenWritesThrough(t *testing.T) {
	rec := newRecorder()
	b := newBatch(rec, time.Hour, BatchBytes)
	b.Write([]byte("before\n"))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b.Write([]byte("after\n"))
	if w := rec.all(); len(w) != 2 || w[0] != "before\n" || w[1] != "after\n" {
		t.Fatalf("writes %q", w)
	}
}

// TestFlushReportsTheWritersError pins that an error of the underlying
// writer is not lost: the next Flush returns it.
func TestFlushReportsTheWritersError(t *testing.T) {
	rec := newRecorder()
	rec.fail = errors.New("disk full")
	b := newBatch(rec, time.Hour, BatchBytes)
	b.Write([]byte("line\n"))
	if err := b.Flush(); err == nil || err.Error() != "disk full" {
		t.Fatalf("Flush: %v, want the writer's error", err)
	}
	if err := b.Flush(); err != nil {
		t.Fatalf("second Flush: %v, want nil (the error was reported)", err)
	}
}

// TestConcurrentLinesKeepTheirOrderAndAllArrive pins, under the race
// detector, that lines logged by many goroutines at once, through batches
// that the timer and the bound both write, all arrive, each goroutine's in
// the order it logged them, each line whole.
func TestConcurrentLinesKeepTheirOrderAndAllArrive(t *testing.T) {
	const writers, lines = 8, 500
	var out lockedBuffer
	b := newBatch(&out, time.Millisecond, 512)
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range lines {
				b.Write(fmt.Appendf(nil, "g%d %d\n", g, i))
			}
		})
	}
	wg.Wait()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	next := make([]int, writers)
	for _, l := range bytes.Split(bytes.TrimSuffix([]byte(out.String()), []byte("\n")), []byte("\n")) {
		var g, i int
		if _, err := fmt.Sscanf(string(l), "g%d %d", &g, &i); err != nil || g < 0 || g >= writers {
			t.Fatalf("line %q is not one that was logged", l)
		}
		if i != next[g] {
			t.Fatalf("goroutine %d: line %d after %d", g, i, next[g]-1)
		}
		next[g]++
	}
	for g, n := range next {
		if n != lines {
			t.Errorf("goroutine %d: %d lines of %d arrived", g, n, lines)
		}
	}
}

package memtidy

import (
	"runtime/metrics"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// feed gives w one sample per entry of allocs and returns the indexes at
// which it decided to reclaim.
func feed(w *watch, allocs ...uint64) []int {
	var at []int
	for i, a := range allocs {
		if w.observe(sample{allocs: a}) {
			at = append(at, i)
		}
	}
	return at
}

// testOptions: a Quiet of four samples, quiet under 100 bytes, bursts from
// 1,000 bytes.
var testOptions = Options{Every: time.Second, Quiet: 4 * time.Second, QuietBytes: 100, MinReclaim: 1000}

func TestABurstThenQuietIsReclaimedOnce(t *testing.T) {
	w := newWatch(testOptions)
	// A burst of 5,000 bytes, then nothing: reclaimed once the last 4 s
	// allocated under 100 bytes, and not again while nothing happens.
	got := feed(w, 0, 2000, 5000, 5000, 5000, 5000, 5000, 5000, 5010, 5020, 5030)
	if len(got) != 1 || got[0] != 6 {
		t.Fatalf("reclaimed at samples %v, want [6] (the first with 4 s of quiet after the burst)", got)
	}
	// A second burst, then quiet again: a second reclaim.
	got = feed(w, 7000, 9000, 9000, 9000, 9000, 9000)
	if len(got) != 1 || got[0] != 5 {
		t.Fatalf("after a second burst, reclaimed at %v, want [5]", got)
	}
}

func TestABusyProcessIsNotReclaimed(t *testing.T) {
	w := newWatch(testOptions)
	var allocs []uint64
	for i := range 100 {
		allocs = append(allocs, uint64(i)*50) // 200 bytes every 4 s: never quiet
	}
	if got := feed(w, allocs...); len(got) != 0 {
		t.Fatalf("reclaimed at %v while allocating 50 bytes a second, over the quiet 100 per 4 s", got)
	}
}

func TestStartUpIsReclaimedOnceQuiet(t *testing.T) {
	w := newWatch(testOptions)
	// Start-up allocated before the first sample; nothing after it. The
	// first whole Quiet reclaims, with no burst needed, and only once.
	got := feed(w, 500, 500, 500, 500, 500, 500, 500, 500, 500)
	if len(got) != 1 || got[0] != 4 {
		t.Fatalf("reclaimed at samples %v, want [4] (the first with 4 s of history)", got)
	}
}

func TestQuietWithoutABurstIsNotReclaimed(t *testing.T) {
	w := newWatch(testOptions)
	if got := feed(w, 0, 0, 0, 0, 0); len(got) != 1 {
		t.Fatalf("start-up reclaims: %v, want one", got)
	}
	// Slow allocation: quiet at every sample, but 1,000 bytes since the
	// start-up reclaim are reached only at the last sample.
	var allocs []uint64
	for i := range 43 {
		allocs = append(allocs, uint64(i)*24)
	}
	got := feed(w, allocs...)
	if len(got) != 1 || got[0] != 42 {
		t.Fatalf("reclaimed at %v, want only [42], once 1,000 bytes were allocated", got)
	}
}

var sink [][]byte

func TestATidyReturnsTheMemoryOfABurst(t *testing.T) {
	defer goleak.VerifyNone(t)
	tidy := Start(Options{Every: 10 * time.Millisecond, Quiet: 50 * time.Millisecond, QuietBytes: 1 << 20, MinReclaim: 16 << 20})
	defer tidy.Stop()
	// 64 MiB of garbage, 256 KiB at a time, then nothing. The first reclaim
	// may come before the burst (start-up) or after it; the one waited for
	// is the first after it.
	for range 256 {
		sink = append(sink, make([]byte, 256<<10))
		if len(sink) == 16 {
			sink = nil
		}
	}
	sink = nil
	n, atEnd := tidy.Reclaims(), read()
	deadline := time.Now().Add(30 * time.Second)
	for tidy.Reclaims() == n {
		if time.Now().After(deadline) {
			t.Fatalf("no reclaim within 30 s of a 64 MiB burst (%d before it)", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Collected: the burst's last 4 MiB were garbage no collection had
	// seen. Returned: more of the heap is released than at its end.
	after := read()
	if objects := heapObjects(); objects >= 1<<20 {
		t.Errorf("heap objects after the reclaim: %d bytes, want under 1 MiB (the burst let go of all it made)", objects)
	}
	if after.released <= atEnd.released {
		t.Errorf("heap released to the system: %d bytes at the burst's end, %d after the reclaim", atEnd.released, after.released)
	}
}

// heapObjects is the memory of the heap's objects, live or dead and not
// yet collected.
func heapObjects() uint64 {
	m := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(m)
	return m[0].Value.Uint64()
}

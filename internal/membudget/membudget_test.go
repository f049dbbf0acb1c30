package membudget

import (
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/syncbuf"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestAdmitRefusesPastNinetyPercent pins the thresholds: streams start while
// memory in use is at or under 90 % of the budget, and are refused, counted
// and logged once past it, until it falls back under 80 %.
func TestAdmitRefusesPastNinetyPercent(t *testing.T) {
	var used atomic.Int64
	var log syncbuf.Buffer
	reg := prometheus.NewRegistry()
	b, err := New(Options{Max: 1000, Logger: slog.New(slog.NewTextHandler(&log, nil)), Registerer: reg, used: used.Load})
	if err != nil {
		t.Fatal(err)
	}
	admit := func() bool {
		b.checked.Store(0) // read the memory in use now, not the cached answer
		return b.Admit()
	}
	used.Store(900)
	if !admit() {
		t.Fatal("refused at 90 %")
	}
	used.Store(901)
	if admit() || admit() {
		t.Fatal("admitted past 90 %")
	}
	if ok, reason := b.Ready(); !ok || !strings.Contains(reason, "503 overloaded") {
		t.Errorf("Ready() = %v, %q while over", ok, reason)
	}
	used.Store(850)
	if admit() || !b.Over() {
		t.Fatal("admitted at 85 % right after being past 90 %: admission would flap with each collection")
	}
	used.Store(799)
	if !admit() {
		t.Fatal("refused after memory fell back under 80 %")
	}
	used.Store(850)
	if !admit() {
		t.Fatal("refused at 85 % on the way up")
	}
	if got := testutil.ToFloat64(b.refusals); got != 3 {
		t.Errorf("refusals = %v, want 2", got)
	}
	if n := strings.Count(log.String(), "refusing new streams"); n != 1 {
		t.Errorf("logged the crossing %d times, want once:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), "taking new streams") {
		t.Errorf("the way back was not logged:\n%s", log.String())
	}
}

// TestNoBudgetAdmitsAll pins that without a budget nothing is refused and
// the runtime's limit is left alone.
func TestNoBudgetAdmitsAll(t *testing.T) {
	b, err := New(Options{used: func() int64 { return 1 << 60 }})
	if err != nil {
		t.Fatal(err)
	}
	if !b.Admit() || b.Over() {
		t.Fatal("a process without a budget refused a stream")
	}
	var nilBudget *Budget
	if !nilBudget.Admit() {
		t.Fatal("a nil budget refused a stream")
	}
}

// TestInUseCountsLiveHeap pins the measure: memory held by live objects
// counts once a collection has seen it, and stops counting once they are
// garbage and collected.
func TestInUseCountsLiveHeap(t *testing.T) {
	before := inUse()
	keep := make([]byte, 64<<20)
	collect()
	held := inUse()
	if held-before < 60<<20 {
		t.Fatalf("in use %d → %d with 64 MiB live", before, held)
	}
	keep[0] = 2 // keep it live until here
	keep = nil
	collect()
	if after := inUse(); held-after < 60<<20 {
		t.Fatalf("in use %d → %d after dropping 64 MiB", held, after)
	}
}

func collect() {
	for range 2 {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

// TestContainerLimitReads pins that the container's limit is read without
// error where cgroups exist (0 when none is set).
func TestContainerLimitReads(t *testing.T) {
	limit, err := ContainerLimit()
	if err != nil || limit < 0 {
		t.Fatalf("ContainerLimit() = %d, %v", limit, err)
	}
	t.Logf("container limit: %d bytes (0: none)", limit)
}

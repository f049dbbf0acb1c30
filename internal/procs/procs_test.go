package procs

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
)

// testFit is a fit over a window of four intervals with the default
// thresholds, for a machine of most processors with a CPU limit (it never
// goes beyond most).
func testFit(most int) *fit {
	return newFit(testOptions(), most, false)
}

// testUnlimitedFit is testFit with no CPU limit: contention may take it
// beyond most.
func testUnlimitedFit(most int) *fit {
	return newFit(testOptions(), most, true)
}

func testOptions() Options {
	return Options{Every: time.Second, Window: 4 * time.Second, RaiseAt: defaultRaiseAt, LowerAt: defaultLowerAt, ContendedAt: defaultContendedAt, HostIdleBelow: defaultHostIdle, BacklogScale: defaultBacklogScale}
}

func TestALoadWellWithinOneCPUGetsOneProcessorAfterAWindow(t *testing.T) {
	f := testFit(4)
	for i, busy := range []float64{0.2, 0.3, 0.1} {
		if got := f.next(4, interval{busy: busy}); got != 4 {
			t.Fatalf("interval %d: %d processors before a whole window was seen, want 4", i, got)
		}
	}
	if got := f.next(4, interval{busy: 0.2}); got != 1 {
		t.Fatalf("after a window busy 0.1-0.3 CPUs: %d processors, want 1", got)
	}
}

func TestProcessorsAreTakenAwayOnlyDownToWhatTheWindowsPeakNeeds(t *testing.T) {
	f := testFit(8)
	got := 8
	for _, busy := range []float64{0.3, 0.9, 0.4, 0.2} {
		got = f.next(got, interval{busy: busy})
	}
	// 0.9 CPUs at 0.35 a processor: 3 processors.
	if got != 3 {
		t.Fatalf("peak 0.9 CPUs over the window: %d processors, want 3", got)
	}
	// A window busy by as much keeps them: the window starts again after a change.
	for i, busy := range []float64{0.9, 0.9, 0.9, 0.9} {
		if got = f.next(got, interval{busy: busy}); got != 3 {
			t.Fatalf("interval %d at 0.9 CPUs with 3 processors: %d, want 3", i, got)
		}
	}
}

func TestABusyIntervalDoublesTheProcessorsAtOnceUpToTheMost(t *testing.T) {
	f := testFit(4)
	if got := f.next(1, interval{busy: 0.49}); got != 1 {
		t.Fatalf("one processor busy 0.49 CPUs: %d processors, want 1", got)
	}
	if got := f.next(1, interval{busy: 0.5}); got != 2 {
		t.Fatalf("one processor busy 0.5 CPUs: %d processors, want 2", got)
	}
	if got := f.next(2, interval{busy: 1.0}); got != 4 {
		t.Fatalf("two processors busy 1 CPU: %d processors, want 4", got)
	}
	if got := f.next(4, interval{busy: 4.0}); got != 4 {
		t.Fatalf("the most processors, all busy: %d, want 4 (the most)", got)
	}
}

func TestARaiseStartsTheWindowAgain(t *testing.T) {
	f := testFit(2)
	for range 4 {
		f.next(2, interval{busy: 0.1})
	}
	// Lowered to 1, raised by a burst, then quiet: the burst's interval is
	// not forgotten until a whole window has passed after it.
	if got := f.next(1, interval{busy: 0.8}); got != 2 {
		t.Fatalf("a burst at one processor: %d processors, want 2", got)
	}
	for i := range 3 {
		if got := f.next(2, interval{busy: 0.1}); got != 2 {
			t.Fatalf("interval %d after the burst: %d processors, want 2 until a window has passed", i, got)
		}
	}
	if got := f.next(2, interval{busy: 0.1}); got != 1 {
		t.Fatalf("a quiet window after the burst: %d processors, want 1", got)
	}
}

func TestAContendedHostDoublesTheDefaultProcessorsAtOnce(t *testing.T) {
	f := testUnlimitedFit(2)
	// Busy 0.7 CPUs, waiting 0.3 s a second: not yet half the CPU time.
	if got := f.next(2, interval{busy: 0.7, wait: 0.3}); got != 2 {
		t.Fatalf("run-queue wait 0.43 of the CPU time: %d processors, want 2", got)
	}
	if got := f.next(2, interval{busy: 0.7, wait: 0.35}); got != 4 {
		t.Fatalf("run-queue wait half the CPU time: %d processors, want 4", got)
	}
}

func TestAWaitWhileTheHostHasIdleCPUsIsNotContention(t *testing.T) {
	f := testUnlimitedFit(2)
	// Busy 0.45 CPUs, waiting 0.5 s a second, four tenths of the host's
	// CPUs idle: the 1,000-stream paced load on a quiet 2-CPU host, where
	// four processors cost 8-22 % more CPU per event than two.
	for i := range 8 {
		if got := f.next(2, interval{busy: 0.45, wait: 0.5, hostIdle: 0.4}); got != 2 {
			t.Fatalf("interval %d, long waits with 0.4 of the host idle: %d processors, want 2", i, got)
		}
	}
	if got := f.next(2, interval{busy: 0.45, wait: 0.5, hostIdle: 0.09}); got != 4 {
		t.Fatalf("the same waits with the host's CPUs busy: %d processors, want 4", got)
	}
	// Beyond the default, intervals with idle CPUs do not keep it there:
	// back to the default after a window of them.
	got := 4
	for range 4 {
		got = f.next(got, interval{busy: 0.45, wait: 0.9, hostIdle: 0.3})
	}
	if got != 2 {
		t.Fatalf("a window of waits with idle CPUs beyond the default: %d processors, want 2", got)
	}
}

func TestContentionIsNotJudgedBelowTheDefaultOrWhileNearlyIdle(t *testing.T) {
	f := testUnlimitedFit(2)
	if got := f.next(1, interval{busy: 0.3, wait: 1.0}); got != 1 {
		t.Fatalf("one processor of two, long waits: %d processors, want 1 (contention counts at the default only)", got)
	}
	if got := f.next(2, interval{busy: 0.2, wait: 1.0}); got != 2 {
		t.Fatalf("busy 0.2 CPUs with long waits: %d processors, want 2 (too little CPU time to judge by)", got)
	}
}

func TestACPULimitKeepsTheProcessorsAtTheDefault(t *testing.T) {
	f := testFit(2)
	for i := range 8 {
		if got := f.next(2, interval{busy: 0.9, wait: 2.0}); got != 2 {
			t.Fatalf("interval %d, contended under a CPU limit: %d processors, want 2", i, got)
		}
	}
}

func TestChangedCPULimitsStartTheFitAgainFromTheNewDefault(t *testing.T) {
	f := testUnlimitedFit(2)
	if got := f.next(2, interval{busy: 0.9, wait: 2.0}); got != 4 {
		t.Fatalf("contended without a CPU limit: %d processors, want 4", got)
	}
	// A limit now applies (the Governor has handed the runtime its
	// default): contention no longer takes it beyond.
	f.limitsChanged(2, false)
	for i := range 8 {
		if got := f.next(2, interval{busy: 0.9, wait: 2.0}); got != 2 {
			t.Fatalf("interval %d, contended after a CPU limit appeared: %d processors, want 2", i, got)
		}
	}
	// The limits leave one CPU: nothing to govern, whatever the load.
	f.limitsChanged(1, true)
	for i, iv := range []interval{{busy: 0.9, wait: 2.0}, {busy: 1.0}, {busy: 0.01}} {
		if got := f.next(1, iv); got != 1 {
			t.Fatalf("interval %d with one CPU left: %d processors, want 1", i, got)
		}
	}
	// The old fit's window is forgotten: a quiet load needs a whole new
	// window before a processor is taken away.
	f.limitsChanged(4, false)
	for i := range 3 {
		if got := f.next(4, interval{busy: 0.1}); got != 4 {
			t.Fatalf("interval %d of the new window: %d processors, want 4", i, got)
		}
	}
	if got := f.next(4, interval{busy: 0.1}); got != 1 {
		t.Fatalf("a quiet window after the change: %d processors, want 1", got)
	}
}

func TestProcessorsBeyondTheDefaultStayUntilAWindowWithoutContention(t *testing.T) {
	f := testUnlimitedFit(2)
	got := f.next(2, interval{busy: 0.8, wait: 1.0})
	if got != 4 {
		t.Fatalf("contended: %d processors, want 4", got)
	}
	// Contended once in the window: kept.
	for i, iv := range [][2]float64{{0.8, 0.1}, {0.8, 0.6}, {0.8, 0.1}, {0.8, 0.1}, {0.8, 0.1}} {
		if got = f.next(got, interval{busy: iv[0], wait: iv[1]}); got != 4 {
			t.Fatalf("interval %d, a contended interval within the window: %d processors, want 4", i, got)
		}
	}
	// The window now holds no contended interval: back to the default,
	// which the load (0.8 CPUs at 0.35 a processor) still needs.
	if got = f.next(got, interval{busy: 0.8, wait: 0.1}); got != 2 {
		t.Fatalf("a window without contention: %d processors, want 2", got)
	}
}

func TestALightLoadBeyondTheDefaultComesDownToWhatItNeeds(t *testing.T) {
	f := testUnlimitedFit(4)
	got := f.next(4, interval{busy: 1.5, wait: 1.0})
	if got != 8 {
		t.Fatalf("contended: %d processors, want 8", got)
	}
	for range 4 {
		got = f.next(got, interval{busy: 0.2, wait: 0.5}) // too little CPU time to count as contended
	}
	if got != 1 {
		t.Fatalf("a window at 0.2 CPUs: %d processors, want 1", got)
	}
}

func TestABackloggedIntervalRaisesOneProcessorOnlyWhenItIsBusier(t *testing.T) {
	f := testFit(2)
	// The unpaced load of bench/run.sh on one processor: 0.3-0.57 CPUs
	// an interval, most wakeups finding several events.
	for i, busy := range []float64{0.3, 0.57, 0.45, 0.79} {
		if got := f.next(1, interval{busy: busy, backlogged: true}); got != 1 {
			t.Fatalf("interval %d, backlogged, busy %.2f CPUs: %d processors, want 1", i, busy, got)
		}
	}
	if got := f.next(1, interval{busy: 0.85, backlogged: true}); got != 2 {
		t.Fatalf("backlogged, busy 0.85 CPUs: %d processors, want 2", got)
	}
	if got := f.next(1, interval{busy: 0.57}); got != 2 {
		t.Fatalf("events one at a time, busy 0.57 CPUs: %d processors, want 2", got)
	}
}

func TestAWindowOfBackloggedIntervalsLowersAtAHigherShare(t *testing.T) {
	f := testFit(2)
	// Peak 0.55 CPUs: two processors at 0.35 each, one at 0.56.
	got := 2
	for _, busy := range []float64{0.4, 0.55, 0.45, 0.5} {
		got = f.next(got, interval{busy: busy, backlogged: true})
	}
	if got != 1 {
		t.Fatalf("a backlogged window peaking at 0.55 CPUs: %d processors, want 1", got)
	}
	// One interval of the window not backlogged: the usual share.
	f = testFit(2)
	got = 2
	for i, busy := range []float64{0.4, 0.55, 0.45, 0.5} {
		got = f.next(got, interval{busy: busy, backlogged: i != 2})
	}
	if got != 2 {
		t.Fatalf("a window peaking at 0.55 CPUs, one interval not backlogged: %d processors, want 2", got)
	}
}

func TestContentionDoesNotRaiseBeyondTheDefaultWhileBacklogged(t *testing.T) {
	f := testUnlimitedFit(2)
	// Busy and waiting as on a saturated host: four processors if the
	// events came one at a time (TestAContendedHostDoublesTheDefaultProcessorsAtOnce).
	for i := range 8 {
		if got := f.next(2, interval{busy: 0.9, wait: 1.5, backlogged: true}); got != 2 {
			t.Fatalf("interval %d, contended and backlogged: %d processors, want 2", i, got)
		}
	}
	// Beyond the default already, a window of backlogged intervals brings
	// it back.
	got := f.next(2, interval{busy: 0.9, wait: 1.5})
	if got != 4 {
		t.Fatalf("contended, events one at a time: %d processors, want 4", got)
	}
	for range 4 {
		got = f.next(got, interval{busy: 0.9, wait: 1.5, backlogged: true})
	}
	if got != 2 {
		t.Fatalf("a contended window of backlogged intervals beyond the default: %d processors, want 2", got)
	}
}

func TestTheGovernorStaysOffWhenGOMAXPROCSIsSet(t *testing.T) {
	t.Setenv("GOMAXPROCS", "2")
	if g := Start(Options{}); g != nil {
		g.Stop()
		t.Fatal("a Governor started although GOMAXPROCS is set in the environment")
	}
}

// TestTheGovernorFollowsTheProcessesCPUTime runs a real Governor with short
// intervals: a quiet process comes down to one processor, and goroutines
// that keep two CPUs busy bring back the runtime's default.
func TestTheGovernorFollowsTheProcessesCPUTime(t *testing.T) {
	most := runtime.GOMAXPROCS(0)
	if most < 2 {
		t.Skipf("the runtime's default is %d processor here: nothing to govern", most)
	}
	g := Start(Options{Every: 10 * time.Millisecond, Window: 100 * time.Millisecond})
	if g == nil {
		t.Fatal("no Governor started")
	}
	t.Cleanup(g.Stop)
	await.For(t, "GOMAXPROCS 1 while the process is quiet", func() bool { return runtime.GOMAXPROCS(0) == 1 })

	ctx, cancel := context.WithCancel(context.Background())
	var burners sync.WaitGroup
	for range 2 {
		burners.Go(func() {
			for ctx.Err() == nil {
			}
		})
	}
	// At least the default: on a host other processes keep busy it may go
	// beyond (TestTheGovernorGoesBeyondTheDefaultOnAContendedHost).
	await.For(t, "GOMAXPROCS back to the default under load", func() bool { return runtime.GOMAXPROCS(0) >= most })
	cancel()
	burners.Wait()

	g.Stop()
	if got := runtime.GOMAXPROCS(0); got != most {
		t.Fatalf("GOMAXPROCS %d after Stop, want the default %d", got, most)
	}
}

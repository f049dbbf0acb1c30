// Package procs fits GOMAXPROCS to the CPU time the process uses: one
// processor while aguard's load fits well within one CPU, every processor
// the runtime's default allows as soon as it does not.
//
// Go's scheduler keeps idle processors ready for work. When a goroutine
// blocked on the network becomes runnable, the thread that polled it wakes
// another thread to look for more work ("spinning"), which mostly finds none
// and goes back to sleep. Under a proxy's typical load, many streams each
// delivering an event now and then, that costs a futex wake, a sleep and two
// context switches for a handful of events, on top of the read and the write
// that are the work itself. With one processor there is no other thread to
// wake. Measured on a 2-CPU machine (bench/README.md, "One processor while
// the load fits in one"): 19 % less CPU per event at 200 streams × 20
// events/s with tool calls and Redis, one proxy at a time (5-7 % with two
// proxies sharing the load); the p99 moved by milliseconds either way, as
// one processor waits whenever the kernel preempts its thread.
//
// A Governor reads the process's CPU time (getrusage) every Options.Every.
// When the processors in use were busy for Options.RaiseAt of the interval
// or more, it doubles them at once, up to the default: a burst waits one
// interval at most. It lowers them only when the busiest interval of the
// last Options.Window would still have kept fewer below Options.LowerAt.
//
// It stays off when the GOMAXPROCS environment variable is set (the operator
// chose) and when the default is one processor anyway. It does not pin
// threads, change GOGC or limit the CPU the process may use.
package procs

import (
	"context"
	"log/slog"
	"math"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Options configure a Governor; the zero value of a field selects its
// default.
type Options struct {
	// Every is how often the CPU time is read (100 ms).
	Every time.Duration
	// Window is how long the load must stay low before processors are
	// taken away (2 s).
	Window time.Duration
	// RaiseAt is the share of the processors in use that, busy over one
	// interval, doubles them (0.5).
	RaiseAt float64
	// LowerAt is the share each remaining processor may be busy with the
	// window's busiest interval after processors are taken away (0.35).
	LowerAt float64
	// Logger gets a debug record per change; nil discards.
	Logger *slog.Logger
}

const (
	defaultEvery   = 100 * time.Millisecond
	defaultWindow  = 2 * time.Second
	defaultRaiseAt = 0.5
	defaultLowerAt = 0.35
)

// Governor sets GOMAXPROCS from the CPU time the process uses.
type Governor struct {
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// Start starts a Governor, or returns nil when it has nothing to govern: the
// GOMAXPROCS environment variable is set, or the runtime's default is one
// processor. Stop ends it.
func Start(opt Options) *Governor {
	if _, set := os.LookupEnv("GOMAXPROCS"); set {
		return nil
	}
	most := runtime.GOMAXPROCS(0)
	if most <= 1 {
		return nil
	}
	if opt.Every <= 0 {
		opt.Every = defaultEvery
	}
	if opt.Window <= 0 {
		opt.Window = defaultWindow
	}
	if opt.RaiseAt <= 0 {
		opt.RaiseAt = defaultRaiseAt
	}
	if opt.LowerAt <= 0 {
		opt.LowerAt = defaultLowerAt
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &Governor{cancel: cancel}
	g.done.Add(1)
	go g.run(ctx, opt, most)
	return g
}

// Stop ends the Governor, waits for its goroutine and gives the runtime its
// default back. A nil Governor does nothing.
func (g *Governor) Stop() {
	if g == nil {
		return
	}
	g.cancel()
	g.done.Wait()
	runtime.SetDefaultGOMAXPROCS()
}

func (g *Governor) run(ctx context.Context, opt Options, most int) {
	defer g.done.Done()
	tick := time.NewTicker(opt.Every)
	defer tick.Stop()
	f := newFit(opt, most)
	procs := most
	lastCPU, ok := cpuTime()
	lastAt := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		cpu, read := cpuTime()
		if !ok || !read { // no figure for this interval: nothing changes
			lastCPU, lastAt, ok = cpu, now, read
			continue
		}
		busy := (cpu - lastCPU).Seconds() / now.Sub(lastAt).Seconds()
		lastCPU, lastAt = cpu, now
		next := f.next(procs, busy)
		if next == procs {
			continue
		}
		if next == f.most {
			// The default again, so that the runtime goes on following
			// changes to the CPU limit (Go 1.25's automatic GOMAXPROCS).
			runtime.SetDefaultGOMAXPROCS()
			f.most = runtime.GOMAXPROCS(0)
			next = f.most
		} else {
			runtime.GOMAXPROCS(next)
		}
		opt.Logger.Debug("GOMAXPROCS fitted to the load", "from", procs, "to", next, "busy_cpus", busy)
		procs = next
	}
}

// cpuTime is the user and system CPU time the process has used, and
// whether it could be read.
func cpuTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// fit decides, from the CPUs busy over each interval, how many processors
// the next interval gets. It is the Governor's pure core.
type fit struct {
	opt  Options
	most int
	busy []float64 // the window's intervals, oldest first
	size int       // intervals in a window
}

func newFit(opt Options, most int) *fit {
	n := max(1, int(opt.Window/opt.Every))
	return &fit{opt: opt, most: most, busy: make([]float64, 0, n), size: n}
}

// next takes the CPUs busy over the interval just ended, with procs
// processors, and returns the processors for the next.
func (f *fit) next(procs int, busy float64) int {
	if len(f.busy) == f.size {
		copy(f.busy, f.busy[1:])
		f.busy = f.busy[:f.size-1]
	}
	f.busy = append(f.busy, busy)
	if procs < f.most && busy >= f.opt.RaiseAt*float64(procs) {
		f.busy = f.busy[:0]
		return min(f.most, 2*procs)
	}
	if procs == 1 || len(f.busy) < f.size {
		return procs
	}
	peak := 0.0
	for _, b := range f.busy {
		peak = max(peak, b)
	}
	need := max(1, int(math.Ceil(peak/f.opt.LowerAt)))
	if need >= procs {
		return procs
	}
	f.busy = f.busy[:0]
	return need
}

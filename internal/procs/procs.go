// Package procs fits GOMAXPROCS to the CPU time the process uses: one
// processor while aguard's load fits well within one CPU, every processor
// the runtime's default allows as soon as it does not, and twice that while
// other processes keep aguard's threads waiting for a CPU.
//
// Go's scheduler keeps idle processors ready for work. When a goroutine
// blocked on the network becomes runnable, the thread that polled it wakes
// another thread to look for more work ("spinning"), which mostly finds
// none and goes back to sleep. Under a proxy's typical load, many streams
// each delivering an event now and then, that costs a futex wake, a sleep
// and two context switches for a handful of events, on top of the read and
// the write that are the work itself. With one processor there is no other
// thread to wake. Measured on a 2-CPU machine (bench/README.md, "One
// processor while the load fits in one"): 19 % less CPU per event at 200
// streams × 20 events/s with tool calls and Redis, one proxy at a time (5-7
// % with two proxies sharing the load); the p99 moved by milliseconds either
// way, as one processor waits whenever the kernel preempts its thread.
//
// The other way round, on a host whose CPUs other processes keep busy, a
// processor stalls, with every goroutine queued on it, whenever the kernel
// preempts the thread that holds it, and aguard reads and writes its
// sockets with raw system calls (package rawio) that do not hand the
// processor on. There more processors than CPUs cut the tail at the same
// CPU per event: measured at 1,000 streams × 20 events/s on that 2-CPU
// machine with a busy host, GOMAXPROCS 4 had a p99 of 12-26 ms where the
// governed 2 had 35-56 (bench/README.md, "More processors than CPUs on a
// busy host").
//
// Where the events wait in the sockets anyway, one processor is cheaper
// still: each wakeup reads more of them. When the data plane's wakeups
// read Options.BacklogAt events each or more on average (Options.Wakeups:
// backlogged streams, whose agent writes faster than the chain downstream
// takes the events), the processors may run Options.BacklogScale busier
// before they are doubled or after they are taken away, and contention
// does not take them beyond the default: more threads would only take CPU
// from the processes that feed and drain those streams. Measured under bench/run.sh's
// unpaced load on that 2-CPU machine: 0.94-1.04 s of CPU per 1M events on
// one processor against 1.11-1.41 governed without it and nginx's
// 1.03-1.08, and more events delivered (bench/README.md, "Backlogged
// streams on one processor"). The events a wakeup read are averaged, not
// the wakeups that read several counted: with more processors than one,
// under that same load, most wakeups read one event or none while most
// events came in wakeups that read dozens, and a count of wakeups took the
// load for events one at a time, so that contention raised the processors
// to twice the default and kept them there (bench/README.md, "The
// backlog, counted in events").
//
// A Governor reads the process's CPU time (getrusage) every Options.Every.
// When the processors in use were busy for Options.RaiseAt of the interval
// or more, it doubles them at once, up to the default: a burst waits one
// interval at most. It lowers them only when the busiest interval of the
// last Options.Window would still have kept fewer below Options.LowerAt.
// At the default, it also reads how long the process's threads were
// runnable without a CPU (schedstat, Linux only) and how much CPU time
// the host left idle (/proc/stat): when the wait is Options.ContendedAt of
// the CPU time they ran or more while the host's CPUs were busy (idle less
// than Options.HostIdleBelow of them), the host is contended and it doubles
// the processors beyond the default, back to the default after a window
// with no contended interval. A wait while CPUs sit idle is the scheduler's
// latency, not other processes' load: more processors only add threads to
// wait (bench/README.md, "The Governor's reads"). It goes beyond the
// default only when no cgroup CPU limit applies (where one does, more
// processors make the process throttled in bursts).
//
// CPU limits change under a running process: a container's CPU limit
// resized in place (Kubernetes' in-place pod resize), a cpuset narrowed.
// Go's runtime follows such changes with its default (Go 1.25), but not
// while a program has set GOMAXPROCS itself, as the Governor does. So the
// Governor reads the limits again every Options.LimitsEvery, and when
// they changed it hands the runtime its new default and fits from there,
// going beyond it only if no limit applies now.
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
	"slices"
	"sync"
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
	// ContendedAt is the run-queue wait, as a share of the CPU time the
	// process ran, from which an interval counts as contended (0.5); the
	// process must also have been busy LowerAt of a CPU or more.
	ContendedAt float64
	// HostIdleBelow is the share of the host's CPUs left idle over an
	// interval below which its run-queue wait counts as contention (0.1).
	HostIdleBelow float64
	// Wakeups, when set, returns how many times the data plane has woken
	// for a readable socket and how many events those wakeups read, both
	// counted from its start. An interval whose wakeups read BacklogAt
	// events each or more, on average, is backlogged.
	Wakeups func() (all, events uint64)
	// BacklogAt is the events an interval's wakeups must read each, on
	// average, for the interval to be backlogged (2).
	BacklogAt float64
	// BacklogScale is how much busier the processors may run while the
	// streams are backlogged: a backlogged interval raises them at
	// RaiseAt times this, a window of them lowers them at LowerAt times
	// this (1.6: 0.8 and 0.56 of a processor).
	BacklogScale float64
	// LimitsEvery is how often the process's CPU limits (its cgroup's
	// CPU bandwidth limit and its CPU affinity) are read again (1 s).
	LimitsEvery time.Duration
	// Logger gets a debug record per change, and an info record when the
	// CPU limits changed; nil discards.
	Logger *slog.Logger
}

const (
	defaultEvery        = 100 * time.Millisecond
	defaultWindow       = 2 * time.Second
	defaultRaiseAt      = 0.5
	defaultLowerAt      = 0.35
	defaultContendedAt  = 0.5
	defaultHostIdle     = 0.1
	defaultBacklogAt    = 2.0
	defaultBacklogScale = 1.6
	defaultLimitsEvery  = time.Second
)

// Governor sets GOMAXPROCS from the CPU time the process uses.
type Governor struct {
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// Start starts a Governor, or returns nil when it has nothing to govern: the
// GOMAXPROCS environment variable is set, or the runtime's default is one
// processor. Stop ends it.
func Start(opt Options) *Governor { return start(opt, "/") }

// start is Start with the cgroup and proc file systems read under root.
func start(opt Options, root string) *Governor {
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
	if opt.ContendedAt <= 0 {
		opt.ContendedAt = defaultContendedAt
	}
	if opt.HostIdleBelow <= 0 {
		opt.HostIdleBelow = defaultHostIdle
	}
	if opt.BacklogAt <= 0 {
		opt.BacklogAt = defaultBacklogAt
	}
	if opt.BacklogScale <= 0 {
		opt.BacklogScale = defaultBacklogScale
	}
	if opt.LimitsEvery <= 0 {
		opt.LimitsEvery = defaultLimitsEvery
	}
	if opt.Wakeups == nil {
		opt.Wakeups = func() (uint64, uint64) { return 0, 0 }
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &Governor{cancel: cancel}
	g.done.Add(1)
	go g.run(ctx, opt, most, root)
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

func (g *Governor) run(ctx context.Context, opt Options, most int, root string) {
	defer g.done.Done()
	tick := time.NewTicker(opt.Every)
	defer tick.Stop()
	lim, limAt := cpuLimits(root), time.Now()
	f := newFit(opt, most, !lim.limited)
	procs := most
	waits, host := newWaitReader(), newIdleReader()
	defer waits.close()
	defer host.close()
	lastCPU, ok := cpuTime()
	lastWait, waitOK := waits.read()
	lastIdle, idleOK := host.read()
	lastWakes, lastEvents := opt.Wakeups()
	lastAt := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		if now.Sub(limAt) >= opt.LimitsEvery {
			limAt = now
			if l := cpuLimits(root); l != lim {
				lim = l
				runtime.SetDefaultGOMAXPROCS()
				most := runtime.GOMAXPROCS(0)
				opt.Logger.Info("the CPU limits changed: GOMAXPROCS back to the runtime's default", "from", procs, "to", most, "cpu_limited", l.limited)
				f.limitsChanged(most, !l.limited)
				procs = most
			}
		}
		cpu, read := cpuTime()
		wakes, events := opt.Wakeups()
		iv := interval{hostIdle: 1, backlogged: wakes > lastWakes &&
			float64(events-lastEvents) >= opt.BacklogAt*float64(wakes-lastWakes)}
		lastWakes, lastEvents = wakes, events
		var wait, idle time.Duration
		waitRead, idleRead := false, false
		if f.readsWait(procs) {
			wait, waitRead = waits.read()
			idle, idleRead = host.read()
		}
		if !ok || !read { // no figure for this interval: nothing changes
			lastCPU, lastAt, ok = cpu, now, read
			lastWait, waitOK = wait, waitRead
			lastIdle, idleOK = idle, idleRead
			continue
		}
		secs := now.Sub(lastAt).Seconds()
		iv.busy = (cpu - lastCPU).Seconds() / secs
		// No figure counts as no wait on a host with every CPU idle: never
		// contended.
		if waitOK && waitRead && wait >= lastWait {
			iv.wait = (wait - lastWait).Seconds() / secs
		}
		if idleOK && idleRead && idle >= lastIdle {
			iv.hostIdle = (idle - lastIdle).Seconds() / secs
		}
		lastCPU, lastAt = cpu, now
		lastWait, waitOK = wait, waitRead
		lastIdle, idleOK = idle, idleRead
		next := f.next(procs, iv)
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
		opt.Logger.Debug("GOMAXPROCS fitted to the load", "from", procs, "to", next, "busy_cpus", iv.busy, "run_queue_wait", iv.wait, "host_idle", iv.hostIdle, "backlogged", iv.backlogged)
		procs = next
	}
}

// interval is what the Governor read over one interval.
type interval struct {
	busy     float64 // CPUs the process kept busy
	wait     float64 // CPU-seconds a second its threads waited runnable (run-queue wait)
	hostIdle float64 // share of the host's CPUs left idle
	// backlogged: the data plane's wakeups read Options.BacklogAt events
	// each or more on average (Options.Wakeups).
	backlogged bool
}

// fit decides, from what the Governor read over each interval, how many
// processors the next interval gets. It is the Governor's pure core.
type fit struct {
	opt     Options
	most    int       // the runtime's default
	beyond  bool      // whether it may go beyond most, to over(): no CPU limit applies
	busy    []float64 // the window's intervals, oldest first
	hot     []bool    // which of them were contended
	backlog []bool    // which of them were backlogged
	size    int       // intervals in a window
}

func newFit(opt Options, most int, beyond bool) *fit {
	n := max(1, int(opt.Window/opt.Every))
	return &fit{opt: opt, most: most, beyond: beyond, busy: make([]float64, 0, n), hot: make([]bool, 0, n), backlog: make([]bool, 0, n), size: n}
}

// limitsChanged starts the fit again at the runtime's new default, most,
// going beyond it only if beyond.
func (f *fit) limitsChanged(most int, beyond bool) {
	f.most, f.beyond = most, beyond
	f.restart()
}

// over is the processors while the host is contended: twice the default.
func (f *fit) over() int { return 2 * f.most }

// readsWait reports whether next looks at the run-queue wait with procs
// processors in use: only from the default up, where contention can raise
// them beyond it or keep them there.
func (f *fit) readsWait(procs int) bool { return f.beyond && procs >= f.most }

// next takes what was read over the interval just ended, with procs
// processors, and returns the processors for the next.
func (f *fit) next(procs int, iv interval) int {
	if f.most <= 1 {
		return procs // the limits leave one CPU: nothing to govern
	}
	// Contention beyond the default serves latency; backlogged streams
	// have theirs in the backlog, and more threads would only take CPU
	// from the processes that feed and drain them.
	hot := f.readsWait(procs) && iv.busy >= f.opt.LowerAt && iv.wait >= f.opt.ContendedAt*iv.busy &&
		iv.hostIdle < f.opt.HostIdleBelow && !iv.backlogged
	if len(f.busy) == f.size {
		copy(f.busy, f.busy[1:])
		f.busy = f.busy[:f.size-1]
		copy(f.hot, f.hot[1:])
		f.hot = f.hot[:f.size-1]
		copy(f.backlog, f.backlog[1:])
		f.backlog = f.backlog[:f.size-1]
	}
	f.busy = append(f.busy, iv.busy)
	f.hot = append(f.hot, hot)
	f.backlog = append(f.backlog, iv.backlogged)
	raiseAt := f.opt.RaiseAt
	if iv.backlogged {
		raiseAt *= f.opt.BacklogScale
	}
	switch {
	case procs < f.most && iv.busy >= raiseAt*float64(procs):
		f.restart()
		return min(f.most, 2*procs)
	case procs == f.most && hot:
		f.restart()
		return f.over()
	}
	if procs == 1 || len(f.busy) < f.size {
		return procs
	}
	peak := 0.0
	for _, b := range f.busy {
		peak = max(peak, b)
	}
	// A processor may be busy LowerAt before the wait for it shows in a
	// stream's latency. Backlogged streams have their events waiting in
	// the sockets anyway, and fewer processors read more of them a wakeup:
	// a window of backlogged intervals may keep each busier.
	lowerAt := f.opt.LowerAt
	if !slices.Contains(f.backlog, false) {
		lowerAt *= f.opt.BacklogScale
	}
	need := max(1, int(math.Ceil(peak/lowerAt)))
	if procs > f.most {
		if slices.Contains(f.hot, true) {
			return procs
		}
		need = min(need, f.most)
	}
	if need >= procs {
		return procs
	}
	f.restart()
	return need
}

// restart forgets the window after a change.
func (f *fit) restart() {
	f.busy = f.busy[:0]
	f.hot = f.hot[:0]
	f.backlog = f.backlog[:0]
}

// limits is what cpuLimits read: whether a cgroup CPU limit applies, and
// what the limit files and the CPU affinity said (a change of either
// changes seen).
type limits struct {
	limited bool
	seen    string
}

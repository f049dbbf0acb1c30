// Package memtidy gives memory back to the operating system when the
// process goes quiet after a burst.
//
// Go's collector lets the heap grow to twice what the last collection
// found live before it collects again, and its background scavenger keeps
// what lies under that goal. A proxy that has just opened thousands of
// streams which then sit idle (agent UIs waiting for a person, the common
// case) allocates nothing more, so nothing triggers the next collection:
// the garbage of the burst stays resident until the runtime's two-minute
// forced collection, and resident memory per idle stream lands anywhere
// between the live heap and the goal depending on when the last collection
// happened (bench/README.md, "Decision memo and memory after bursts").
//
// More stays resident than the heap's garbage: the buffers and request
// contexts of the burst's connections wait in sync.Pools, which are emptied
// only over two collections, and the stacks of the goroutines that served
// the burst keep the size they grew to until a collection shrinks them.
//
// A Tidy reads the runtime's allocation counter every Options.Every. The
// first time the process allocates less than Options.QuietBytes over
// Options.Quiet after Start, it collects twice and returns the free memory
// to the operating system (runtime.GC, debug.FreeOSMemory): start-up —
// reading the configuration, compiling the policy — leaves a few MiB of
// garbage and free heap that would otherwise stay resident under the
// collector's goal. After that, once the process has allocated at least
// Options.MinReclaim since the last reclaim and is quiet again, it
// reclaims again: once per burst. Under a load that allocates more than
// QuietBytes per Quiet it never runs, and the collector paces itself as
// usual. Quiet is judged by allocation only: streams that carry events
// without allocating (package rawio) look quiet, so it runs once after a
// burst of them too, and a load allocating about QuietBytes per Quiet
// triggers it now and then, at most once per MinReclaim allocated.
//
// It does not bound memory (package membudget does) and does not change
// GOGC or the soft memory limit.
package memtidy

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Tidy; the zero value of a field selects its default.
type Options struct {
	// Every is how often the runtime's figures are read (250 ms).
	Every time.Duration
	// Quiet is how long allocation must stay under QuietBytes (1 s).
	Quiet time.Duration
	// QuietBytes is the allocation over Quiet still counted as quiet (1 MiB).
	QuietBytes uint64
	// MinReclaim is the allocation since the last reclaim that makes a
	// burst worth reclaiming after (8 MiB). The first reclaim, after
	// start-up, needs none.
	MinReclaim uint64
	// Logger gets a debug record per reclaim; nil discards.
	Logger *slog.Logger
}

const (
	defaultEvery      = 250 * time.Millisecond
	defaultQuiet      = time.Second
	defaultQuietBytes = 1 << 20
	defaultMinReclaim = 8 << 20
)

// Tidy watches the runtime's memory figures and reclaims after bursts.
type Tidy struct {
	opt      Options
	reclaims atomic.Uint64
	cancel   context.CancelFunc
	done     sync.WaitGroup
}

// Start starts a Tidy; Stop ends it.
func Start(opt Options) *Tidy {
	if opt.Every <= 0 {
		opt.Every = defaultEvery
	}
	if opt.Quiet <= 0 {
		opt.Quiet = defaultQuiet
	}
	if opt.QuietBytes == 0 {
		opt.QuietBytes = defaultQuietBytes
	}
	if opt.MinReclaim == 0 {
		opt.MinReclaim = defaultMinReclaim
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &Tidy{opt: opt, cancel: cancel}
	t.done.Add(1)
	go t.run(ctx)
	return t
}

// Stop ends the Tidy and waits for its goroutine (and a reclaim under
// way) to finish.
func (t *Tidy) Stop() {
	t.cancel()
	t.done.Wait()
}

// Reclaims reports how many times the Tidy has collected and returned
// memory.
func (t *Tidy) Reclaims() uint64 { return t.reclaims.Load() }

func (t *Tidy) run(ctx context.Context) {
	defer t.done.Done()
	tick := time.NewTicker(t.opt.Every)
	defer tick.Stop()
	w := newWatch(t.opt)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s := read()
		if !w.observe(s) {
			continue
		}
		runtime.GC() // the pools' primary caches become their victims
		debug.FreeOSMemory()
		t.reclaims.Add(1)
		after := read()
		t.opt.Logger.Debug("memory returned after a burst", "allocated_bytes", s.allocs,
			"heap_live_bytes", after.live, "heap_released_bytes", after.released)
	}
}

// sample is what a Tidy reads of the runtime.
type sample struct {
	allocs   uint64 // bytes allocated since the start
	live     uint64 // heap found live by the last collection
	released uint64 // free heap memory returned to the operating system
}

var sampleNames = []string{
	"/gc/heap/allocs:bytes",
	"/gc/heap/live:bytes",
	"/memory/classes/heap/released:bytes",
}

func read() sample {
	m := make([]metrics.Sample, len(sampleNames))
	for i, n := range sampleNames {
		m[i].Name = n
	}
	metrics.Read(m)
	v := func(i int) uint64 {
		if m[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return m[i].Value.Uint64()
	}
	return sample{allocs: v(0), live: v(1), released: v(2)}
}

// watch decides, from one sample every Options.Every, when to reclaim.
type watch struct {
	opt       Options
	allocs    []uint64 // the allocation counter over the last Quiet, oldest first
	last      uint64   // the allocation counter at the last reclaim
	reclaimed bool     // a reclaim has happened (the first, after start-up, needs no burst)
}

func newWatch(opt Options) *watch {
	n := int(opt.Quiet/opt.Every) + 1
	return &watch{opt: opt, allocs: make([]uint64, 0, n)}
}

// observe takes a sample and reports whether to reclaim now.
func (w *watch) observe(s sample) bool {
	if len(w.allocs) == cap(w.allocs) {
		copy(w.allocs, w.allocs[1:])
		w.allocs = w.allocs[:len(w.allocs)-1]
	}
	w.allocs = append(w.allocs, s.allocs)
	switch {
	case len(w.allocs) < cap(w.allocs):
		return false // not yet a whole Quiet of history
	case s.allocs-w.allocs[0] >= w.opt.QuietBytes:
		return false // busy
	case w.reclaimed && s.allocs-w.last < w.opt.MinReclaim:
		return false // no burst since the last reclaim
	}
	w.last, w.reclaimed = s.allocs, true
	return true
}

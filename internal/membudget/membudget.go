// Package membudget keeps aguard within its process-wide memory budget
// (--max-memory). It sets the Go runtime's soft memory limit (GOMEMLIMIT)
// from the budget, so that the garbage collector works harder as memory
// nears it, and tells the data plane whether a new stream may start: not
// once the memory in use is past 90 % of the budget, until it is back under
// 80 % (the gap keeps admission and readiness from flapping with each
// collection). Streams already running are not its business; they go on.
//
// The memory in use is what the process would hold right after a
// collection: the heap found live by the last one, plus what the runtime
// holds outside the heap (goroutine stacks, its own metadata). Memory the
// collector has not reclaimed yet does not count, so the budget is not
// mistaken for full by garbage; while past the threshold, a collection is
// run at most once a second, so that memory freed since the last one counts
// as free at once.
package membudget

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/prometheus/client_golang/prometheus"
)

// Threshold is the share of the budget past which new streams are refused.
const Threshold = 0.9

// Resume is the share of the budget under which memory must fall, once past
// Threshold, before new streams are taken again.
const Resume = 0.8

// limitRatio is the share of the budget given to the runtime as GOMEMLIMIT:
// the rest is room for what the runtime does not count (kernel socket
// buffers charged to the container, for one).
const limitRatio = 0.9

// How often the memory in use is read (a stream start asks more often) and
// how often, at most, a collection is forced while over the threshold.
const (
	checkEvery = 100 * time.Millisecond
	gcEvery    = time.Second
)

// ContainerLimit returns the memory limit of the container aguard runs in
// (cgroup v2 memory.max, or v1 memory.limit_in_bytes, found through
// /proc/self/mountinfo), or 0 when there is none or no cgroup to read.
func ContainerLimit() (int64, error) {
	limit, err := memlimit.FromCgroup()
	switch {
	case errors.Is(err, memlimit.ErrNoLimit), errors.Is(err, memlimit.ErrCgroupsNotSupported):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("membudget: read the container's memory limit: %w", err)
	case limit > math.MaxInt64:
		return 0, nil
	}
	return int64(limit), nil
}

// Options configure a Budget.
type Options struct {
	// Max is the budget in bytes; 0 means none: every stream may start, and
	// GOMEMLIMIT is left as it is.
	Max int64
	// Source names where Max came from, for the log ("--max-memory", "the
	// container's memory limit").
	Source string
	// Logger receives the budget at start and each crossing of the
	// threshold (default: discard).
	Logger *slog.Logger
	// Registerer, when set, registers aguard_memory_max_bytes,
	// aguard_memory_used_bytes, aguard_memory_overloaded and
	// aguard_overload_refusals_total.
	Registerer prometheus.Registerer

	// used reads the memory in use (tests replace it).
	used func() int64
}

// Budget is the process's memory budget. Its methods are safe for
// concurrent use.
type Budget struct {
	max       int64
	threshold int64
	resume    int64
	log       *slog.Logger
	used      func() int64
	refusals  prometheus.Counter

	mu      sync.Mutex // one reader of the memory in use at a time
	checked atomic.Int64
	over    atomic.Bool
	lastGC  atomic.Int64
	gcing   atomic.Bool
}

// New sets GOMEMLIMIT to 90 % of opt.Max, unless the GOMEMLIMIT environment
// variable is set (then the runtime already follows it), and returns the
// budget.
func New(opt Options) (*Budget, error) {
	if opt.Max < 0 {
		return nil, fmt.Errorf("membudget: Max is negative (%d)", opt.Max)
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.used == nil {
		opt.used = inUse
	}
	b := &Budget{
		max:       opt.Max,
		threshold: int64(float64(opt.Max) * Threshold),
		resume:    int64(float64(opt.Max) * Resume),
		log:       opt.Logger,
		used:      opt.used,
		refusals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aguard_overload_refusals_total",
			Help: "New streams refused with 503 overloaded because memory in use was past 90 % of --max-memory.",
		}),
	}
	if opt.Max > 0 {
		limit, err := memlimit.Set(
			memlimit.WithProvider(memlimit.Limit(uint64(opt.Max))),
			memlimit.WithRatio(limitRatio)) // it logs nothing: the line below says it all
		if err != nil {
			return nil, fmt.Errorf("membudget: set GOMEMLIMIT: %w", err)
		}
		opt.Logger.Info("memory budget", "max_bytes", opt.Max, "source", opt.Source,
			"refuse_streams_above_bytes", b.threshold, "gomemlimit_bytes", limit)
	}
	if opt.Registerer != nil {
		collectors := []prometheus.Collector{
			b.refusals,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "aguard_memory_max_bytes",
				Help: "The process's memory budget (--max-memory, or the container's limit); 0 when none.",
			}, func() float64 { return float64(b.max) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "aguard_memory_used_bytes",
				Help: "Memory in use as the budget counts it: the heap live at the last collection and what the runtime holds outside the heap.",
			}, func() float64 { return float64(b.used()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "aguard_memory_overloaded",
				Help: "1 while new streams are refused: from when memory in use passes 90 % of the budget until it is back under 80 %.",
			}, func() float64 {
				if b.over.Load() {
					return 1
				}
				return 0
			}),
		}
		for _, c := range collectors {
			if err := opt.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("membudget: register metrics: %w", err)
			}
		}
	}
	return b, nil
}

// Admit reports whether a new stream may start: always without a budget;
// with one, not from when the memory in use passes 90 % of it until it is
// back under 80 %. A refusal is counted.
func (b *Budget) Admit() bool {
	if b == nil || b.max == 0 {
		return true
	}
	if !b.check() {
		return true
	}
	b.refusals.Inc()
	return false
}

// check reports whether memory in use is past the threshold, reading it
// at most every checkEvery.
func (b *Budget) check() bool {
	now := time.Now().UnixNano()
	if now-b.checked.Load() < int64(checkEvery) || !b.mu.TryLock() {
		return b.over.Load()
	}
	defer b.mu.Unlock()
	b.checked.Store(now)
	used := b.used()
	over := used > b.threshold || b.over.Load() && used >= b.resume
	if was := b.over.Swap(over); was != over {
		if over {
			b.log.Warn("memory past 90 % of the budget; refusing new streams", "used_bytes", used, "max_bytes", b.max)
		} else {
			b.log.Info("memory back under 80 % of the budget; taking new streams", "used_bytes", used, "max_bytes", b.max)
		}
	}
	if over && now-b.lastGC.Load() >= int64(gcEvery) && b.gcing.CompareAndSwap(false, true) {
		b.lastGC.Store(now)
		go func() {
			defer b.gcing.Store(false)
			runtime.GC()
			b.checked.Store(0) // read again at the next stream start
		}()
	}
	return over
}

// Over reports whether new streams are refused: memory in use went past 90 %
// of the budget and is not yet back under 80 % (false without a budget).
func (b *Budget) Over() bool {
	return b != nil && b.max > 0 && b.check()
}

// Ready is an admin.Check: degraded while new streams are refused.
func (b *Budget) Ready() (bool, string) {
	if b.Over() {
		return true, "memory in use is past 90 % of --max-memory: new streams get 503 overloaded"
	}
	return true, ""
}

// samples are the runtime/metrics read for the memory in use.
var sampleNames = []string{
	"/gc/heap/live:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
}

// inUse is the memory the process would hold right after a collection: the
// heap live at the last one, plus everything the runtime holds that is not
// heap (stacks, metadata, buffers).
func inUse() int64 {
	s := make([]metrics.Sample, len(sampleNames))
	for i, name := range sampleNames {
		s[i].Name = name
	}
	metrics.Read(s)
	v := func(i int) int64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return int64(s[i].Value.Uint64())
	}
	live, total, released, free, objects, unused := v(0), v(1), v(2), v(3), v(4), v(5)
	return live + max(0, total-released-free-objects-unused)
}

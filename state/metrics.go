package state

import (
	"fmt"
	"time"

	"github.com/aguard/aguard/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

// Values of the result label of aguard_state_writes_total.
const (
	writeRedis    = "redis"    // acknowledged by Redis during the caller's call
	writeQueued   = "queued"   // queued: written behind the caller, or held while Redis was unreachable
	writeDrained  = "drained"  // a queued write, acknowledged by Redis later
	writeMemory   = "memory"   // stored in memory only (no Redis configured)
	writeConflict = "conflict" // a compare-and-set lost to another writer and was retried
	writeInvalid  = "invalid"  // refused: invalid input
	// writeSuperseded: a queued write not applied, because Redis no longer
	// held the version it was made from: another replica changed the record
	// while this one could not reach Redis (Store.supersede).
	writeSuperseded = "superseded"
)

// metrics are a Store's Prometheus collectors.
type metrics struct {
	redisUp     prometheus.Gauge
	writes      *prometheus.CounterVec
	queueDepth  prometheus.Gauge
	dropped     prometheus.Counter
	noticesLost prometheus.Counter
	cacheHits   prometheus.Counter
	cacheMisses prometheus.Counter

	transitions       *prometheus.CounterVec
	protectedEntries  prometheus.Gauge
	protectedBytes    prometheus.Gauge
	protectedMax      prometheus.Gauge
	protectedOverflow *prometheus.CounterVec
	holdsRefused      prometheus.Counter
	dataLost          *prometheus.CounterVec
	writeBack         *prometheus.CounterVec
	deadlinesFired    prometheus.Counter
	runsLost          prometheus.Counter
	// approvalWait is observed when an approval is decided, by outcome
	// (approvalOutcome); approvalsPending is read at scrape time.
	approvalWait     *prometheus.HistogramVec
	approvalsPending prometheus.Collector

	redisSlow  prometheus.Counter
	writesLate prometheus.Counter
	cacheBytes prometheus.Gauge
	queueBytes prometheus.Gauge
}

// Values of the outcome label of aguard_approval_wait_seconds.
const (
	outcomeApproved = "approved"
	outcomeRejected = "rejected"
	outcomeTimedOut = "timed_out"
)

// newMetrics builds a Store's collectors; pending counts the approvals
// awaiting a decision, at scrape time.
func newMetrics(reg prometheus.Registerer, pending func() float64) (*metrics, error) {
	m := &metrics{
		redisUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "aguard_state_redis_up",
			Help: "1 while Redis answers, 0 while it is unreachable or not configured.",
		}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aguard_state_writes_total",
			Help: "Record and thread writes by result: redis, queued, drained, memory, conflict, invalid.",
		}, []string{"result"}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "aguard_state_queue_depth",
			Help: "Writes waiting for Redis.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aguard_state_queue_dropped_total",
			Help: "Queued writes dropped, oldest first, because the queue was full.",
		}),
		noticesLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aguard_state_notices_dropped_total",
			Help: "Notices (webhooks) dropped, oldest first, because too many waited to be passed to the notifier.",
		}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aguard_state_cache_hits_total",
			Help: "Reads served from this process's memory.",
		}),
		cacheMisses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aguard_state_cache_misses_total",
			Help: "Reads that had to go to Redis or found nothing.",
		}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aguard_state_transitions_total",
			Help: "Lifecycle transitions the store applied to stored records (approve, reject, expire_approval, answer, lose_run, …).",
		}, []string{"transition"}),
		protectedEntries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "aguard_state_protected_entries",
			Help: "Held approvals, pending calls and the threads listing them kept in memory, never evicted.",
		}),
		protectedBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "aguard_state_protected_bytes",
			Help: "Estimated bytes of the protected entries.",
		}),
		protectedMax: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "aguard_state_protected_max_entries",
			Help: "The bound on protected entries (--ledger-cache).",
		}),
		protectedOverflow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aguard_state_protected_overflow_total",
			Help: "Pending calls (kind=call) and threads (kind=thread) kept evictable because the protected set was full.",
		}, []string{"kind"}),
		holdsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aguard_state_holds_refused_total",
			Help: "Approvals the policy required that were denied because the protected set was full.",
		}),
		dataLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aguard_state_redis_data_lost_total",
			Help: "Losses of Redis data detected, by cause: marker, restart, eviction, missing.",
		}, []string{"cause"}),
		writeBack: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aguard_state_writeback_total",
			Help: "Records and threads written back after a loss (result=written), or found newer in Redis (result=newer_in_redis).",
		}, []string{"result"}),
		deadlinesFired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aguard_state_approvals_expired_total",
			Help: "Approvals this replica timed out at their deadline.",
		}),
		runsLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aguard_state_runs_lost_total",
			Help: "Runs of dead replicas whose open calls this replica ended.",
		}),
		approvalWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "aguard_approval_wait_seconds",
			Help:    "Time from a held call's start to its approval decision, by outcome: approved, rejected, timed_out (counted by the replica that recorded the decision).",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600},
		}, []string{"outcome"}),
		approvalsPending: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "aguard_approvals_pending",
			Help: "Tool calls held for an approval nobody has decided yet, that this replica keeps in its protected memory (with Redis, replicas share them: take the max).",
		}, pending),
		redisSlow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aguard_state_redis_slow_total",
			Help: "Redis round trips that took longer than --redis-timeout.",
		}),
		writesLate: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aguard_state_writes_late_total",
			Help: "Writes a caller waited for (a RUN_FINISHED's) that Redis had not acknowledged within --redis-timeout; they stay queued.",
		}),
		cacheBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "aguard_state_cache_bytes",
			Help: "Estimated bytes of the records and threads in the ledger's LRU (bounded by --ledger-cache-bytes).",
		}),
		queueBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "aguard_state_queue_bytes",
			Help: "Estimated bytes of the writes waiting for Redis (bounded at 64 MiB).",
		}),
	}
	for _, o := range []string{outcomeApproved, outcomeRejected, outcomeTimedOut} {
		m.approvalWait.WithLabelValues(o)
	}
	for _, r := range []string{writeRedis, writeQueued, writeDrained, writeMemory, writeConflict, writeInvalid, writeSuperseded} {
		m.writes.WithLabelValues(r)
	}
	for _, c := range []lossCause{causeMarker, causeRestart, causeEviction, causeMissing} {
		m.dataLost.WithLabelValues(string(c))
	}
	if reg == nil {
		return m, nil
	}
	all := []prometheus.Collector{m.redisUp, m.writes, m.queueDepth, m.dropped, m.noticesLost, m.cacheHits, m.cacheMisses,
		m.transitions, m.protectedEntries, m.protectedBytes, m.protectedMax, m.protectedOverflow, m.holdsRefused,
		m.dataLost, m.writeBack, m.deadlinesFired, m.runsLost, m.approvalWait, m.approvalsPending,
		m.redisSlow, m.writesLate, m.cacheBytes, m.queueBytes}
	if err := promreg.All(reg, all...); err != nil {
		return nil, fmt.Errorf("state: register metrics: %w", err)
	}
	return m, nil
}

// approvalDecided observes the wait of c, whose approval transition t
// just applied (approve, reject, expire_approval): from the call's start
// to the decision, by the status the decision left it in.
func (m *metrics) approvalDecided(t TransitionName, c *ToolCall, now time.Time) {
	if c == nil || (t != TransitionApprove && t != TransitionReject && t != TransitionExpireApproval) {
		return
	}
	outcome := ""
	switch c.Status {
	case StatusExecuting:
		outcome = outcomeApproved
	case StatusCancelled:
		outcome = outcomeRejected
	case StatusTimedOut:
		outcome = outcomeTimedOut
	default:
		return
	}
	at := now
	if c.ApprovedAt != nil {
		at = *c.ApprovedAt
	}
	m.approvalWait.WithLabelValues(outcome).Observe(max(at.Sub(c.CreatedAt).Seconds(), 0))
}

package state

import (
	"fmt"

	"github.com/aguard/aguard/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

// Values of the result label of aguard_state_writes_total.
const (
	writeRedis    = "redis"    // acknowledged by Redis during the caller's call
	writeQueued   = "queued"   // queued because Redis was unreachable
	writeDrained  = "drained"  // a queued write, acknowledged by Redis later
	writeMemory   = "memory"   // stored in the in-process LRU only (no Redis configured)
	writeConflict = "conflict" // a compare-and-set lost to another writer and was retried
	writeInvalid  = "invalid"  // refused: invalid input
)

// metrics are a Store's Prometheus collectors.
type metrics struct {
	redisUp     prometheus.Gauge
	writes      *prometheus.CounterVec
	queueDepth  prometheus.Gauge
	dropped     prometheus.Counter
	cacheHits   prometheus.Counter
	cacheMisses prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
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
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aguard_state_cache_hits_total",
			Help: "Reads served from this process's memory.",
		}),
		cacheMisses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aguard_state_cache_misses_total",
			Help: "Reads that had to go to Redis or found nothing.",
		}),
	}
	for _, r := range []string{writeRedis, writeQueued, writeDrained, writeMemory, writeConflict, writeInvalid} {
		m.writes.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	all := []prometheus.Collector{m.redisUp, m.writes, m.queueDepth, m.dropped, m.cacheHits, m.cacheMisses}
	if err := promreg.All(reg, all...); err != nil {
		return nil, fmt.Errorf("state: register metrics: %w", err)
	}
	return m, nil
}

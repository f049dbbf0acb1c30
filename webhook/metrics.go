package webhook

import (
	"fmt"

	"github.com/aguard/aguard/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

// Values of the result label of aguard_webhook_deliveries_total.
const (
	deliveryDelivered = "delivered" // a receiver answered 2xx
	deliveryFailed    = "failed"    // every attempt failed
	deliveryDropped   = "dropped"   // discarded unsent: queue full (in count or bytes), or still queued when Close gave up
)

// Values of the result label of aguard_webhook_attempts_total.
const (
	attemptOK     = "ok"     // 2xx
	attemptError  = "error"  // no HTTP answer: connection refused, timeout, …
	attemptStatus = "status" // an HTTP answer other than 2xx
)

// metrics are a Notifier's Prometheus collectors.
type metrics struct {
	deliveries *prometheus.CounterVec
	attempts   *prometheus.CounterVec
	queueDepth prometheus.Gauge
	queueBytes prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aguard_webhook_deliveries_total",
			Help: "Webhook deliveries (one event to one URL) by outcome: delivered, failed (attempts exhausted), dropped (queue full or shut down unsent).",
		}, []string{"result"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aguard_webhook_attempts_total",
			Help: "Webhook HTTP attempts by result: ok (2xx), error (no HTTP answer), status (any other HTTP status).",
		}, []string{"result"}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "aguard_webhook_queue_depth",
			Help: "Webhook deliveries waiting to be sent, over all URLs (the one in flight per URL not included).",
		}),
		queueBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "aguard_webhook_queue_bytes",
			Help: "Bytes of the webhook bodies waiting to be sent, summed over the URLs' queues (a body shared by several URLs counts once per URL).",
		}),
	}
	for _, r := range []string{deliveryDelivered, deliveryFailed, deliveryDropped} {
		m.deliveries.WithLabelValues(r)
	}
	for _, r := range []string{attemptOK, attemptError, attemptStatus} {
		m.attempts.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	all := []prometheus.Collector{m.deliveries, m.attempts, m.queueDepth, m.queueBytes}
	if err := promreg.All(reg, all...); err != nil {
		return nil, fmt.Errorf("webhook: register metrics: %w", err)
	}
	return m, nil
}

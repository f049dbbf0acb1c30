package policy

import (
	"context"
	"fmt"
	"time"

	"github.com/aguard/aguard/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// metrics are an Engine's decision metrics.
type metrics struct {
	// decisions by phase, then action: every pair a decision can carry,
	// made at start, so that a series exists (at 0) before its first
	// decision.
	decisions map[string]map[string]prometheus.Counter
	seconds   prometheus.Histogram
	// queued counts the calls waiting for their turn to be inspected
	// (Engine.Reserve).
	queued prometheus.Gauge
}

// phaseActions are the actions a decision can carry at each phase.
var phaseActions = map[string][]string{
	PhaseToolCallStart: {ActionStream, ActionHold, ActionHide},
	PhaseToolCallEnd:   {ActionAllow, ActionDeny, ActionRequireApproval},
	PhaseRunFinished:   {ActionAllow, ActionDeny, ActionRequireApproval},
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "aguard_policy_decisions_total",
		Help: "Policy decisions by action and phase; a decision the policy could not make (an error, a timeout) counts as the deny (hold, at tool_call_start) it becomes.",
	}, []string{"action", "phase"})
	m := &metrics{
		decisions: map[string]map[string]prometheus.Counter{},
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "aguard_policy_evaluation_seconds",
			Help:    "Time to make one policy decision: building the input, evaluating the policy, reading its output.",
			Buckets: []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25},
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "aguard_policy_inspections_waiting",
			Help: "Tool calls whose large arguments wait for their turn to be inspected: the JSON values inspected at once are bounded process-wide.",
		}),
	}
	for phase, actions := range phaseActions {
		m.decisions[phase] = map[string]prometheus.Counter{}
		for _, a := range actions {
			m.decisions[phase][a] = vec.WithLabelValues(a, phase)
		}
	}
	if reg != nil {
		if err := promreg.All(reg, vec, m.seconds, m.queued); err != nil {
			return nil, fmt.Errorf("policy: register metrics: %w", err)
		}
	}
	return m, nil
}

// observe counts decision d, made for in in took. A phase or action
// outside the known pairs (a nil input) is not counted by action: the
// label set stays bounded whatever the caller passes. A nil m (an Engine
// not made by New) counts nothing.
func (m *metrics) observe(in *Input, d *Decision, took time.Duration) {
	if m == nil {
		return
	}
	m.seconds.Observe(took.Seconds())
	if in == nil {
		return
	}
	if c, ok := m.decisions[in.Phase][d.Action]; ok {
		c.Inc()
	}
}

// waiting adds d to the calls waiting to be inspected; a nil m counts
// nothing.
func (m *metrics) waiting(d float64) {
	if m != nil {
		m.queued.Add(d)
	}
}

// Span attributes of a policy evaluation span (README, "Tracing").
const (
	spanName       = "aguard.policy.evaluate"
	attrPhase      = attribute.Key("aguard.policy.phase")
	attrAction     = attribute.Key("aguard.decision.action")
	attrDecisionID = attribute.Key("aguard.decision.id")
	attrRevision   = attribute.Key("aguard.policy.revision")
)

// startSpan starts the evaluation's span, a child of ctx's span when that
// one records; otherwise it returns ctx and nil, and costs nothing.
func startSpan(ctx context.Context, in *Input) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, nil
	}
	attrs := []attribute.KeyValue{}
	if in != nil {
		attrs = append(attrs, attrPhase.String(in.Phase),
			attribute.String("gen_ai.tool.name", in.Call.Name), attribute.String("gen_ai.tool.call.id", in.Call.ID))
	}
	return parent.TracerProvider().Tracer("github.com/aguard/aguard/policy").Start(ctx, spanName, trace.WithAttributes(attrs...))
}

// endSpan records decision d on span and ends it; an evaluation that could
// not decide is an error.
func endSpan(span trace.Span, d *Decision) {
	if span == nil {
		return
	}
	span.SetAttributes(attrAction.String(d.Action), attrDecisionID.String(d.DecisionID), attrRevision.String(d.Revision))
	if d.Err != nil {
		span.RecordError(d.Err)
		span.SetStatus(codes.Error, d.Reason)
	}
	span.End()
}

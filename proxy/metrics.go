package proxy

import (
	"github.com/aguard/aguard/agui"
	"github.com/prometheus/client_golang/prometheus"
)

// eventTypes are the event types counted under their own label; anything else
// is counted as "OTHER", so a producer cannot grow the label set.
var eventTypes = []string{
	"RUN_STARTED", "RUN_FINISHED", "RUN_ERROR", "STEP_STARTED", "STEP_FINISHED",
	"TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "TEXT_MESSAGE_CHUNK",
	"TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_CHUNK", "TOOL_CALL_RESULT",
	"STATE_SNAPSHOT", "STATE_DELTA", "MESSAGES_SNAPSHOT", "ACTIVITY_SNAPSHOT", "ACTIVITY_DELTA",
	"REASONING_START", "REASONING_END", "REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT",
	"REASONING_MESSAGE_END", "REASONING_MESSAGE_CHUNK", "REASONING_ENCRYPTED_VALUE",
	"SUBAGENT_STARTED", "SUBAGENT_FINISHED", "SUBAGENT_ERROR", "RAW", "CUSTOM",
	"THINKING_START", "THINKING_END", "THINKING_TEXT_MESSAGE_START",
	"THINKING_TEXT_MESSAGE_CONTENT", "THINKING_TEXT_MESSAGE_END",
}

// Metrics are the data plane's Prometheus metrics.
type Metrics struct {
	streamsOpen    prometheus.Gauge
	requests       *prometheus.CounterVec
	eventsIn       map[string]prometheus.Counter
	eventsOut      map[string]prometheus.Counter
	bytesIn        prometheus.Counter
	bytesOut       prometheus.Counter
	upstreamErrors *prometheus.CounterVec
	// upstreamConns counts connections to agents by event (connEvents).
	upstreamConns   map[string]prometheus.Counter
	upstreamResends prometheus.Counter
	streamEnds      *prometheus.CounterVec
	notes           *prometheus.CounterVec
	duration        prometheus.Histogram
	// upstreamFirstByte is the time from sending a request to an agent to
	// its answer's head.
	upstreamFirstByte prometheus.Histogram
}

// NewMetrics registers the data plane's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	in := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "aguard_events_in_total", Help: "Events read from agents, by type.",
	}, []string{"type"})
	out := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "aguard_events_out_total", Help: "Events written to consumers, by type.",
	}, []string{"type"})
	m := &Metrics{
		streamsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "aguard_streams_open", Help: "Event streams currently open.",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aguard_requests_total", Help: "Requests on the data plane, by HTTP status answered.",
		}, []string{"status"}),
		eventsIn:  map[string]prometheus.Counter{},
		eventsOut: map[string]prometheus.Counter{},
		bytesIn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aguard_stream_bytes_in_total", Help: "Event data bytes read from agents.",
		}),
		bytesOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aguard_stream_bytes_out_total", Help: "Bytes written to consumers, framing included.",
		}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aguard_upstream_errors_total", Help: "Failures talking to agents, by kind.",
		}, []string{"kind"}),
		streamEnds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aguard_streams_ended_total", Help: "Event streams ended, by how they ended.",
		}, []string{"end"}),
		notes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aguard_stream_notes_total", Help: "What the stream checks noticed and acted on, by kind.",
		}, []string{"kind"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "aguard_stream_duration_seconds", Help: "Duration of event streams.",
			Buckets: []float64{0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600},
		}),
	}
	for _, t := range append(eventTypes, "OTHER") {
		m.eventsIn[t] = in.WithLabelValues(t)
		m.eventsOut[t] = out.WithLabelValues(t)
	}
	conns := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "aguard_upstream_connections_total",
		Help: "Connections to agents: dialed, reused, agent_closed (closed by the agent while idle), expired (idle for the keep-alive bound).",
	}, []string{"event"})
	m.upstreamConns = map[string]prometheus.Counter{}
	for _, e := range connEvents {
		m.upstreamConns[e] = conns.WithLabelValues(e)
	}
	m.upstreamResends = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "aguard_upstream_resends_total",
		Help: "Requests sent again on another connection because the agent provably never received them (or, for GET and other safe methods, answered nothing on a reused connection).",
	})
	m.upstreamFirstByte = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "aguard_upstream_first_byte_seconds",
		Help:    "Time from sending a request to an agent until its response headers arrive (the agent's time to first byte).",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
	})
	reg.MustRegister(m.upstreamFirstByte, m.streamsOpen, m.requests, in, out, m.bytesIn, m.bytesOut,
		m.upstreamErrors, conns, m.upstreamResends, m.streamEnds, m.notes, m.duration)
	return m
}

// countEvent counts an event of type typ: TEXT_MESSAGE_CONTENT in batched
// (a stream's own count, added to the shared counter later: see counts),
// other types in their shared counter in m, looked up without allocating
// (the maps are never written after NewMetrics).
func countEvent(m map[string]prometheus.Counter, batched *float64, typ string) {
	if typ == agui.EventTextContent {
		*batched++
		return
	}
	c, ok := m[typ]
	if !ok {
		c = m["OTHER"]
	}
	c.Inc()
}

package tracing

import (
	"context"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/propagation"
)

// Propagator is the W3C Trace Context propagator (traceparent, tracestate):
// what aguard reads from a consumer's request and writes on the agent's.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Extract returns ctx with the remote span context h carries, if any.
func Extract(ctx context.Context, h *fasthttp.RequestHeader) context.Context {
	return Propagator.Extract(ctx, requestCarrier{h})
}

// Inject writes the span context of ctx into h, replacing the consumer's
// traceparent and tracestate.
func Inject(ctx context.Context, h *fasthttp.RequestHeader) {
	h.Del("traceparent")
	h.Del("tracestate")
	Propagator.Inject(ctx, requestCarrier{h})
}

// requestCarrier is a propagation.TextMapCarrier over fasthttp's headers.
type requestCarrier struct{ h *fasthttp.RequestHeader }

func (c requestCarrier) Get(key string) string { return string(c.h.Peek(key)) }

func (c requestCarrier) Set(key, value string) { c.h.Set(key, value) }

func (c requestCarrier) Keys() []string {
	var keys []string
	for k := range c.h.All() {
		keys = append(keys, string(k))
	}
	return keys
}

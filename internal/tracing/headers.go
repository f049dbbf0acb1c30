package tracing

import (
	"context"
	"fmt"
	"strings"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/contrib/propagators/autoprop"
	"go.opentelemetry.io/otel/propagation"
)

// DefaultPropagators is OTEL_PROPAGATORS when unset, as the OpenTelemetry
// specification has it: W3C Trace Context (traceparent, tracestate) and W3C
// Baggage.
const DefaultPropagators = "tracecontext,baggage"

// Propagators returns the propagator OTEL_PROPAGATORS names (through
// getenv; DefaultPropagators when unset): a comma-separated list of
// tracecontext, baggage, b3, b3multi, jaeger, xray, ottrace or none. An
// unknown name is an error that names it.
func Propagators(getenv func(string) string) (propagation.TextMapPropagator, error) {
	v := strings.TrimSpace(getenv("OTEL_PROPAGATORS"))
	if v == "" {
		v = DefaultPropagators
	}
	var names []string
	for n := range strings.SplitSeq(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	p, err := autoprop.TextMapPropagator(names...)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTEL_PROPAGATORS=%q: %w", v, err)
	}
	return p, nil
}

// Extract returns ctx with the remote span context (and baggage) h carries
// in the fields of p, if any.
func Extract(ctx context.Context, p propagation.TextMapPropagator, h *fasthttp.RequestHeader) context.Context {
	return p.Extract(ctx, requestCarrier{h})
}

// Inject writes the span context of ctx into h with p, first removing
// every field p writes (the consumer's traceparent and tracestate, for
// one), so that the agent sees aguard's span as the parent.
func Inject(ctx context.Context, p propagation.TextMapPropagator, h *fasthttp.RequestHeader) {
	for _, f := range p.Fields() {
		h.Del(f)
		if strings.EqualFold(f, "x-b3-spanid") {
			// B3's propagator reads X-B3-ParentSpanId but does not list it
			// among its fields: a consumer's would sit beside aguard's span.
			h.Del("X-B3-ParentSpanId")
		}
	}
	p.Inject(ctx, requestCarrier{h})
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

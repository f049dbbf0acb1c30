package tracing

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// TestPropagatorsFollowOTEL_PROPAGATORS pins the standard variable: W3C
// Trace Context and Baggage when unset, the names it lists otherwise, and
// an error naming an unknown one.
func TestPropagatorsFollowOTEL_PROPAGATORS(t *testing.T) {
	for _, tt := range []struct {
		value string
		want  []string
	}{
		{"", []string{"baggage", "traceparent", "tracestate"}},
		{"b3multi", []string{"x-b3-flags", "x-b3-sampled", "x-b3-spanid", "x-b3-traceid"}},
		{" tracecontext , b3 ", []string{"b3", "traceparent", "tracestate"}},
	} {
		p, err := Propagators(env(map[string]string{"OTEL_PROPAGATORS": tt.value}))
		if err != nil {
			t.Fatalf("OTEL_PROPAGATORS=%q: %v", tt.value, err)
		}
		var got []string
		for _, f := range p.Fields() {
			got = append(got, strings.ToLower(f))
		}
		if slices.Sort(got); !slices.Equal(got, tt.want) {
			t.Errorf("OTEL_PROPAGATORS=%q: fields %v, want %v", tt.value, got, tt.want)
		}
	}
	if _, err := Propagators(env(map[string]string{"OTEL_PROPAGATORS": "tracecontext,smoke-signals"})); err == nil || !strings.Contains(err.Error(), "smoke-signals") {
		t.Errorf("an unknown propagator: err %v, want one naming it", err)
	}
}

// TestInjectReplacesTheConsumersContext pins that the agent's request
// carries aguard's span context only: the consumer's fields of the same
// propagator are replaced, not kept beside it.
func TestInjectReplacesTheConsumersContext(t *testing.T) {
	p, err := Propagators(env(map[string]string{"OTEL_PROPAGATORS": "b3multi"}))
	if err != nil {
		t.Fatal(err)
	}
	var h fasthttp.RequestHeader
	h.Set("X-B3-TraceId", "0af7651916cd43dd8448eb211c80319c")
	h.Set("X-B3-SpanId", "b7ad6b7169203331")
	h.Set("X-B3-ParentSpanId", "1111111111111111")
	h.Set("X-B3-Sampled", "1")
	ctx := Extract(context.Background(), p, &h)
	in := trace.SpanContextFromContext(ctx)
	if in.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || in.SpanID().String() != "b7ad6b7169203331" {
		t.Fatalf("extracted %v, want the consumer's trace and span", in)
	}
	ours, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx = trace.ContextWithSpanContext(ctx, in.WithSpanID(ours))
	Inject(ctx, p, &h)
	if got := string(h.Peek("X-B3-SpanId")); got != "00f067aa0ba902b7" {
		t.Errorf("X-B3-SpanId %q, want aguard's span", got)
	}
	if got := h.Peek("X-B3-ParentSpanId"); len(got) != 0 {
		t.Errorf("the consumer's X-B3-ParentSpanId %q was kept", got)
	}
	if got := string(h.Peek("X-B3-TraceId")); got != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("X-B3-TraceId %q, want the consumer's trace", got)
	}
}

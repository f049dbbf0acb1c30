package bench_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aguard/aguard/internal/tracing"
	"github.com/aguard/aguard/proxy"
)

// BenchmarkRunTraced is BenchmarkRun with tracing on as aguard serve
// configures it from OTEL_* variables (OTLP/HTTP protobuf, the batch span
// processor, the default sampler: every trace the consumer samples, and
// the benchmark's consumer samples them all), exporting to a receiver
// that reads and drops each export. Each run makes five spans.
func BenchmarkRunTraced(b *testing.B) {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	b.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	tp, err := tracing.New(context.Background(), func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL}[k]
	}, "bench", nil)
	if err != nil || tp == nil {
		b.Fatalf("tracing: %v %v", tp, err)
	}
	defer tp.Shutdown(context.Background())
	benchRun(b, func(o *proxy.Options) { o.Tracer = tp.TracerProvider() })
}

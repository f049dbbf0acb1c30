// Package tracing sets up aguard's OpenTelemetry tracing from the standard
// OTEL_* environment variables
// (https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/)
// and carries trace context in and out of fasthttp headers with the
// propagators OTEL_PROPAGATORS names (by default W3C Trace Context,
// https://www.w3.org/TR/trace-context/, and W3C Baggage). It builds the SDK's provider and exporter
// and nothing else: which spans aguard makes is package proxy's.
//
// Tracing is off unless an OTLP endpoint is set: then New returns a nil
// provider, and the data plane makes no span at all.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// DefaultServiceName is service.name when neither OTEL_SERVICE_NAME nor
// OTEL_RESOURCE_ATTRIBUTES names one.
const DefaultServiceName = "aguard"

// Provider is a running tracer provider and its exporter.
type Provider struct {
	sdk *sdktrace.TracerProvider
	// Protocol is the OTLP protocol in use: "http/protobuf" or "grpc".
	Protocol string
	prop     propagation.TextMapPropagator
}

// Propagator returns what carries trace context in and out of requests, as
// OTEL_PROPAGATORS names it (Propagators); nil on a nil Provider.
func (p *Provider) Propagator() propagation.TextMapPropagator {
	if p == nil {
		return nil
	}
	return p.prop
}

// TracerProvider returns the provider to make spans with; nil on a nil
// Provider (tracing off).
func (p *Provider) TracerProvider() trace.TracerProvider {
	if p == nil {
		return nil
	}
	return p.sdk
}

// Shutdown exports the spans still queued and stops the exporter, within
// ctx. A nil Provider has nothing to do.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.sdk.Shutdown(ctx)
}

// Export says whether and where aguard sends spans, as the OTEL_*
// variables set it.
type Export struct {
	// Off says why tracing is off ("OTEL_SDK_DISABLED is true", …); "" when
	// it is on.
	Off string
	// Protocol is the OTLP protocol: "http/protobuf" or "grpc".
	Protocol string
	// Endpoint is the collector's URL as given, in the variable EndpointVar
	// (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT).
	Endpoint, EndpointVar string
	// Propagators is OTEL_PROPAGATORS, or DefaultPropagators when unset.
	Propagators string
	prop        propagation.TextMapPropagator
}

// FromEnv reads through getenv whether tracing is on and where spans go,
// without starting anything: off when OTEL_SDK_DISABLED is true,
// OTEL_TRACES_EXPORTER is none, or no OTLP endpoint is set
// (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT). It fails
// on an exporter other than otlp, an unknown propagator (Propagators), or an
// OTLP protocol other than http/protobuf and grpc
// (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL).
func FromEnv(getenv func(string) string) (Export, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return Export{Off: "OTEL_SDK_DISABLED is true"}, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "", "otlp":
	case "none":
		return Export{Off: "OTEL_TRACES_EXPORTER is none"}, nil
	default:
		return Export{}, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER=%q: aguard exports traces with otlp only (or none)", exp)
	}
	e := Export{EndpointVar: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}
	if e.Endpoint = getenv(e.EndpointVar); e.Endpoint == "" {
		e.EndpointVar = "OTEL_EXPORTER_OTLP_ENDPOINT"
		e.Endpoint = getenv(e.EndpointVar)
	}
	if e.Endpoint == "" {
		return Export{Off: "no OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}, nil
	}
	var err error
	if e.prop, err = Propagators(getenv); err != nil {
		return Export{}, err
	}
	if e.Propagators = strings.TrimSpace(getenv("OTEL_PROPAGATORS")); e.Propagators == "" {
		e.Propagators = DefaultPropagators
	}
	e.Protocol = getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if e.Protocol == "" {
		e.Protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch e.Protocol {
	case "":
		e.Protocol = "http/protobuf"
	case "http/protobuf", "grpc":
	default:
		return Export{}, fmt.Errorf("tracing: OTLP protocol %q: want http/protobuf or grpc", e.Protocol)
	}
	return e, nil
}

// New reads the OTEL_* variables through getenv (FromEnv) and starts
// tracing, or returns nil when tracing is off. The exporter reads the rest
// of the OTLP variables itself (headers, timeout, certificates,
// compression); the SDK reads OTEL_TRACES_SAMPLER(_ARG), OTEL_BSP_* and
// OTEL_RESOURCE_ATTRIBUTES. version is service.version. OTEL_PROPAGATORS
// chooses the Propagator. Export failures are logged to log, never fatal: a
// collector that is down costs spans, not requests.
func New(ctx context.Context, getenv func(string) string, version string, log *slog.Logger) (*Provider, error) {
	e, err := FromEnv(getenv)
	if err != nil || e.Off != "" {
		return nil, err
	}
	protocol := e.Protocol
	var exp *otlptrace.Exporter
	if protocol == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter (%s): %w", protocol, err)
	}
	// Later sources win: the environment's service.name over the default.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", DefaultServiceName), attribute.String("service.version", version)),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: resource from OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	if log != nil {
		// The SDK reports export failures through the global handler.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			log.Warn(MsgExportFailed, "component", "opentelemetry", "err", err)
		}))
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{sdk: sdk, Protocol: protocol, prop: e.prop}, nil
}

// MsgExportFailed is the msg of the log line for a failure the SDK
// reports (a batch of spans the collector did not take).
const MsgExportFailed = "trace export failed"

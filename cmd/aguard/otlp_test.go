package main

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// span is one exported span, flattened for assertions; ids are hex.
type span struct {
	traceID, spanID, parentID string
	name                      string
	kind                      tracepb.Span_SpanKind
	attrs                     map[string]any
	events                    map[string]map[string]any // by name
	status                    tracepb.Status_StatusCode
	statusMessage             string
	service                   string // the resource's service.name
}

// otlpReceiver collects the spans OTLP exports deliver to it, over HTTP
// (protobuf, as an OpenTelemetry Collector's otlphttp receiver takes
// them) or gRPC.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []span
	// changed is signalled (without blocking) after each export.
	changed chan struct{}
}

func newOTLPReceiver() *otlpReceiver { return &otlpReceiver{changed: make(chan struct{}, 1)} }

// serveHTTP starts an OTLP/HTTP endpoint and returns its base URL.
func (r *otlpReceiver) serveHTTP(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("OTLP export to %s as %q, want /v1/traces as application/x-protobuf", req.URL.Path, req.Header.Get("Content-Type"))
			http.Error(w, "unexpected", http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(req.Body)
		var ex coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &ex)
		}
		if err != nil {
			t.Errorf("OTLP export body: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&ex)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// serveGRPC starts an OTLP/gRPC endpoint and returns its address.
func (r *otlpReceiver) serveGRPC(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, r)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// Export implements the OTLP gRPC trace service.
func (r *otlpReceiver) Export(_ context.Context, ex *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.add(ex)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) add(ex *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	for _, rs := range ex.ResourceSpans {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				service = kv.Value.GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := span{
					traceID: hex.EncodeToString(s.TraceId), spanID: hex.EncodeToString(s.SpanId),
					parentID: hex.EncodeToString(s.ParentSpanId), name: s.Name, kind: s.Kind,
					attrs: attrMap(s.Attributes), events: map[string]map[string]any{},
					status: s.GetStatus().GetCode(), statusMessage: s.GetStatus().GetMessage(), service: service,
				}
				for _, e := range s.Events {
					sp.events[e.Name] = attrMap(e.Attributes)
				}
				r.spans = append(r.spans, sp)
			}
		}
	}
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func attrMap(kvs []*commonpb.KeyValue) map[string]any {
	m := map[string]any{}
	for _, kv := range kvs {
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_BoolValue:
			m[kv.Key] = v.BoolValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = v.IntValue
		default:
			m[kv.Key] = kv.Value.String()
		}
	}
	return m
}

// trace returns the spans received of trace id.
func (r *otlpReceiver) trace(id string) []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []span
	for _, s := range r.spans {
		if s.traceID == id {
			out = append(out, s)
		}
	}
	return out
}

package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/policies"
)

// benchArgs returns tool-call arguments of about size bytes: one long string
// field ("text"), or an array of small records ("records"), the costly shape
// for the conversion to an OPA value.
func benchArgs(tb testing.TB, shape string, size int) json.RawMessage {
	tb.Helper()
	var v any
	switch shape {
	case "small":
		v = map[string]any{"kind": "bar", "title": "Revenue", "series": []int{1, 2, 3}}
	case "text":
		v = map[string]any{"path": "/tmp/report.md", "content": strings.Repeat("lorem ipsum ", size/12)}
	case "records":
		var rows []map[string]any
		for n := 0; n < size; n += 50 {
			rows = append(rows, map[string]any{"id": len(rows), "name": fmt.Sprintf("row-%d", len(rows)), "ok": true, "score": 0.5})
		}
		v = map[string]any{"rows": rows}
	}
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func benchInput(args json.RawMessage) *Input {
	return &Input{
		Phase: "tool_call_end",
		Call: CallInput{
			ID: "call-1", Name: "render", Arguments: args, ArgumentsText: string(args),
			ParentMessageID: "msg-1",
		},
		Tool:    ToolInput{Advertised: true, Frontend: true, Description: "Render", Parameters: json.RawMessage(`{"type":"object"}`)},
		Schema:  SchemaResult{Checked: true, Valid: true, Errors: []string{}},
		Run:     RunInfo{ThreadID: "t-1", RunID: "r-1", ProtocolVersion: "1.0", AdvertisedTools: []string{"render", "search"}},
		Request: RequestInfo{Path: "/agent", Headers: map[string]string{"x-user": "ann", "content-type": "application/json"}, RemoteAddr: "127.0.0.1:4000"},
	}
}

// BenchmarkDecide measures Decide with the default policy: the conversion
// of the input (arguments included) to an OPA value, the evaluation and the
// decision id. It reports the median and 99th percentile per decision.
//
//	go test -run '^$' -bench BenchmarkDecide -benchmem ./policy/
func BenchmarkDecide(b *testing.B) {
	ctx := context.Background()
	e, err := New(ctx, Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		shape string
	}{
		{"small", "small"},
		{"10KB-string", "text"},
		{"10KB-records", "records"},
	} {
		args := benchArgs(b, c.shape, 10<<10)
		in := benchInput(args)
		if d := e.Decide(ctx, in); d.Action != ActionAllow || d.Err != nil {
			b.Fatalf("%s: decision %+v", c.name, d)
		}
		b.Run(fmt.Sprintf("%s-%dB", c.name, len(args)), func(b *testing.B) {
			b.ReportAllocs()
			durs := make([]time.Duration, 0, 1<<16)
			for b.Loop() {
				start := time.Now()
				d := e.Decide(ctx, in)
				durs = append(durs, time.Since(start))
				if d.Err != nil {
					b.Fatal(d.Err)
				}
			}
			reportPercentiles(b, durs)
		})
	}
}

// BenchmarkValidateArguments measures the cached schema validation the
// proxy runs before Decide.
func BenchmarkValidateArguments(b *testing.B) {
	e, err := New(context.Background(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	schema := []byte(`{"type":"object","properties":{"kind":{"enum":["bar","line"]},"title":{"type":"string"},"series":{"type":"array","items":{"type":"integer"}}},"required":["kind"]}`)
	args := benchArgs(b, "small", 0)
	b.ReportAllocs()
	for b.Loop() {
		if r := e.ValidateArguments(schema, args); !r.Valid {
			b.Fatal(r.Errors)
		}
	}
}

func reportPercentiles(b *testing.B, durs []time.Duration) {
	if len(durs) == 0 {
		return
	}
	slices.Sort(durs)
	at := func(q float64) float64 { return float64(durs[int(q*float64(len(durs)-1))].Nanoseconds()) }
	b.ReportMetric(at(0.50), "p50-ns")
	b.ReportMetric(at(0.99), "p99-ns")
}

// BenchmarkInputValue measures the conversion of an Input to the OPA value
// alone, the part of Decide that grows with the arguments.
func BenchmarkInputValue(b *testing.B) {
	for _, shape := range []string{"small", "text", "records"} {
		in := benchInput(benchArgs(b, shape, 10<<10))
		b.Run(shape, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in.Call.Arguments)))
			for b.Loop() {
				if _, err := in.astValue(true, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecideFromBundle measures Decide when the default policy comes
// from an OPA bundle (--opa-config): evaluation in a read transaction of
// OPA's store, without and with OPA's decision log (the input converted
// whole, masked and buffered by OPA; uploads happen in the background).
//
//	go test -run '^$' -bench BenchmarkDecideFromBundle -benchmem ./policy/
func BenchmarkDecideFromBundle(b *testing.B) {
	src, err := fs.ReadFile(policies.FS(), "aguard/default.rego")
	if err != nil {
		b.Fatal(err)
	}
	svc := newOPAService(b)
	svc.setBundle(bundlePath, buildBundle(b, map[string]string{"aguard/default.rego": string(src)}, "bench", ""))
	for _, c := range []struct {
		name   string
		config string
	}{
		{"no-decision-log", strings.Replace(string(opaConfig(svc, "")), "decision_logs:\n  service: mgmt\n  reporting:\n    min_delay_seconds: 1\n    max_delay_seconds: 1\n", "", 1)},
		{"decision-log", string(opaConfig(svc, ""))},
	} {
		e, err := New(context.Background(), Options{OPAConfig: []byte(c.config)})
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; ; i++ {
			if ok, _ := e.Ready(); ok {
				break
			}
			if i > 1000 {
				b.Fatal("the bundle did not activate")
			}
			time.Sleep(10 * time.Millisecond)
		}
		in := benchInput(benchArgs(b, "small", 0))
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			durs := make([]time.Duration, 0, 1<<16)
			for b.Loop() {
				start := time.Now()
				d := e.Decide(context.Background(), in)
				durs = append(durs, time.Since(start))
				if d.Err != nil {
					b.Fatal(d.Err)
				}
			}
			reportPercentiles(b, durs)
		})
		e.Close(context.Background())
	}
}

package policy

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writeFiles writes name → content under dir, creating folders.
func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// policyDir returns a temporary policy folder holding files.
func policyDir(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, files)
	return dir
}

// newEngine creates an engine for dir ("" = embedded) or fails the test.
func newEngine(t *testing.T, opt Options) *Engine {
	t.Helper()
	if opt.Timeout == 0 {
		opt.Timeout = testEvalTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := New(ctx, opt)
	if err != nil {
		t.Fatalf("New(%+v): %v", opt, err)
	}
	return e
}

// testEvalTimeout bounds an evaluation in tests that do not test the bound
// itself: the 100 ms default is a production budget, and a race-enabled
// test on a busy machine can miss it and read a fail-closed deny as the
// answer under test.
const testEvalTimeout = 10 * time.Second

// constPolicy is a policy whose decision is the given Rego expression.
func constPolicy(expr string) map[string]string {
	return map[string]string{"policy.rego": "package aguard\n\ndecision := " + expr + "\n"}
}

func ptr[T any](v T) *T { return &v }

// frontendCall is a valid, advertised frontend call at tool_call_end.
func frontendCall() *Input {
	args := json.RawMessage(`{"kind":"bar","title":"Revenue"}`)
	return &Input{
		Phase: "tool_call_end",
		Call: CallInput{
			ID: "call-1", Name: "show_chart", Arguments: args, ArgumentsText: string(args),
			ParentMessageID: "msg-1",
		},
		Tool: ToolInput{
			Advertised: true, Frontend: true, Description: "Render a chart",
			Parameters: json.RawMessage(`{"type":"object","properties":{"kind":{"enum":["bar","line"]},"title":{"type":"string"}},"required":["kind"]}`),
		},
		Schema:  SchemaResult{Checked: true, Valid: true, Errors: []string{}},
		Run:     RunInfo{ThreadID: "thread-1", RunID: "run-1", ProtocolVersion: "1.0", AdvertisedTools: []string{"show_chart"}},
		Request: RequestInfo{Path: "/agent", Headers: map[string]string{"x-user": "ann"}, RemoteAddr: "127.0.0.1:4000"},
	}
}

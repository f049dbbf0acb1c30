package policy

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestInputBuiltForWhatThePolicyReads pins the analysis that keeps large
// arguments out of the input when no rule can read them, and that it errs on
// the side of reading.
func TestInputBuiltForWhatThePolicyReads(t *testing.T) {
	tests := []struct {
		name      string
		rego      string
		args      bool
		params    bool
		decisions string // the reason the policy gives for a call with {"cmd":"rm"}
	}{
		{"reads neither", `package aguard
decision := {"action": "allow", "reason": input.call.argumentsText}`, false, false, `{"cmd":"rm"}`},
		{"reads an argument", `package aguard
decision := {"action": "allow", "reason": input.call.arguments.cmd}`, true, false, "rm"},
		{"reads the call whole", `package aguard
decision := {"action": "allow", "reason": sprintf("%v", [count(input.call)])}`, true, false, "8"},
		{"reads through a computed key", `package aguard
decision := {"action": "allow", "reason": k} if { some k, v in input.call.arguments; v == "rm" }`, true, false, "cmd"},
		{"reads the whole input", `package aguard
decision := {"action": "allow", "reason": sprintf("%v", [count(input)])}`, true, true, "7"}, // phase, call, tool, schema, run, request, identity
		{"reads through an import alias", `package aguard
import input.call.arguments as a
decision := {"action": "allow", "reason": a.cmd}`, true, false, "rm"},
		{"reads the parameters", `package aguard
decision := {"action": "allow", "reason": input.tool.parameters.type}`, false, true, "object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "p.rego"), []byte(tt.rego), 0o600)
			e, err := New(context.Background(), Options{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			p := e.current.Load()
			if p.readsArgs != tt.args || p.readsParams != tt.params {
				t.Fatalf("reads arguments %v, parameters %v; want %v, %v", p.readsArgs, p.readsParams, tt.args, tt.params)
			}
			d := e.Decide(context.Background(), &Input{Phase: "tool_call_end",
				Call: CallInput{ID: "c", Name: "shell", Arguments: []byte(`{"cmd":"rm"}`), ArgumentsText: `{"cmd":"rm"}`},
				Tool: ToolInput{Parameters: []byte(`{"type":"object"}`)}})
			if d.Err != nil || d.Reason != tt.decisions {
				t.Fatalf("decision %+v, want reason %q", d, tt.decisions)
			}
		})
	}
	e, err := New(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p := e.current.Load(); p.readsArgs || p.readsParams {
		t.Fatalf("the default policy reads arguments %v, parameters %v: it should read neither", p.readsArgs, p.readsParams)
	}
}

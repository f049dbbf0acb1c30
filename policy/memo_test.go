package policy

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// memoOf returns the memo of e's serving revision (nil: not memoized).
func memoOf(e *Engine) *memo { return e.current.Load().memo }

func TestTheDefaultPolicyGivesARepeatedDecisionWithoutEvaluating(t *testing.T) {
	e := newEngine(t, Options{})
	m := memoOf(e)
	if m == nil {
		t.Fatal("the default policy is not memoized")
	}
	first := e.Decide(context.Background(), frontendCall())
	other := frontendCall()
	other.Call.ID, other.Run.ThreadID, other.Run.RunID = "call-2", "thread-2", "run-2"
	second := e.Decide(context.Background(), other)
	if m.hits.Load() != 1 {
		t.Fatalf("memo hits = %d after the same values twice, want 1", m.hits.Load())
	}
	if second.Action != first.Action || second.Reason != first.Reason || second.Revision != first.Revision || second.Err != nil {
		t.Fatalf("repeated decision = %+v, want %+v", second, first)
	}
	if second.DecisionID == first.DecisionID {
		t.Fatalf("a repeated decision reused the decision id %s", first.DecisionID)
	}

	// A value the policy reads differs: evaluated, and decided otherwise.
	bad := frontendCall()
	bad.Schema = SchemaResult{Checked: true, Valid: false, Errors: []string{"at '/kind': value must be one of 'bar', 'line'"}}
	d := e.Decide(context.Background(), bad)
	if d.Action != ActionDeny || !strings.Contains(d.Reason, "value must be one of") {
		t.Fatalf("call with other schema errors = %+v, want the schema denial", d)
	}
	bad.Schema.Errors = []string{"at '/kind': missing property"}
	if d := e.Decide(context.Background(), bad); !strings.Contains(d.Reason, "missing property") {
		t.Fatalf("the denial's reason did not follow the errors: %q", d.Reason)
	}
	if m.hits.Load() != 1 {
		t.Fatalf("memo hits = %d, want still 1: every call after the first two brought new values", m.hits.Load())
	}
}

func TestAMemoizedDecisionFollowsEveryValueThePolicyReads(t *testing.T) {
	// The policy reads one argument through a fixed path, and the tool's
	// labels through a computed key: both are part of the memo key.
	e := newEngine(t, Options{Dir: policyDir(t, map[string]string{"policy.rego": `package aguard

default decision := {"action": "allow", "reason": "ok"}

decision := {"action": "deny", "reason": sprintf("no %s", [input.call.arguments.cmd])} if {
	input.phase == "tool_call_end"
	input.call.arguments.cmd == "rm"
}

decision := {"action": "require_approval", "reason": "labelled"} if {
	input.phase == "tool_call_end"
	some k
	input.request.headers[k] == "admin"
}
`})})
	if memoOf(e) == nil {
		t.Fatal("a policy reading fixed paths is not memoized")
	}
	call := func(cmd, header string) *Input {
		in := frontendCall()
		in.Call.Arguments = json.RawMessage(`{"cmd":` + strconv.Quote(cmd) + `}`)
		in.Request.Headers = map[string]string{"x-role": header}
		return in
	}
	for round := range 2 { // the second round is served from the memo
		for _, c := range []struct{ cmd, header, action string }{
			{"ls", "user", ActionAllow},
			{"rm", "user", ActionDeny},
			{"ls", "admin", ActionRequireApproval},
			{"rm\n", "user", ActionAllow},
		} {
			if d := e.Decide(context.Background(), call(c.cmd, c.header)); d.Action != c.action {
				t.Errorf("round %d: cmd %q, header %q: %s (%s), want %s", round, c.cmd, c.header, d.Action, d.Reason, c.action)
			}
		}
	}
	if h := memoOf(e).hits.Load(); h != 4 {
		t.Errorf("memo hits = %d, want 4 (the second round)", h)
	}
}

func TestPoliciesThatMayAnswerOtherwiseForTheSameValuesAreEvaluatedEachTime(t *testing.T) {
	for name, rule := range map[string]string{
		"reads the clock":       `decision := {"action": "allow", "reason": sprintf("%d", [time.now_ns()])}`,
		"draws random numbers":  `decision := {"action": "allow", "reason": sprintf("%d", [rand.intn("x", 1000000000)])}`,
		"makes uuids":           `decision := {"action": "allow", "reason": uuid.rfc4122("x")}`,
		"prints":                `decision := {"action": "allow", "reason": "ok"} if { print(input.call.name) }`,
		"reads the input whole": `decision := {"action": "allow", "reason": json.marshal(input)}`,
		"binds the input":       `decision := {"action": "allow", "reason": x.call.id} if { x := input }`,
		"reads a computed key":  `decision := {"action": "allow", "reason": input[k].id} if { k := "call" }`,
		"uses object.get":       `decision := {"action": "allow", "reason": object.get(input, ["call", "id"], "")}`,
	} {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, Options{Dir: policyDir(t, map[string]string{"policy.rego": "package aguard\n\n" + rule + "\n"})})
			if memoOf(e) != nil {
				t.Fatalf("memoized: %s", rule)
			}
		})
	}

	// The clock, decided twice: two answers.
	e := newEngine(t, Options{Dir: policyDir(t, map[string]string{"policy.rego": "package aguard\n\n" +
		`decision := {"action": "allow", "reason": sprintf("%d", [time.now_ns()])}` + "\n"})})
	a, b := e.Decide(context.Background(), frontendCall()), e.Decide(context.Background(), frontendCall())
	if a.Reason == b.Reason {
		t.Fatalf("two decisions read the same clock %s: the second was not evaluated", a.Reason)
	}
}

func TestPoliciesThatReadOnlyFixedPathsAreMemoized(t *testing.T) {
	for name, rule := range map[string]string{
		"a computed key under a fixed path": `decision := {"action": "allow", "reason": k} if { input.call[k] == "x" }`,
		"with input as":                     "decision := {\"action\": \"allow\", \"reason\": \"ok\"} if { f with input as {} }\n\nf if { true }",
		"its own function":                  "decision := {\"action\": \"allow\", \"reason\": g(input.call.name)}\n\ng(x) := upper(x)",
	} {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, Options{Dir: policyDir(t, map[string]string{"policy.rego": "package aguard\n\n" + rule + "\n"})})
			if memoOf(e) == nil {
				t.Fatalf("not memoized: %s", rule)
			}
		})
	}
}

func TestAReloadForgetsTheMemoizedDecisions(t *testing.T) {
	dir := policyDir(t, constPolicy(`{"action": "allow", "reason": "first"}`))
	e := newEngine(t, Options{Dir: dir})
	for range 2 {
		if d := e.Decide(context.Background(), frontendCall()); d.Reason != "first" {
			t.Fatalf("decision = %+v", d)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "policy.rego"), []byte("package aguard\n\ndecision := {\"action\": \"deny\", \"reason\": \"second\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := e.Decide(context.Background(), frontendCall()); d.Action != ActionDeny || d.Reason != "second" {
		t.Fatalf("after the reload: %+v, want the new policy's deny", d)
	}
}

func TestAFailedEvaluationIsNotMemoized(t *testing.T) {
	e := newEngine(t, Options{Dir: policyDir(t, map[string]string{"policy.rego": `package aguard

decision := {"action": "allow", "reason": sprintf("%d", [to_number(input.call.name)])}
`})})
	for range 2 {
		if d := e.Decide(context.Background(), frontendCall()); d.Err == nil || d.Action != ActionDeny {
			t.Fatalf("decision = %+v, want a fail-closed deny", d)
		}
	}
	m := memoOf(e)
	if m.hits.Load() != 0 || m.cache.Len() != 0 {
		t.Fatalf("memo hits %d, kept %d after two failed evaluations, want none", m.hits.Load(), m.cache.Len())
	}
}

func TestTheMemoIsBoundedInDecisionsAndBytes(t *testing.T) {
	e := newEngine(t, Options{Dir: policyDir(t, map[string]string{"policy.rego": `package aguard

decision := {"action": "allow", "reason": input.call.name}
`})})
	m := memoOf(e)
	for i := range memoEntries + 100 {
		in := frontendCall()
		in.Call.Name = "tool-" + strconv.Itoa(i)
		e.Decide(context.Background(), in)
	}
	if m.cache.Len() != memoEntries {
		t.Fatalf("memo keeps %d decisions, want the bound %d", m.cache.Len(), memoEntries)
	}
	big := frontendCall()
	big.Call.Name = strings.Repeat("x", memoEntryBytes)
	hits := m.hits.Load()
	for range 2 {
		if d := e.Decide(context.Background(), big); d.Reason != big.Call.Name {
			t.Fatalf("decision of a long name: %.40s…", d.Reason)
		}
	}
	if m.hits.Load() != hits {
		t.Fatalf("a decision over %d bytes was kept and served again", memoEntryBytes)
	}
}

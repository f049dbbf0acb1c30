package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

func TestDecideDefaultPolicy(t *testing.T) {
	e := newEngine(t, Options{})
	tests := []struct {
		name       string
		edit       func(in *Input)
		wantAction string
		wantReason []string // substrings of the reason
	}{
		{
			name:       "valid frontend call is allowed",
			edit:       func(in *Input) {},
			wantAction: ActionAllow,
		},
		{
			name: "frontend call with invalid JSON is denied",
			edit: func(in *Input) {
				in.Call.ArgumentsText = `{"kind":`
				in.Call.Arguments = nil
				in.Call.ArgumentsError = ptr("unexpected end of JSON input")
			},
			wantAction: ActionDeny,
			wantReason: []string{`frontend tool "show_chart" are not valid JSON`, "unexpected end of JSON input"},
		},
		{
			name: "frontend call violating its schema is denied with the validator's message",
			edit: func(in *Input) {
				in.Call.Arguments = json.RawMessage(`{"kind":"pie"}`)
				in.Call.ArgumentsText = `{"kind":"pie"}`
			},
			wantAction: ActionDeny,
			wantReason: []string{"do not match its parameters schema", "at '/kind'", "'bar', 'line'"},
		},
		{
			name: "frontend call missing a required property is denied",
			edit: func(in *Input) {
				in.Call.Arguments = json.RawMessage(`{"title":"x"}`)
				in.Call.ArgumentsText = `{"title":"x"}`
			},
			wantAction: ActionDeny,
			wantReason: []string{"missing property 'kind'"},
		},
		{
			name: "frontend call without a schema is allowed",
			edit: func(in *Input) {
				in.Tool.Parameters = nil
			},
			wantAction: ActionAllow,
		},
		{
			name: "agent-side call at tool_call_end is allowed, even unadvertised with bad JSON",
			edit: func(in *Input) {
				in.Call.Name = "search_web"
				in.Tool = ToolInput{}
				in.Call.Arguments = nil
				in.Call.ArgumentsError = ptr("invalid character 'x'")
			},
			wantAction: ActionAllow,
		},
		{
			name: "unadvertised call pending at run_finished is denied",
			edit: func(in *Input) {
				in.Phase = "run_finished"
				in.Call.Name = "search_web"
				in.Tool = ToolInput{}
			},
			wantAction: ActionDeny,
			wantReason: []string{`tool "search_web" was not advertised`},
		},
		{
			name: "advertised call at run_finished is allowed",
			edit: func(in *Input) {
				in.Phase = "run_finished"
			},
			wantAction: ActionAllow,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := frontendCall()
			tt.edit(in)
			if in.Call.ArgumentsError == nil {
				in.Schema = e.ValidateArguments(in.Tool.Parameters, in.Call.Arguments)
			} else {
				in.Schema = ValidateArguments(in.Tool.Parameters, []byte(in.Call.ArgumentsText))
			}
			d := e.Decide(context.Background(), in)
			if d.Err != nil {
				t.Fatalf("Err = %v", d.Err)
			}
			if d.Action != tt.wantAction {
				t.Fatalf("Action = %q (reason %q), want %q", d.Action, d.Reason, tt.wantAction)
			}
			for _, want := range tt.wantReason {
				if !strings.Contains(d.Reason, want) {
					t.Errorf("Reason = %q, want it to contain %q", d.Reason, want)
				}
			}
			if d.Action == ActionDeny && d.Reason == "" {
				t.Error("a deny without a reason")
			}
			if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(d.DecisionID) {
				t.Errorf("DecisionID = %q, want 32 hex digits", d.DecisionID)
			}
			if rev, _ := e.Status(); d.Revision != rev || rev == "" {
				t.Errorf("Revision = %q, Status revision %q", d.Revision, rev)
			}
		})
	}
}

func TestDecideReadsPolicyOutput(t *testing.T) {
	tests := []struct {
		name        string
		decision    string
		wantAction  string
		wantReason  string
		wantTimeout time.Duration
	}{
		{"allow without reason", `{"action": "allow"}`, ActionAllow, "", 0},
		{"deny with reason", `{"action": "deny", "reason": "no"}`, ActionDeny, "no", 0},
		{"approval with timeout", `{"action": "require_approval", "reason": "ask", "approvalTimeout": "1h30m"}`, ActionRequireApproval, "ask", 90 * time.Minute},
		{"approval with empty timeout uses the default", `{"action": "require_approval", "approvalTimeout": ""}`, ActionRequireApproval, "", 0},
		{"unknown fields are ignored", `{"action": "allow", "reason": "ok", "extra": [1]}`, ActionAllow, "ok", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, Options{Dir: policyDir(t, constPolicy(tt.decision))})
			d := e.Decide(context.Background(), frontendCall())
			if d.Err != nil {
				t.Fatalf("Err = %v", d.Err)
			}
			if d.Action != tt.wantAction || d.Reason != tt.wantReason || d.ApprovalTimeout != tt.wantTimeout {
				t.Fatalf("got (%q, %q, %v), want (%q, %q, %v)", d.Action, d.Reason, d.ApprovalTimeout, tt.wantAction, tt.wantReason, tt.wantTimeout)
			}
		})
	}
}

func TestDecideFailsClosed(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		timeout time.Duration
		in      func() *Input
		ctx     func() (context.Context, context.CancelFunc)
		wantErr []string // substrings of Err
		wantIs  error
	}{
		{
			name: "conflicting outputs",
			files: map[string]string{"policy.rego": `package aguard
decision := {"action": "allow"} if input.phase == "tool_call_end"
decision := {"action": "deny", "reason": "x"} if input.tool.frontend
`},
			wantErr: []string{"eval_conflict_error", "policy.rego:"},
		},
		{
			name: "built-in error at runtime",
			files: map[string]string{"policy.rego": `package aguard
default decision := {"action": "allow"}
decision := {"action": "deny", "reason": "match"} if regex.match("(unclosed", input.call.name)
`},
			wantErr: []string{"regex.match", "policy.rego:"},
		},
		{
			name: "type error at runtime",
			files: map[string]string{"policy.rego": `package aguard
default decision := {"action": "allow"}
decision := {"action": "deny", "reason": "big"} if to_number(input.call.name) > 3
`},
			wantErr: []string{"to_number"},
		},
		{
			name:    "undefined decision",
			files:   map[string]string{"policy.rego": "package aguard\n\ndecision := {\"action\": \"allow\"} if input.phase == \"never\"\n"},
			wantErr: []string{"decision is undefined"},
		},
		{
			name:    "decision is not an object",
			files:   constPolicy(`"allow"`),
			wantErr: []string{"the decision is a string, want an object"},
		},
		{
			name:    "unknown action",
			files:   constPolicy(`{"action": "permit"}`),
			wantErr: []string{`decision.action is "permit"`},
		},
		{
			name:    "missing action",
			files:   constPolicy(`{"reason": "x"}`),
			wantErr: []string{"decision.action is null or missing"},
		},
		{
			name:    "reason of the wrong type",
			files:   constPolicy(`{"action": "allow", "reason": 3}`),
			wantErr: []string{"decision.reason is a json.Number"},
		},
		{
			name:    "approval timeout that does not parse",
			files:   constPolicy(`{"action": "require_approval", "approvalTimeout": "ten minutes"}`),
			wantErr: []string{"decision.approvalTimeout"},
		},
		{
			name:    "approval timeout as a number",
			files:   constPolicy(`{"action": "require_approval", "approvalTimeout": 600}`),
			wantErr: []string{"want a duration string"},
		},
		{
			name:    "negative approval timeout",
			files:   constPolicy(`{"action": "require_approval", "approvalTimeout": "-5m"}`),
			wantErr: []string{"negative"},
		},
		{
			name: "evaluation exceeding the timeout",
			files: map[string]string{"policy.rego": `package aguard
default decision := {"action": "allow"}
decision := {"action": "deny", "reason": "never"} if {
	some i in numbers.range(1, 20000)
	some j in numbers.range(1, 20000)
	i * j == -1
}
`},
			timeout: 20 * time.Millisecond,
			wantErr: []string{"no decision within 20ms"},
			wantIs:  context.DeadlineExceeded,
		},
		{
			name:  "caller's context already cancelled",
			files: constPolicy(`{"action": "allow"}`),
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx, cancel
			},
			wantIs: context.Canceled,
		},
		{
			name: "arguments that are not JSON, read by the policy",
			files: map[string]string{"policy.rego": `package aguard
default decision := {"action": "allow"}
decision := {"action": "deny", "reason": "x"} if input.call.arguments.a == 1`},
			in: func() *Input {
				in := frontendCall()
				in.Call.Arguments = json.RawMessage(`{"a": NaN}`)
				return in
			},
			wantErr: []string{"call.arguments", "invalid JSON"},
		},
		{
			// OPA panics comparing such a number (TestEvalRecoversFromAPanicInsideOPA);
			// aguard refuses it before (policy/json.go).
			name: "a number with a large exponent",
			files: map[string]string{"policy.rego": `package aguard
default decision := {"action": "allow"}
decision := {"action": "deny", "reason": "big"} if input.call.arguments.n > 3
`},
			in: func() *Input {
				in := frontendCall()
				in.Call.Arguments = json.RawMessage(`{"n": 1e9999999}`)
				return in
			},
			wantErr: []string{"call.arguments", "invalid number"},
		},
		{
			name:    "nil input",
			files:   constPolicy(`{"action": "allow"}`),
			in:      func() *Input { return nil },
			wantErr: []string{"nil input"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, Options{Dir: policyDir(t, tt.files), Timeout: tt.timeout})
			in := frontendCall()
			if tt.in != nil {
				in = tt.in()
			}
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tt.ctx != nil {
				ctx, cancel = tt.ctx()
			}
			defer cancel()
			start := time.Now()
			d := e.Decide(ctx, in)
			if d.Action != ActionDeny || d.Err == nil {
				t.Fatalf("got action %q, Err %v; want a deny with Err", d.Action, d.Err)
			}
			if d.Reason == "" || d.DecisionID == "" {
				t.Errorf("Reason %q, DecisionID %q: both must be set", d.Reason, d.DecisionID)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(d.Err.Error(), want) {
					t.Errorf("Err = %q, want it to contain %q", d.Err, want)
				}
			}
			if tt.wantIs != nil && !errors.Is(d.Err, tt.wantIs) {
				t.Errorf("Err = %v, want errors.Is %v", d.Err, tt.wantIs)
			}
			if tt.timeout > 0 {
				if took := time.Since(start); took > tt.timeout+2*time.Second {
					t.Errorf("Decide took %v with a timeout of %v", took, tt.timeout)
				}
			}
		})
	}
}

// TestDecideStopsWhenTheCallerCancelsMidEvaluation cancels the caller's
// context once the policy is running (its print() is the signal) and sees
// the evaluation stop: a deny carrying context.Canceled, long before the
// evaluation's own timeout.
func TestDecideStopsWhenTheCallerCancelsMidEvaluation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(onPrint{cancel})
	e := newEngine(t, Options{Logger: log, Timeout: time.Minute, Dir: policyDir(t, map[string]string{"policy.rego": `package aguard
default decision := {"action": "allow"}
decision := {"action": "deny", "reason": "never"} if {
	print("evaluating")
	some i in numbers.range(1, 1000000)
	some j in numbers.range(1, 1000000)
	i * j == -1
}
`})})
	start := time.Now()
	d := e.Decide(ctx, frontendCall())
	if d.Action != ActionDeny || !errors.Is(d.Err, context.Canceled) {
		t.Fatalf("got action %q, Err %v; want a deny with context.Canceled", d.Action, d.Err)
	}
	if !strings.Contains(d.Err.Error(), "at revision") {
		t.Errorf("Err = %q: want the evaluation's error, not the check before it", d.Err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("Decide took %v after the cancellation", took)
	}
}

// onPrint is a slog.Handler that calls cancel on the policy's print output.
type onPrint struct{ cancel context.CancelFunc }

func (onPrint) Enabled(context.Context, slog.Level) bool { return true }
func (h onPrint) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "policy print" {
		h.cancel()
	}
	return nil
}
func (h onPrint) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h onPrint) WithGroup(string) slog.Handler      { return h }

func TestDecideWithoutPolicyDenies(t *testing.T) {
	var e Engine // zero Engine: nothing loaded
	e.log = slog.New(slog.DiscardHandler)
	d := e.Decide(context.Background(), frontendCall())
	if d.Action != ActionDeny || d.Err == nil || d.DecisionID == "" {
		t.Fatalf("got %+v, want a deny with Err and a decision id", d)
	}
}

func TestNewRejectsBrokenPolicy(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		dir     string
		opt     Options
		wantErr []string
	}{
		{
			name:    "parse error names file and line",
			files:   map[string]string{"aguard/policy.rego": "package aguard\n\ndecision := {\"action\": \"allow\"}\n\nallow {\n  true\n}\n"},
			wantErr: []string{"policy.rego:5", "rego_parse_error"},
		},
		{
			name:    "compile error names file and line",
			files:   map[string]string{"policy.rego": "package aguard\n\ndefault decision := {\"action\": \"allow\"}\n\ndecision := {\"action\": x}\n"},
			wantErr: []string{"policy.rego:5", "unsafe"},
		},
		{
			name:    "every broken file is reported",
			files:   map[string]string{"a.rego": "package aguard\ndecision := {\n", "b.rego": "package aguard\nx if {\n"},
			wantErr: []string{"a.rego:", "b.rego:"},
		},
		{
			name:    "no decision rule",
			files:   map[string]string{"policy.rego": "package aguard\n\nallow := true\n"},
			wantErr: []string{"no rule defines data.aguard.decision"},
		},
		{
			name:    "no rego files",
			files:   map[string]string{"data.json": `{"a": 1}`, "policy_test.rego": "package aguard_test\n"},
			wantErr: []string{"no .rego files"},
		},
		{
			name:    "data file that is not JSON",
			files:   map[string]string{"policy.rego": "package aguard\n\ndecision := {\"action\": \"allow\"}\n", "cfg/data.json": `{"a": `},
			wantErr: []string{"data.json", "invalid JSON"},
		},
		{
			name:    "data file that is not an object",
			files:   map[string]string{"policy.rego": "package aguard\n\ndecision := {\"action\": \"allow\"}\n", "data.yaml": "- a\n- b\n"},
			wantErr: []string{"data.yaml", "must hold an object"},
		},
		{
			name: "two data files setting the same key",
			files: map[string]string{
				"policy.rego": "package aguard\n\ndecision := {\"action\": \"allow\"}\n",
				"a.json":      `{"limits": {"max": 1}}`, "b.yaml": "limits:\n  max: 2\n",
			},
			wantErr: []string{"limits.max", "also set"},
		},
		{
			name:    "missing folder",
			dir:     "/nonexistent/aguard-policies",
			wantErr: []string{"policy folder /nonexistent/aguard-policies does not exist"},
		},
		{
			name:    "missing bundle file",
			dir:     "/nonexistent/aguard-policies.tar.gz",
			wantErr: []string{"policy bundle /nonexistent/aguard-policies.tar.gz does not exist"},
		},
		{
			name:    "a file given as the folder",
			dir:     "engine_test.go",
			wantErr: []string{"policy folder engine_test.go is not a folder"},
		},
		{
			name:    "negative timeout",
			files:   constPolicy(`{"action": "allow"}`),
			opt:     Options{Timeout: -time.Second},
			wantErr: []string{"negative timeout"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opt := tt.opt
			opt.Dir = tt.dir
			if opt.Dir == "" {
				opt.Dir = policyDir(t, tt.files)
			}
			e, err := New(context.Background(), opt)
			if err == nil {
				t.Fatal("New succeeded, want an error")
			}
			if e != nil {
				t.Error("New returned an Engine with its error")
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestDataFilesFollowFolders(t *testing.T) {
	dir := policyDir(t, map[string]string{
		"policy.rego": `package aguard
decision := {"action": "deny", "reason": sprintf("%v %v %v", [data.tools.blocked, data.limits.max, data.team.ops.oncall])}
`,
		"data.json":          `{"tools": {"blocked": ["rm"]}}`,
		"more.yaml":          "limits:\n  max: 3\n",
		"team/ops/data.yml":  "oncall: ann\n",
		".git/config.json":   `{"ignored": true}`,
		"notes.txt":          "not a policy file",
		"policy_test.rego":   "this file is not parsed by the engine",
		"team/ops/README.md": "ignored",
	})
	e := newEngine(t, Options{Dir: dir})
	d := e.Decide(context.Background(), frontendCall())
	if d.Err != nil {
		t.Fatal(d.Err)
	}
	if want := `["rm"] 3 ann`; d.Reason != want {
		t.Errorf("Reason = %q, want %q", d.Reason, want)
	}
}

func TestDecideLogs(t *testing.T) {
	tests := []struct {
		name         string
		logArguments bool
	}{
		{"arguments not logged by default", false},
		{"arguments logged with LogArguments", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			e := newEngine(t, Options{Logger: log, LogArguments: tt.logArguments})
			buf.Reset()
			in := frontendCall()
			in.Call.ArgumentsText = `{"kind":"bar","secret":"hunter2"}`
			in.Call.Arguments = json.RawMessage(in.Call.ArgumentsText)
			d := e.Decide(context.Background(), in)

			var rec map[string]any
			if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
				t.Fatalf("want one JSON log record, got %q: %v", buf.String(), err)
			}
			want := map[string]any{
				"msg": "policy decision", "decisionId": d.DecisionID, "phase": "tool_call_end",
				"toolCallId": "call-1", "toolCallName": "show_chart", "action": "allow",
				"reason": d.Reason, "revision": d.Revision,
			}
			for k, v := range want {
				if rec[k] != v {
					t.Errorf("log %s = %v, want %v", k, rec[k], v)
				}
			}
			if logged := strings.Contains(buf.String(), "hunter2"); logged != tt.logArguments {
				t.Errorf("arguments in log = %v, want %v: %s", logged, tt.logArguments, buf.String())
			}
		})
	}
}

func TestDecideLogsFailClosedAsError(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	e := newEngine(t, Options{Dir: policyDir(t, constPolicy(`{"action": "maybe"}`)), Logger: log})
	buf.Reset()
	d := e.Decide(context.Background(), frontendCall())
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("log %q: %v", buf.String(), err)
	}
	if rec["level"] != "ERROR" || rec["action"] != "deny" || rec["decisionId"] != d.DecisionID || !strings.Contains(rec["error"].(string), "maybe") {
		t.Errorf("log record %v", rec)
	}
}

func TestPolicyPrintGoesToLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	dir := policyDir(t, map[string]string{"policy.rego": `package aguard
decision := {"action": "allow"} if print("deciding", input.call.name)
`})
	e := newEngine(t, Options{Dir: dir, Logger: log})
	e.Decide(context.Background(), frontendCall())
	if !strings.Contains(buf.String(), `"output":"deciding show_chart"`) {
		t.Errorf("print output not logged: %s", buf.String())
	}
}

func TestDecisionIDsAreUnique(t *testing.T) {
	e := newEngine(t, Options{})
	seen := map[string]bool{}
	for range 1000 {
		id := e.Decide(context.Background(), frontendCall()).DecisionID
		if seen[id] {
			t.Fatalf("decision id %s repeated", id)
		}
		seen[id] = true
	}
}

func TestDecideConcurrentWithReload(t *testing.T) {
	dir := policyDir(t, constPolicy(`{"action": "allow", "reason": "v1"}`))
	e := newEngine(t, Options{Dir: dir})
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for range 200 {
				d := e.Decide(ctx, frontendCall())
				if d.Err != nil || (d.Reason != "v1" && d.Reason != "v2") {
					t.Errorf("worker %d: %+v", w, d)
					return
				}
			}
		})
	}
	for i := range 5 {
		reason := []string{"v1", "v2"}[i%2]
		writeFiles(t, dir, constPolicy(`{"action": "allow", "reason": "`+reason+`"}`))
		if err := e.Reload(ctx); err != nil {
			t.Error(err)
		}
	}
	wg.Wait()
}

// TestEvalRecoversFromAPanicInsideOPA: an evaluation that panics inside OPA
// (v1.22 does comparing 1e9999999, which aguard's decoding now refuses, but
// another value may) is an error, which Decide turns into a denial.
func TestEvalRecoversFromAPanicInsideOPA(t *testing.T) {
	ctx := context.Background()
	q, err := rego.New(rego.Query("data.aguard.decision"), rego.Module("p.rego", `package aguard
decision := "big" if input.n > 3
`)).PrepareForEval(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in := ast.NewObject(ast.Item(ast.StringTerm("n"), ast.NewTerm(ast.Number("1e9999999"))))
	if _, err := eval(ctx, &q, in, nil); err == nil || !strings.Contains(err.Error(), "policy engine panic") {
		t.Fatalf("eval = %v, want a policy engine panic error", err)
	}
	in = ast.NewObject(ast.Item(ast.StringTerm("n"), ast.IntNumberTerm(4)))
	if rs, err := eval(ctx, &q, in, nil); err != nil || len(rs) != 1 {
		t.Fatalf("eval = %v, %v; want one result", rs, err)
	}
}

package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/util"
)

// jsonValue is what OPA makes of a JSON document the slow, obvious way.
func jsonValue(t testing.TB, doc []byte) ast.Value {
	t.Helper()
	var x any
	if err := util.UnmarshalJSON(doc, &x); err != nil {
		t.Fatalf("util.UnmarshalJSON(%s): %v", doc, err)
	}
	v, err := ast.InterfaceToValue(x)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestInputValueMatchesItsJSON(t *testing.T) {
	in := frontendCall()
	in.Call.ArgumentsError = ptr("not used by this test")
	in.Call.SubagentRunID = "sub-1"
	in.Call.Reopened = true
	in.Schema = SchemaResult{Checked: true, Valid: false, Errors: []string{"a", "b"}}
	in.Run.Route = "default"
	in.Request.Headers = map[string]string{"x-user-role": "admin", "accept": "text/event-stream"}
	in.Identity = &Identity{Subject: "alice", Issuer: "https://idp.example", Source: SourceJWT,
		Claims: json.RawMessage(`{"sub":"alice","iss":"https://idp.example","roles":["admin"]}`)}

	got, err := in.astValue(true, true)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := jsonValue(t, doc); got.Compare(want) != 0 {
		t.Fatalf("input value\n%v\nwant (from its JSON)\n%v", got, want)
	}
	// Field names as in the design's §4.
	for _, path := range []string{
		"phase", "call.id", "call.name", "call.arguments.kind", "call.argumentsText", "call.argumentsError",
		"call.parentMessageId", "call.subagentRunId", "call.reopened",
		"tool.advertised", "tool.frontend", "tool.description", "tool.parameters.type",
		"schema.checked", "schema.valid", "schema.errors",
		"run.threadId", "run.runId", "run.protocolVersion", "run.advertisedTools", "run.route",
		"request.path", `request.headers["x-user-role"]`, "request.remoteAddr",
		"identity.subject", "identity.issuer", "identity.claims.roles", "identity.source",
	} {
		ref := ast.MustParseRef("input." + path)
		if _, err := got.Find(ref[1:]); err != nil {
			t.Errorf("input has no %s", path)
		}
	}
}

// TestSharedInputIsTheSameInput decides the phases of a run's calls with
// one Shared and sees, at each, the input the same Input makes without it:
// what the first decision converted is what the next ones read.
func TestSharedInputIsTheSameInput(t *testing.T) {
	sh := new(Shared)
	for i, phase := range []string{PhaseToolCallStart, PhaseToolCallEnd, PhaseToolCallStart, PhaseRunFinished} {
		in := frontendCall()
		in.Phase = phase
		in.Call.ID = fmt.Sprintf("call-%d", i)
		in.Request.Headers = map[string]string{"X-User-Role": "admin"}
		in.Identity = &Identity{Subject: "alice", Source: SourceJWT, Claims: json.RawMessage(`{"roles":["admin"]}`)}
		want, err := in.astValue(true, true)
		if err != nil {
			t.Fatal(err)
		}
		in.Shared = sh
		got, err := in.astValue(true, true)
		if err != nil {
			t.Fatal(err)
		}
		if got.Compare(want) != 0 {
			t.Fatalf("%s with Shared:\n%v\nwant\n%v", phase, got, want)
		}
	}
}

// TestSharedInputKeepsFailingClosed: claims that cannot be converted deny
// every decision of the run, not only the one that converted them first.
func TestSharedInputKeepsFailingClosed(t *testing.T) {
	e := newEngine(t, Options{})
	sh := new(Shared)
	for _, phase := range []string{PhaseToolCallStart, PhaseToolCallEnd, PhaseToolCallEnd} {
		in := frontendCall()
		in.Phase, in.Shared = phase, sh
		in.Identity = &Identity{Subject: "x", Source: SourceJWT, Claims: json.RawMessage(`["not","an","object"]`)}
		d := e.Decide(context.Background(), in)
		if d.Err == nil || !strings.Contains(d.Err.Error(), "identity.claims") {
			t.Fatalf("%s: %s (%v), want a fail-closed decision naming identity.claims", phase, d.Action, d.Err)
		}
	}
}

func TestInputValueNormalises(t *testing.T) {
	in := &Input{
		Phase:   "run_finished",
		Request: RequestInfo{Headers: map[string]string{"X-User-Role": "admin"}},
	}
	got, err := in.astValue(true, true)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"call.arguments":                 "null",
		"call.argumentsError":            "null",
		"tool.parameters":                "null",
		"schema.errors":                  "[]",
		"run.advertisedTools":            "[]",
		`request.headers["x-user-role"]`: `"admin"`,
	} {
		v, err := got.Find(ast.MustParseRef("input." + path)[1:])
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if v.String() != want {
			t.Errorf("%s = %v, want %s", path, v, want)
		}
	}
}

func TestDecodeJSONTerm(t *testing.T) {
	valid := []string{
		`null`, `true`, `false`, `0`, `-0`, `12`, `-3.25e+10`, `1E-2`, `123456789012345678901234567890`,
		`""`, `"plain"`, `"esc \" \\ \/ \b \f \n \r \t"`, `"\u00e9\u4e2d"`, `"\ud83d\ude00 pair"`, `"lone \ud83d surrogate"`,
		`"raw é 中 😀"`, "\"bad utf8 \xff\xfe\"",
		`"long enough to skip words \" then an escaped quote"`, `"sixteen bytes ok\\backslash after"`, `"0123456789abcdef\u00e9 é"`,
		`[]`, `{}`, ` [1, "a", [true, null], {"k": {}}] `, `{"a": 1, "b": [1, 2, {"c": "d"}]}`,
		`{"dup": 1, "dup": 2}`, `[{"id": 1, "name": "x"}, {"id": 2, "name": "y"}, {"name": "z", "id": 3}]`,
		`{"` + strings.Repeat("k", 100) + `": 1, "\u006b": 2, "k": 3}`,
	}
	for _, doc := range valid {
		t.Run("valid "+doc, func(t *testing.T) {
			term, err := decodeJSONTerm([]byte(doc))
			if err != nil {
				t.Fatalf("decode %s: %v", doc, err)
			}
			if want := jsonValue(t, []byte(doc)); term.Value.Compare(want) != 0 {
				t.Fatalf("decode %s = %v, want %v", doc, term.Value, want)
			}
		})
	}
	invalid := []string{
		``, ` `, `nul`, `True`, `NaN`, `Infinity`, `-`, `01`, `1.`, `.5`, `1e`, `+1`, `0x10`,
		`"unterminated`, `"bad \x escape"`, `"\u12"`, "\"tab\tinside\"", `[1,]`, `[1 2]`, `{"a":1,}`,
		`{"a" 1}`, `{a: 1}`, "\"0123456789abcdef\x01 control after a word\"", "\"0123456789abcdef\x1f\"", `{"a":1`, `[`, `{} {}`, `1 x`, `'single'`,
	}
	for _, doc := range invalid {
		t.Run("invalid "+doc, func(t *testing.T) {
			if json.Valid([]byte(doc)) {
				t.Fatalf("test case %q is valid JSON", doc)
			}
			if term, err := decodeJSONTerm([]byte(doc)); err == nil {
				t.Fatalf("decode %q = %v, want an error", doc, term)
			}
		})
	}
}

// TestDecodeJSONTermRefusesLargeExponents: a number past 25,000 digits and
// exponent is an error — OPA refuses those past 2^100,000 and checks the
// rest with a big.Float — and ordinary exponents are kept as written.
func TestDecodeJSONTermRefusesLargeExponents(t *testing.T) {
	for _, doc := range []string{`[1E91970]`, `{"n":-2e-400000}`, `1e999999999999999999999`, `1e30000`, `[0.5e-24999]`} {
		if term, err := decodeJSONTerm([]byte(doc)); err == nil || !strings.Contains(err.Error(), "exponent too large") {
			t.Errorf("decode %s = %v, %v; want an exponent-too-large error", doc, term, err)
		}
	}
	for doc, want := range map[string]string{`1e300`: "1e300", `1e24999`: "1e24999", `-0.5e-24990`: "-0.5e-24990", `[2.5E-7]`: "[2.5E-7]", `123456789012345678901234567890`: "123456789012345678901234567890"} {
		term, err := decodeJSONTerm([]byte(doc))
		if err != nil || term.String() != want {
			t.Errorf("decode %s = %v, %v; want %s", doc, term, err, want)
		}
	}
}

func TestDecodeJSONTermDepth(t *testing.T) {
	deep := strings.Repeat("[", maxJSONDepth+2) + strings.Repeat("]", maxJSONDepth+2)
	if _, err := decodeJSONTerm([]byte(deep)); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Fatalf("err = %v, want a depth error", err)
	}
}

// FuzzDecodeJSONTerm checks the decoder against encoding/json: the same
// documents are accepted, and they decode to the same value.
func FuzzDecodeJSONTerm(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5e3,"x\u00e9",null,true]}`, `[{"k":1},{"k":2}]`, `"\ud800"`, `01`, `[1,]`, `"a long plain string of more than eight bytes, then \u00e9"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		term, err := decodeJSONTerm(doc)
		valid := json.Valid(doc)
		if valid && err != nil && strings.Contains(err.Error(), "exponent too large") {
			// Past the digits-and-exponent bound, which OPA's own check
			// passes without a big.Float too.
			if !hasLargeExponent(doc) {
				t.Fatalf("decode %q: %v, but no number passes the bound", doc, err)
			}
			return
		}
		if err == nil && hasLargeExponent(doc) {
			t.Fatalf("decode %q kept a number past the bound", doc)
		}
		if valid != (err == nil) {
			t.Fatalf("json.Valid = %v, decode error = %v, for %q", valid, err, doc)
		}
		if err != nil || !bytes.ContainsAny(doc, "{[\"") {
			return
		}
		// Compared as JSON text: ast's Compare of numbers such as 1e999999
		// takes milliseconds, which stalls the fuzzer.
		got, want := canonical(t, term.Value), canonical(t, jsonValue(t, doc))
		if got != want {
			t.Fatalf("decode %q = %s, want %s", doc, got, want)
		}
	})
}

// hasLargeExponent reports whether a number of doc, outside its strings,
// passes maxDigitsAndExponent, as OPA's ast.NumberChecked counts it.
func hasLargeExponent(doc []byte) bool {
	var x any
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	if d.Decode(&x) != nil {
		return false
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case json.Number:
			s := string(v)
			i := strings.IndexAny(s, "eE")
			if i < 0 {
				return false
			}
			exp, err := strconv.Atoi(s[i+1:])
			return err != nil || i+max(exp, -exp) > maxDigitsAndExponent
		case []any:
			return slices.ContainsFunc(v, walk)
		case map[string]any:
			for _, e := range v {
				if walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(x)
}

// canonical is v as JSON with sorted keys, numbers as their text (ast.JSON
// cannot turn one as large as 1E91970 into a Go value).
func canonical(t *testing.T, v ast.Value) string {
	t.Helper()
	var b strings.Builder
	var walk func(v ast.Value)
	walk = func(v ast.Value) {
		switch x := v.(type) {
		case ast.Number:
			b.WriteString(string(x))
		case *ast.Array:
			b.WriteByte('[')
			for i := range x.Len() {
				if i > 0 {
					b.WriteByte(',')
				}
				walk(x.Elem(i).Value)
			}
			b.WriteByte(']')
		case ast.Object:
			keys := x.Keys()
			slices.SortFunc(keys, func(a, c *ast.Term) int { return a.Value.Compare(c.Value) })
			b.WriteByte('{')
			for i, k := range keys {
				if i > 0 {
					b.WriteByte(',')
				}
				walk(k.Value)
				b.WriteByte(':')
				walk(x.Get(k).Value)
			}
			b.WriteByte('}')
		default: // null, booleans, strings
			j, err := json.Marshal(mustJSON(t, v))
			if err != nil {
				t.Fatal(err)
			}
			b.Write(j)
		}
	}
	walk(v)
	return b.String()
}

func mustJSON(t *testing.T, v ast.Value) any {
	t.Helper()
	x, err := ast.JSON(v)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// TestIdentityIsInEveryPhase pins input.identity: the authenticated
// consumer at tool_call_start, tool_call_end and run_finished alike, its
// claims as an object ({} for a header identity), and null when aguard
// authenticates no one.
func TestIdentityIsInEveryPhase(t *testing.T) {
	e := newEngine(t, Options{Dir: policyDir(t, map[string]string{"policy.rego": `package aguard

decision := {"action": "hold", "reason": input.identity.subject} if {
	input.phase == "tool_call_start"
	input.identity.claims.role == "admin"
}

decision := {"action": "deny", "reason": sprintf("%s via %s", [input.identity.subject, input.identity.source])} if {
	input.phase != "tool_call_start"
	input.identity.claims == {}
}

decision := {"action": "require_approval", "reason": input.identity.issuer} if {
	input.phase != "tool_call_start"
	input.identity.claims.role == "admin"
}

default decision := {"action": "allow", "reason": "no identity"}
`})})
	jwt := &Identity{Subject: "alice", Issuer: "https://idp.example", Source: SourceJWT, Claims: json.RawMessage(`{"role":"admin"}`)}
	header := &Identity{Subject: "bob", Source: SourceHeader}
	for _, tt := range []struct {
		phase        string
		id           *Identity
		action, says string
	}{
		{PhaseToolCallStart, jwt, ActionHold, "alice"},
		{PhaseToolCallEnd, jwt, ActionRequireApproval, "https://idp.example"},
		{PhaseRunFinished, jwt, ActionRequireApproval, "https://idp.example"},
		{PhaseToolCallEnd, header, ActionDeny, "bob via header"},
		{PhaseRunFinished, header, ActionDeny, "bob via header"},
		{PhaseToolCallEnd, nil, ActionAllow, "no identity"},
		{PhaseToolCallStart, nil, ActionStream, "no identity"},
	} {
		in := frontendCall()
		in.Phase, in.Identity = tt.phase, tt.id
		d := e.Decide(context.Background(), in)
		if d.Err != nil || d.Action != tt.action || d.Reason != tt.says {
			t.Errorf("%s with %+v: %s %q (%v), want %s %q", tt.phase, tt.id, d.Action, d.Reason, d.Err, tt.action, tt.says)
		}
	}
	in := frontendCall()
	in.Identity = &Identity{Subject: "x", Source: SourceJWT, Claims: json.RawMessage(`["not","an","object"]`)}
	if d := e.Decide(context.Background(), in); d.Action != ActionDeny || d.Err == nil {
		t.Errorf("claims that are not an object: %s (%v), want a fail-closed deny", d.Action, d.Err)
	}
}

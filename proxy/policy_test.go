package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/interop"
	"github.com/aguard/aguard/policy"
)

// confirmInput advertises the frontend tool confirm_order, whose orderId must
// be a string.
func confirmInput(run string) string {
	return `{"threadId":"thread-p","runId":"` + run + `","protocolVersion":"1.0","messages":[{"id":"u1","role":"user","content":"go"}],` +
		`"tools":[{"name":"confirm_order","description":"Ask the user to confirm an order","parameters":{"type":"object","properties":{"orderId":{"type":"string"}},"required":["orderId"]}}],` +
		`"context":[],"state":{},"forwardedProps":{}}`
}

// callRun is an agent run that makes one tool call with the given arguments
// and, when answered is set, answers it itself.
func callRun(run, tool, args string, answered bool) []string {
	argsJSON, _ := json.Marshal(args)
	ev := []string{
		`{"type":"RUN_STARTED","threadId":"thread-p","runId":"` + run + `"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"call-` + run + `","toolCallName":"` + tool + `"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"call-` + run + `","delta":` + string(argsJSON) + `}`,
		`{"type":"TOOL_CALL_END","toolCallId":"call-` + run + `"}`,
	}
	if answered {
		ev = append(ev, `{"type":"TOOL_CALL_RESULT","messageId":"tm-`+run+`","toolCallId":"call-`+run+`","content":"ok"}`)
	}
	return append(ev, `{"type":"RUN_FINISHED","threadId":"thread-p","runId":"`+run+`"}`)
}

// scriptedAgent serves the run whose runId the request names. A run named
// "shell" is held open after its events until aguard closes it, which is
// reported on cancelled.
func scriptedAgent(runs map[string][]string, cancelled chan<- string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		run := between(string(b), `"runId":"`, `"`)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range runs[run] {
			io.WriteString(w, frame(e))
			w.(http.Flusher).Flush()
		}
		if cancelled != nil && run == "shell" {
			select {
			case <-r.Context().Done():
				cancelled <- run
			case <-time.After(5 * time.Second):
			}
		}
	}
}

func writePolicy(t *testing.T, dir, rego string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "policy.rego"), []byte(rego), 0o600); err != nil {
		t.Fatal(err)
	}
}

// testPolicy denies the agent-side tool "shell", requires approval (5m) for
// confirm_order when the user is "bob", and otherwise applies the shipped
// default's rules for arguments.
const testPolicy = `package aguard

default decision := {"action": "allow", "reason": "ok"}

decision := {"action": "deny", "reason": "shell is not allowed"} if input.call.name == "shell"

decision := {"action": "require_approval", "reason": "bob needs a reviewer", "approvalTimeout": "5m"} if {
	input.call.name == "confirm_order"
	input.request.headers["x-user"] == "bob"
}
`

type policyCase struct {
	name    string
	run     string
	events  []string
	user    string
	want    []string // substrings the consumer's stream must hold, in order
	pending string   // the pending list the official client must derive ("-" for none checked)
}

// TestPolicyActionsEndToEnd pins each policy action through the proxy, and
// that the official client accepts every resulting stream.
func TestPolicyActionsEndToEnd(t *testing.T) {
	ctx := context.Background()
	defaultEngine, err := policy.New(ctx, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writePolicy(t, dir, testPolicy)
	customEngine, err := policy.New(ctx, policy.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}

	groups := []struct {
		engine  *policy.Engine
		monitor bool
		cases   []policyCase
	}{
		{defaultEngine, false, []policyCase{
			{name: "valid frontend call allowed and pending", run: "ok",
				events: callRun("ok", "confirm_order", `{"orderId":"A-17"}`, false),
				want:   []string{`"TOOL_CALL_END"`, `"pendingToolCallIds":["call-ok"]`}, pending: "call-ok"},
			{name: "frontend call with invalid JSON denied", run: "badjson",
				events: callRun("badjson", "confirm_order", `{"orderId":`, false),
				want: []string{`"TOOL_CALL_END"`, `"name":"aguard.tool_call_denied"`, `are not valid JSON`,
					`"type":"TOOL_CALL_RESULT","messageId":"aguard-declined-call-badjson"`, `"type":"RUN_FINISHED"`}, pending: ""},
			{name: "frontend call breaking its schema denied", run: "schema",
				events: callRun("schema", "confirm_order", `{"orderId":17}`, false),
				want:   []string{`"name":"aguard.tool_call_denied"`, `do not match its parameters schema`, `"TOOL_CALL_RESULT"`}, pending: ""},
			{name: "frontend call without argument text is checked as {}", run: "noargs",
				events: callRun("noargs", "confirm_order", ``, false),
				want:   []string{`"name":"aguard.tool_call_denied"`, `do not match its parameters schema`, `orderId`}, pending: ""},
			{name: "unadvertised call held, then declined at run end: only its denial is seen", run: "unadv",
				events: callRun("unadv", "rm_rf", `{}`, false),
				want:   []string{`"RUN_STARTED"`, `"name":"aguard.tool_call_denied"`, `was not advertised`, `"RUN_FINISHED"`}, pending: ""},
			{name: "agent-side call answered in-stream allowed", run: "agent",
				events: callRun("agent", "lookup", `{}`, true),
				want:   []string{`"TOOL_CALL_RESULT","messageId":"tm-agent"`, `"RUN_FINISHED"`}, pending: ""},
		}},
		{customEngine, false, []policyCase{
			{name: "agent-side call denied ends the run (held: the policy objects to it by name)", run: "shell",
				events: callRun("shell", "shell", `{"cmd":"ls"}`, true),
				want:   []string{`"name":"aguard.tool_call_denied"`, `"code":"AGUARD_POLICY_DENIED"`}, pending: "-"},
			{name: "approval required for bob", run: "approve", user: "bob",
				events: callRun("approve", "confirm_order", `{"orderId":"A-17"}`, false),
				want:   []string{`"name":"aguard.approval_required"`, `"reason":"bob needs a reviewer"`, `"pendingToolCallIds":["call-approve"]`}, pending: "call-approve"},
		}},
		{defaultEngine, true, []policyCase{
			{name: "monitor mode changes nothing", run: "monitor",
				events: callRun("monitor", "confirm_order", `{"orderId":`, false),
				want:   []string{`"TOOL_CALL_END"`, `{"type":"RUN_FINISHED","threadId":"thread-p","runId":"monitor"}`}, pending: "call-monitor"},
		}},
	}

	var reqs []interop.Request
	var all []policyCase
	for _, g := range groups {
		runs := map[string][]string{}
		for _, c := range g.cases {
			runs[c.run] = c.events
		}
		cancelled := make(chan string, 10)
		h := newHarness(t, scriptedAgent(runs, cancelled), func(o *Options) { o.Policy = g.engine; o.Monitor = g.monitor })
		for _, c := range g.cases {
			req, _ := http.NewRequest("POST", h.url+"/agent", strings.NewReader(confirmInput(c.run)))
			req.Header.Set("Content-Type", "application/json")
			if c.user != "" {
				req.Header.Set("X-User", c.user)
			}
			start := time.Now()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got := readAll(t, resp.Body)
			resp.Body.Close()
			stream := strings.Join(got, "\n")
			at := 0
			for _, w := range c.want {
				i := strings.Index(stream[at:], w)
				if i < 0 {
					t.Errorf("%s: stream lacks %q after offset %d:\n%s", c.name, w, at, stream)
					break
				}
				at += i + len(w)
			}
			if (c.run == "unadv" || c.run == "shell") && strings.Contains(stream, `"TOOL_CALL_`) {
				t.Errorf("%s: the consumer saw a held call that was denied:\n%s", c.name, stream)
			}
			if c.run == "monitor" && (strings.Contains(stream, "aguard.") || len(got) != len(c.events)) {
				t.Errorf("monitor mode changed the stream:\n%s", stream)
			}
			if c.run == "approve" {
				var ev struct {
					Value struct{ RequiresApprovalAt time.Time }
				}
				for _, e := range got {
					if strings.Contains(e, "approval_required") {
						json.Unmarshal([]byte(e), &ev)
					}
				}
				if d := ev.Value.RequiresApprovalAt.Sub(start); d < 4*time.Minute || d > 6*time.Minute {
					t.Errorf("requiresApprovalAt %v is not about 5m from now", ev.Value.RequiresApprovalAt)
				}
			}
			if c.run == "shell" {
				select {
				case run := <-cancelled:
					if run != "shell" {
						t.Errorf("cancelled %s", run)
					}
				case <-time.After(3 * time.Second):
					t.Error("the agent's stream was not closed after the policy denial")
				}
			}
			var body strings.Builder
			for _, e := range got {
				body.WriteString("data: " + e + "\n\n")
			}
			reqs = append(reqs, interop.Request{Mode: interop.ModeBody, Client: interop.Client10,
				Input: json.RawMessage(confirmInput(c.run)), Body: body.String(), ChunkSize: 11})
			all = append(all, c)
		}
	}
	results, err := interop.RunAll(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range results {
		c := all[i]
		if !res.Accepted {
			t.Errorf("%s: the official client rejected the stream: %s", c.name, res.Error)
			continue
		}
		if c.pending == "-" {
			continue
		}
		if len(res.Runs) != 1 || strings.Join(res.Runs[0].PendingToolCallIDs, ",") != c.pending {
			t.Errorf("%s: the client derived runs %+v, want pending %q", c.name, res.Runs, c.pending)
		}
	}
}

// TestPolicyReload pins hot reload through the proxy: a changed policy
// decides the next run; a broken one is refused and the last good one keeps
// deciding.
func TestPolicyReload(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	writePolicy(t, dir, `package aguard
decision := {"action": "allow"}
`)
	engine, err := policy.New(ctx, policy.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string][]string{}
	for i := range 3 {
		run := fmt.Sprintf("r%d", i)
		runs[run] = callRun(run, "confirm_order", `{"orderId":"A"}`, false)
	}
	h := newHarness(t, scriptedAgent(runs, nil), func(o *Options) { o.Policy = engine })
	denied := func(run string) bool {
		resp := h.post(t, ctx, "/agent", confirmInput(run))
		defer resp.Body.Close()
		return strings.Contains(strings.Join(readAll(t, resp.Body), "\n"), "aguard.tool_call_denied")
	}
	if denied("r0") {
		t.Fatal("denied under the allow-all policy")
	}
	writePolicy(t, dir, `package aguard
decision := {"action": "deny", "reason": "closed for maintenance"}
`)
	if err := engine.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if !denied("r1") {
		t.Fatal("the reloaded policy did not decide the next run")
	}
	writePolicy(t, dir, "package aguard\ndecision := {\"action\": \n")
	if err := engine.Reload(ctx); err == nil || !strings.Contains(err.Error(), "policy.rego:") {
		t.Fatalf("broken policy: Reload = %v, want an error naming the file and line", err)
	}
	if !denied("r2") {
		t.Fatal("after a broken reload the last good policy must keep deciding")
	}
	if _, lastErr := engine.Status(); lastErr == nil {
		t.Fatal("Status does not report the broken policy")
	}
}

// TestBrokenPolicyMidRun replaces the policy folder with a broken policy
// while a run is streaming: the run goes on, and its calls are decided by the
// last good policy.
func TestBrokenPolicyMidRun(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	writePolicy(t, dir, `package aguard
decision := {"action": "deny", "reason": "last good policy"}
`)
	engine, err := policy.New(ctx, policy.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	events := callRun("mid", "confirm_order", `{"orderId":"A"}`, false)
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, frame(events[0]))
		w.(http.Flusher).Flush()
		<-release
		for _, e := range events[1:] {
			io.WriteString(w, frame(e))
		}
	}, func(o *Options) { o.Policy = engine })
	resp := h.post(t, ctx, "/agent", confirmInput("mid"))
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if ev, err := (&frames{r: br}).next(); err != nil || !strings.Contains(ev, "RUN_STARTED") {
		t.Fatalf("first event %q %v", ev, err)
	}
	writePolicy(t, dir, "package aguard\ndecision := {\n")
	if err := engine.Reload(ctx); err == nil {
		t.Fatal("a broken policy reloaded")
	}
	close(release)
	got := readAll(t, br)
	if !strings.Contains(strings.Join(got, "\n"), `"reason":"last good policy"`) {
		t.Fatalf("the run was not decided by the last good policy:\n%s", strings.Join(got, "\n"))
	}
}

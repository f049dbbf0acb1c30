package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/aguard/aguard/internal/await"
)

// tracedPolicy allows every call but two: drop_tables is denied, and
// confirm_order (a frontend tool) is held for approval.
const tracedPolicy = `package aguard

default decision := {"action": "allow", "reason": "allowed"}

decision := {"action": "deny", "reason": "dropping tables is not allowed"} if {
	input.phase != "tool_call_start"
	input.call.name == "drop_tables"
}

decision := {"action": "require_approval", "reason": "orders need a reviewer"} if {
	input.phase == "tool_call_end"
	input.call.name == "confirm_order"
}
`

// scriptedAgent answers each run with one tool call chosen by its runId
// (the runId's first word: allowed, denied, held), and keeps the
// traceparent header each run's request carried.
type scriptedAgent struct {
	*httptest.Server
	mu          sync.Mutex
	traceparent map[string]string // by runId
}

func newScriptedAgent(t *testing.T) *scriptedAgent {
	a := &scriptedAgent{traceparent: map[string]string{}}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		thread, run := field(b, "threadId"), field(b, "runId")
		a.mu.Lock()
		a.traceparent[run] = r.Header.Get("traceparent")
		a.mu.Unlock()
		id := "call-" + run
		name, result := "lookup", true
		switch strings.Split(run, "-")[0] {
		case "denied":
			name = "drop_tables"
		case "held":
			name, result = "confirm_order", false
		}
		w.Header().Set("Content-Type", "text/event-stream")
		events := []string{
			`{"type":"RUN_STARTED","threadId":"` + thread + `","runId":"` + run + `"}`,
			`{"type":"TOOL_CALL_START","toolCallId":"` + id + `","toolCallName":"` + name + `"}`,
			`{"type":"TOOL_CALL_ARGS","toolCallId":"` + id + `","delta":"{\"q\":1}"}`,
			`{"type":"TOOL_CALL_END","toolCallId":"` + id + `"}`,
		}
		if result {
			events = append(events, `{"type":"TOOL_CALL_RESULT","messageId":"m-`+run+`","toolCallId":"`+id+`","content":"done"}`)
		}
		events = append(events, `{"type":"RUN_FINISHED","threadId":"`+thread+`","runId":"`+run+`"}`)
		for _, ev := range events {
			io.WriteString(w, "data: "+ev+"\n\n")
		}
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *scriptedAgent) sawTraceparent(run string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.traceparent[run]
}

// consumerRun posts a run to aguard with a traceparent naming trace
// traceID and the consumer's span parentID, and returns the stream. A
// legacy input has no protocolVersion (a 0.x consumer). confirm_order is
// advertised, so a call to it is a frontend call.
func consumerRun(t *testing.T, listen, run, traceID, parentID string, legacy bool) string {
	t.Helper()
	version := `"protocolVersion":"1.0",`
	if legacy {
		version = ""
	}
	body := `{"threadId":"thread-` + run + `","runId":"` + run + `",` + version + `"messages":[],` +
		`"tools":[{"name":"confirm_order","description":"ask the user","parameters":{"type":"object"}}]}`
	req, _ := http.NewRequest("POST", "http://"+listen+"/agent", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if traceID != "" {
		req.Header.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("run %s: %d %s", run, resp.StatusCode, b)
	}
	return string(b)
}

// waitForTrace waits until the server span of trace id has arrived: it
// ends last, after every other span of the request.
func waitForTrace(t *testing.T, r *otlpReceiver, id string) []span {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		spans := r.trace(id)
		for _, s := range spans {
			if s.kind == tracepb.Span_SPAN_KIND_SERVER {
				return spans
			}
		}
		select {
		case <-r.changed:
		case <-deadline:
			t.Fatalf("no server span of trace %s arrived; got %d spans of it", id, len(spans))
		}
	}
}

func only(t *testing.T, spans []span, what string, match func(span) bool) span {
	t.Helper()
	var found []span
	for _, s := range spans {
		if match(s) {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans are %s, want 1: %+v", len(found), what, spans)
	}
	return found[0]
}

// runTrace is what one run's trace must show.
type runTrace struct {
	run, tool string
	frontend  bool
	action    string // aguard.decision.action
	outcome   string // aguard.tool.outcome
	denied    bool   // status error
}

var decisionIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// checkRunTrace checks the spans of one run: the consumer's request
// (server, child of the consumer's span), the agent's (client, child of
// the server span, its traceparent the one the agent got), the call's
// execute_tool span (child of the server span) with the GenAI and
// decision attributes, and the policy's evaluations (children of the
// call's span). It returns the server span and the policy span of the
// tool_call_end decision.
func checkRunTrace(t *testing.T, spans []span, traceID, parentID, agentSaw string, want runTrace) (server, policyEnd span) {
	t.Helper()
	server = only(t, spans, "server spans", func(s span) bool { return s.kind == tracepb.Span_SPAN_KIND_SERVER })
	if server.parentID != parentID || server.name != "POST" || server.attrs["gen_ai.conversation.id"] != "thread-"+want.run ||
		server.attrs["http.response.status_code"] != int64(200) || server.attrs["aguard.run.id"] != want.run {
		t.Errorf("%s: server span %+v, want POST, child of the consumer's span %s", want.run, server, parentID)
	}
	client := only(t, spans, "client spans", func(s span) bool { return s.kind == tracepb.Span_SPAN_KIND_CLIENT })
	if client.parentID != server.spanID || client.attrs["http.response.status_code"] != int64(200) || client.attrs["url.path"] != "/agent" {
		t.Errorf("%s: client span %+v, want a child of the server span %s", want.run, client, server.spanID)
	}
	if wantTP := "00-" + traceID + "-" + client.spanID + "-01"; agentSaw != wantTP {
		t.Errorf("%s: the agent got traceparent %q, want %q (the client span's)", want.run, agentSaw, wantTP)
	}
	tool := only(t, spans, "execute_tool spans", func(s span) bool { return strings.HasPrefix(s.name, "execute_tool") })
	attrs := map[string]any{
		"gen_ai.operation.name":  "execute_tool",
		"gen_ai.tool.name":       want.tool,
		"gen_ai.tool.call.id":    "call-" + want.run,
		"gen_ai.conversation.id": "thread-" + want.run,
		"aguard.tool.frontend":   want.frontend,
		"aguard.decision.action": want.action,
		"aguard.tool.outcome":    want.outcome,
	}
	if tool.name != "execute_tool "+want.tool || tool.parentID != server.spanID || tool.kind != tracepb.Span_SPAN_KIND_INTERNAL {
		t.Errorf("%s: tool span %q (%v), parent %s, want execute_tool %s, child of the server span %s", want.run, tool.name, tool.kind, tool.parentID, want.tool, server.spanID)
	}
	for k, v := range attrs {
		if tool.attrs[k] != v {
			t.Errorf("%s: tool span %s = %#v, want %#v", want.run, k, tool.attrs[k], v)
		}
	}
	if id, _ := tool.attrs["aguard.decision.id"].(string); !decisionIDPattern.MatchString(id) {
		t.Errorf("%s: aguard.decision.id %q", want.run, id)
	}
	if rev, _ := tool.attrs["aguard.policy.revision"].(string); rev == "" {
		t.Errorf("%s: no aguard.policy.revision", want.run)
	}
	if denied := tool.status == tracepb.Status_STATUS_CODE_ERROR; denied != want.denied {
		t.Errorf("%s: tool span status %v (%q), want error: %v", want.run, tool.status, tool.statusMessage, want.denied)
	}
	policy := map[string]span{}
	for _, s := range spans {
		if s.name == "aguard.policy.evaluate" {
			if s.parentID != tool.spanID {
				t.Errorf("%s: policy span %+v is not a child of the tool span %s", want.run, s, tool.spanID)
			}
			policy[s.attrs["aguard.policy.phase"].(string)] = s
		}
	}
	policyEnd, ok := policy["tool_call_end"]
	if len(policy) != 2 || !ok || policy["tool_call_start"].attrs["aguard.decision.action"] != "stream" ||
		policyEnd.attrs["aguard.decision.action"] != want.action || policyEnd.attrs["aguard.decision.id"] != tool.attrs["aguard.decision.id"] {
		t.Errorf("%s: policy spans %+v, want one per phase, the end's deciding %s", want.run, policy, want.action)
	}
	if len(spans) != 5 {
		t.Errorf("%s: %d spans, want 5 (server, client, tool, two evaluations): %+v", want.run, len(spans), spans)
	}
	return server, policyEnd
}

// logLineWith returns the first JSON log line with msg whose attributes
// include kv (pairs).
func logLineWith(lines []string, msg string, kv ...string) map[string]any {
	for _, line := range lines {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != msg {
			continue
		}
		ok := true
		for i := 0; i+1 < len(kv); i += 2 {
			ok = ok && m[kv[i]] == kv[i+1]
		}
		if ok {
			return m
		}
	}
	return nil
}

// TestServeTracesEachRunToAnOTLPCollector runs the real binary with
// tracing configured only by OTEL_* variables, exporting OTLP/HTTP
// protobuf to a receiver in the test, and follows an allowed, a denied, a
// held and a legacy (0.x consumer) run through their traces: the spans,
// their attributes and parent/child links, the trace id the agent was
// given, and the trace ids in the log lines.
func TestServeTracesEachRunToAnOTLPCollector(t *testing.T) {
	bin := buildAguard(t)
	recv := newOTLPReceiver()
	endpoint := recv.serveHTTP(t)
	agent := newScriptedAgent(t)
	dir := writeTree(t, map[string]string{"policy.rego": tracedPolicy})
	a := startJSONAguardEnv(t, bin, []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint,
		"OTEL_BSP_SCHEDULE_DELAY=50", // export within 50 ms, not 5 s
	}, "--upstream", agent.URL, "--policy", dir)

	runs := []struct {
		want   runTrace
		legacy bool
		stream string // what the consumer's stream must hold
	}{
		{runTrace{run: "allowed-1", tool: "lookup", action: "allow", outcome: "answered"}, false, `"content":"done"`},
		{runTrace{run: "denied-1", tool: "drop_tables", action: "deny", outcome: "denied", denied: true}, false, `"code":"AGUARD_POLICY_DENIED"`},
		{runTrace{run: "held-1", tool: "confirm_order", frontend: true, action: "require_approval", outcome: "pending"}, false, `"name":"aguard.approval_required"`},
		{runTrace{run: "allowed-legacy", tool: "lookup", action: "allow", outcome: "answered"}, true, `"content":"done"`},
	}
	for i, r := range runs {
		traceID := fmt.Sprintf("4bf92f3577b34da6a3ce929d0e0e%04x", i)
		parentID := fmt.Sprintf("00f067aa0ba9%04x", i)
		out := consumerRun(t, a.listen, r.want.run, traceID, parentID, r.legacy)
		if !strings.Contains(out, r.stream) {
			t.Fatalf("%s: stream lacks %s:\n%s", r.want.run, r.stream, out)
		}
		spans := waitForTrace(t, recv, traceID)
		server, policyEnd := checkRunTrace(t, spans, traceID, parentID, agent.sawTraceparent(r.want.run), r.want)
		if server.service != "aguard" {
			t.Errorf("service.name %q, want aguard", server.service)
		}
		if r.want.run == "held-1" {
			tool := only(t, spans, "execute_tool spans", func(s span) bool { return strings.HasPrefix(s.name, "execute_tool") })
			ev, ok := tool.events["aguard.approval_required"]
			if at, _ := ev["aguard.approval.deadline"].(string); !ok || !strings.Contains(out, `"requiresApprovalAt":"`+at+`"`) {
				t.Errorf("held: tool span events %v, want aguard.approval_required with the deadline the consumer was told", tool.events)
			}
		}
		if r.want.run == "denied-1" && !strings.Contains(out, policyEnd.attrs["aguard.decision.id"].(string)) {
			t.Errorf("denied: the consumer's RUN_ERROR does not name decision %v", policyEnd.attrs["aguard.decision.id"])
		}
		// The log lines of the run carry its trace. The stream's last line
		// is written before its server span ends, but reaches the lines
		// kept here through the reader of aguard's stderr, which may not
		// have read it yet when the span has arrived.
		var lines []string
		await.For(t, "the stream ended line of "+r.want.run, func() bool {
			lines = a.stderr()
			return logLineWith(lines, "stream ended", "runId", r.want.run) != nil
		})
		decision := logLineWith(lines, "policy decision", "toolCallId", "call-"+r.want.run, "phase", "tool_call_end")
		if decision == nil || decision["trace_id"] != traceID || decision["span_id"] != policyEnd.spanID {
			t.Errorf("%s: policy decision line %v, want trace_id %s span_id %s", r.want.run, decision, traceID, policyEnd.spanID)
		}
		ended := logLineWith(lines, "stream ended", "runId", r.want.run)
		if ended == nil || ended["trace_id"] != traceID || ended["span_id"] != server.spanID {
			t.Errorf("%s: stream ended line %v, want trace_id %s span_id %s", r.want.run, ended, traceID, server.spanID)
		}
	}

	// A run without a traceparent starts a trace of its own, which the
	// agent joins.
	consumerRun(t, a.listen, "allowed-2", "", "", false)
	tp := agent.sawTraceparent("allowed-2")
	parts := strings.Split(tp, "-")
	if len(parts) != 4 {
		t.Fatalf("the agent got traceparent %q", tp)
	}
	spans := waitForTrace(t, recv, parts[1])
	checkRunTrace(t, spans, parts[1], "", tp, runTrace{run: "allowed-2", tool: "lookup", action: "allow", outcome: "answered"})
}

// TestServeExportsTracesOverGRPC: with OTEL_EXPORTER_OTLP_PROTOCOL=grpc
// the same spans go to an OTLP/gRPC receiver, under the service name
// OTEL_SERVICE_NAME gives.
func TestServeExportsTracesOverGRPC(t *testing.T) {
	bin := buildAguard(t)
	recv := newOTLPReceiver()
	addr := recv.serveGRPC(t)
	agent := newScriptedAgent(t)
	dir := writeTree(t, map[string]string{"policy.rego": tracedPolicy})
	a := startJSONAguardEnv(t, bin, []string{
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://" + addr,
		"OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_EXPORTER_OTLP_INSECURE=true",
		"OTEL_SERVICE_NAME=gateway-a",
		"OTEL_BSP_SCHEDULE_DELAY=50",
	}, "--upstream", agent.URL, "--policy", dir)
	traceID, parentID := "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	consumerRun(t, a.listen, "denied-g", traceID, parentID, false)
	spans := waitForTrace(t, recv, traceID)
	server, _ := checkRunTrace(t, spans, traceID, parentID, agent.sawTraceparent("denied-g"),
		runTrace{run: "denied-g", tool: "drop_tables", action: "deny", outcome: "denied", denied: true})
	if server.service != "gateway-a" {
		t.Errorf("service.name %q, want gateway-a (OTEL_SERVICE_NAME)", server.service)
	}
}

// TestServeCarriesTraceContextAsOTEL_PROPAGATORSNames runs aguard with
// OTEL_PROPAGATORS=b3multi: the consumer's B3 headers parent the server
// span, and the agent gets B3 headers naming the client span, not the
// consumer's. An unknown propagator stops aguard at startup, named.
func TestServeCarriesTraceContextAsOTEL_PROPAGATORSNames(t *testing.T) {
	bin := buildAguard(t)
	recv := newOTLPReceiver()
	endpoint := recv.serveHTTP(t)
	saw := make(chan http.Header, 1)
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		saw <- r.Header.Clone()
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"type":"RUN_STARTED","threadId":"`+field(b, "threadId")+`","runId":"b3-1"}`+"\n\n")
		io.WriteString(w, `data: {"type":"RUN_FINISHED","threadId":"`+field(b, "threadId")+`","runId":"b3-1"}`+"\n\n")
	}))
	defer agent.Close()
	env := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint, "OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_PROPAGATORS=b3multi"}
	a := startJSONAguardEnv(t, bin, env, "--upstream", agent.URL)

	traceID, parentID := "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"
	req, _ := http.NewRequest("POST", "http://"+a.listen+"/agent",
		strings.NewReader(`{"threadId":"t-b3","runId":"b3-1","protocolVersion":"1.0","messages":[]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-B3-TraceId", traceID)
	req.Header.Set("X-B3-SpanId", parentID)
	req.Header.Set("X-B3-ParentSpanId", "05e3ac9a4f6e3b90")
	req.Header.Set("X-B3-Sampled", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("run: %d", resp.StatusCode)
	}
	h := <-saw
	spans := waitForTrace(t, recv, traceID)
	server := only(t, spans, "server spans", func(s span) bool { return s.kind == tracepb.Span_SPAN_KIND_SERVER })
	client := only(t, spans, "client spans", func(s span) bool { return s.kind == tracepb.Span_SPAN_KIND_CLIENT })
	if server.parentID != parentID {
		t.Errorf("server span's parent %s, want the consumer's B3 span %s", server.parentID, parentID)
	}
	if h.Get("X-B3-TraceId") != traceID || h.Get("X-B3-SpanId") != client.spanID || h.Get("X-B3-ParentSpanId") != "" {
		t.Errorf("the agent got X-B3-TraceId %q, X-B3-SpanId %q, X-B3-ParentSpanId %q; want %s, the client span %s, none",
			h.Get("X-B3-TraceId"), h.Get("X-B3-SpanId"), h.Get("X-B3-ParentSpanId"), traceID, client.spanID)
	}

	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--upstream", agent.URL)
	cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_PROPAGATORS=tracecontext,smoke-signals")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "smoke-signals") {
		t.Errorf("an unknown propagator: exit %v, output %s; want a startup error naming it", err, out)
	}
}

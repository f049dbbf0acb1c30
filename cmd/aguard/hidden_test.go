package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// hidingPolicy hides calls to the vault tools from the consumer as they
// start, allows vault_read at its end and denies vault_drop.
const hidingPolicy = `package aguard

default decision := {"action": "allow", "reason": "allowed"}

decision := {"action": "hide", "reason": "the vault is the agent's business"} if {
	input.phase == "tool_call_start"
	startswith(input.call.name, "vault_")
}

decision := {"action": "deny", "reason": "the vault is never dropped"} if {
	input.phase == "tool_call_end"
	input.call.name == "vault_drop"
}
`

// TestServeRecordsReportsAndTracesAHiddenCall runs the binary with a policy
// that hides the agent's own vault calls: the consumer never gets a byte of
// them, yet each is recorded in the ledger, sent in webhooks and traced,
// with the decision it got — allowed, or denied (which ends the run).
func TestServeRecordsReportsAndTracesAHiddenCall(t *testing.T) {
	bin := buildAguard(t)
	recv := newOTLPReceiver()
	endpoint := recv.serveHTTP(t)
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		thread, run := field(b, "threadId"), field(b, "runId")
		tool := "vault_read"
		if strings.HasPrefix(run, "drop") {
			tool = "vault_drop"
		}
		id := "call-" + run
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{
			`{"type":"RUN_STARTED","threadId":"` + thread + `","runId":"` + run + `"}`,
			`{"type":"TEXT_MESSAGE_START","messageId":"m-` + run + `","role":"assistant"}`,
			`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m-` + run + `","delta":"looking it up"}`,
			`{"type":"TEXT_MESSAGE_END","messageId":"m-` + run + `"}`,
			`{"type":"TOOL_CALL_START","toolCallId":"` + id + `","toolCallName":"` + tool + `","parentMessageId":"m-` + run + `"}`,
			`{"type":"TOOL_CALL_ARGS","toolCallId":"` + id + `","delta":"{\"key\":\"k1\"}"}`,
			`{"type":"TOOL_CALL_END","toolCallId":"` + id + `"}`,
			`{"type":"TOOL_CALL_RESULT","messageId":"r-` + run + `","toolCallId":"` + id + `","content":"s3cr3t"}`,
			`{"type":"RUN_FINISHED","threadId":"` + thread + `","runId":"` + run + `"}`,
		} {
			io.WriteString(w, "data: "+ev+"\n\n")
		}
	}))
	defer agent.Close()
	var mu sync.Mutex
	hooks := map[string][]string{} // call id -> event types, in order
	hooked := make(chan struct{}, 16)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Type     string `json:"type"`
			ToolCall struct {
				ID   string `json:"id"`
				Name string `json:"name"`
			} `json:"tool_call"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &body); err != nil {
			t.Errorf("webhook body %s: %v", b, err)
		}
		mu.Lock()
		hooks[body.ToolCall.ID] = append(hooks[body.ToolCall.ID], body.Type+" "+body.ToolCall.Name)
		mu.Unlock()
		hooked <- struct{}{}
	}))
	defer receiver.Close()
	dir := writeTree(t, map[string]string{"policy.rego": hidingPolicy})
	a := startJSONAguardEnv(t, bin, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint, "OTEL_BSP_SCHEDULE_DELAY=50"},
		"--upstream", agent.URL, "--policy", dir, "--admin-token", "admin-tok", "--webhook", receiver.URL, "--webhook-secret", "s")

	for i, tt := range []struct {
		run, tool, status, action, outcome string
		denied                             bool
	}{
		{"read-1", "vault_read", "TOOL_EXECUTION_STATUS_COMPLETED", "allow", "answered", false},
		{"drop-1", "vault_drop", "TOOL_EXECUTION_STATUS_FAILED", "deny", "denied", true},
	} {
		traceID, parentID := fmt.Sprintf("7a3c0d1e2f4b5a6978c0d1e2f3a4%04x", i), fmt.Sprintf("1b2c3d4e5f60%04x", i)
		stream := consumerRun(t, a.listen, tt.run, traceID, parentID, false)
		for _, secret := range []string{"vault_", "call-" + tt.run, "s3cr3t", "k1"} {
			if strings.Contains(stream, secret) {
				t.Errorf("%s: the consumer got %q of a hidden call:\n%s", tt.run, secret, stream)
			}
		}
		if !strings.Contains(stream, "looking it up") {
			t.Errorf("%s: the text around the hidden call was lost:\n%s", tt.run, stream)
		}
		if ended := strings.Contains(stream, `"code":"AGUARD_POLICY_DENIED"`); ended != tt.denied {
			t.Errorf("%s: run ended with AGUARD_POLICY_DENIED: %v, want %v:\n%s", tt.run, ended, tt.denied, stream)
		}

		// The ledger holds the call, with its decision.
		code, b := adminDo(t, a.admin, "admin-tok", "GET", "/v1/tool-calls/call-"+tt.run+"?threadId=thread-"+tt.run, "")
		var rec struct {
			Name, Status, DecisionID, DecisionReason string
		}
		if err := json.Unmarshal([]byte(b), &rec); err != nil || code != 200 {
			t.Fatalf("%s: admin API %d %s (%v)", tt.run, code, b, err)
		}
		if rec.Name != tt.tool || rec.Status != tt.status || !decisionIDPattern.MatchString(rec.DecisionID) {
			t.Errorf("%s: the ledger's record %s, want %s %s with a decision id", tt.run, b, tt.tool, tt.status)
		}

		// The trace has the call's span, with the decision the stream applied.
		spans := waitForTrace(t, recv, traceID)
		tool := only(t, spans, "execute_tool spans", func(s span) bool { return strings.HasPrefix(s.name, "execute_tool") })
		if tool.name != "execute_tool "+tt.tool || tool.attrs["gen_ai.tool.call.id"] != "call-"+tt.run ||
			tool.attrs["aguard.decision.action"] != tt.action || tool.attrs["aguard.tool.outcome"] != tt.outcome ||
			tool.attrs["aguard.decision.id"] != rec.DecisionID || (tool.status == tracepb.Status_STATUS_CODE_ERROR) != tt.denied {
			t.Errorf("%s: tool span %+v, want execute_tool %s deciding %s (%s), the ledger's decision %s", tt.run, tool, tt.tool, tt.action, tt.outcome, rec.DecisionID)
		}
	}

	// Webhooks follow both calls, start to end.
	want := map[string][]string{
		"call-read-1": {"llm.tool_call_started vault_read", "llm.tool_call_completed vault_read"},
		"call-drop-1": {"llm.tool_call_started vault_drop", "llm.tool_call_completed vault_drop"},
	}
	deadline := time.After(20 * time.Second)
	for {
		mu.Lock()
		done := fmt.Sprint(hooks) == fmt.Sprint(want)
		got := fmt.Sprint(hooks)
		mu.Unlock()
		if done {
			break
		}
		select {
		case <-hooked:
		case <-deadline:
			t.Fatalf("webhooks %s, want %v", got, want)
		}
	}
}

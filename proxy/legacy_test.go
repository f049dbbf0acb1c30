package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/interop"
	"github.com/aguard/aguard/policy"
)

// agent10 is a 1.0 agent run full of material a 0.x client cannot read: a
// subagent, a tool result made of content parts, a pending list.
var agent10 = []string{
	`{"type":"RUN_STARTED","threadId":"thread-l","runId":"run-l","protocolVersion":"1.0"}`,
	`{"type":"SUBAGENT_STARTED","subagentRunId":"sub-1","name":"researcher"}`,
	`{"type":"TEXT_MESSAGE_START","messageId":"m1","subagentRunId":"sub-1"}`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"Found it.","subagentRunId":"sub-1"}`,
	`{"type":"TEXT_MESSAGE_END","messageId":"m1","subagentRunId":"sub-1"}`,
	`{"type":"SUBAGENT_FINISHED","subagentRunId":"sub-1"}`,
	`{"type":"TOOL_CALL_START","toolCallId":"c-shot","toolCallName":"screenshot"}`,
	`{"type":"TOOL_CALL_END","toolCallId":"c-shot"}`,
	`{"type":"TOOL_CALL_RESULT","messageId":"tm1","toolCallId":"c-shot","content":[{"type":"text","text":"Chart of Q3"},{"type":"image","source":{"type":"url","value":"https://example.com/q3.png","mimeType":"image/png"}},{"type":"text","text":" (revenue)"}]}`,
	`{"type":"TOOL_CALL_START","toolCallId":"c-confirm","toolCallName":"confirm_order"}`,
	`{"type":"TOOL_CALL_ARGS","toolCallId":"c-confirm","delta":"{\"orderId\":\"A-17\"}"}`,
	`{"type":"TOOL_CALL_END","toolCallId":"c-confirm"}`,
	`{"type":"RUN_FINISHED","threadId":"thread-l","runId":"run-l","outcome":{"type":"success","pendingToolCallIds":["c-confirm"]}}`,
}

// TestLegacyClientGetsAStreamItAccepts runs the official 0.x client
// (@ag-ui/client 0.0.58), live, through aguard in front of a 1.0 agent: the
// stream must be accepted, the tool result flattened to its text parts, and
// every loss announced. The 1.0 client, through the same aguard, gets the
// 1.0 material unchanged.
func TestLegacyClientGetsAStreamItAccepts(t *testing.T) {
	h := newHarness(t, sseAgent(strings.Join(func() []string {
		var f []string
		for _, e := range agent10 {
			f = append(f, frame(e))
		}
		return f
	}(), "")))
	input := `{"threadId":"thread-l","runId":"run-l","messages":[{"id":"u1","role":"user","content":"chart please"}],` +
		`"tools":[{"name":"confirm_order","description":"Ask the user to confirm an order","parameters":{"type":"object"}}],"context":[],"state":{},"forwardedProps":{}}`
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	results, err := interop.RunAll(ctx, []interop.Request{
		{Mode: interop.ModeLive, Client: interop.Client0058, URL: h.url + "/agent", Input: json.RawMessage(input)},
		{Mode: interop.ModeLive, Client: interop.Client10, URL: h.url + "/agent", Input: json.RawMessage(input)},
	})
	if err != nil {
		t.Fatal(err)
	}
	legacy, current := results[0], results[1]
	if !legacy.Accepted {
		t.Fatalf("the 0.0.58 client rejected aguard's stream: %s\nevents: %v", legacy.Error, legacy.EventTypes())
	}
	var result, announce []string
	for _, ev := range legacy.Events {
		s := string(ev)
		if strings.Contains(s, `"TOOL_CALL_RESULT"`) {
			result = append(result, s)
		}
		if strings.Contains(s, `"aguard.downgrade"`) {
			announce = append(announce, s)
		}
		if strings.HasPrefix(field(t, s, "type"), "SUBAGENT_") || strings.Contains(s, "pendingToolCallIds") {
			t.Errorf("1.0-only material reached the legacy client: %s", s)
		}
	}
	if len(result) != 1 || !strings.Contains(result[0], `"content":"Chart of Q3 (revenue)"`) {
		t.Errorf("tool result as the legacy client holds it: %q", result)
	}
	joined := strings.Join(announce, "\n")
	for _, want := range []string{`"what":"event"`, `SUBAGENT_STARTED`, `"what":"tool_result_content"`, `"type":"image"`} {
		if !strings.Contains(joined, want) {
			t.Errorf("announcements lack %s:\n%s", want, joined)
		}
	}
	if !current.Accepted {
		t.Fatalf("the 1.0.0 client rejected aguard's stream: %s", current.Error)
	}
	types := strings.Join(current.EventTypes(), ",")
	if !strings.Contains(types, "SUBAGENT_STARTED") || strings.Contains(strings.Join(func() []string {
		var s []string
		for _, e := range current.Events {
			s = append(s, string(e))
		}
		return s
	}(), ""), "aguard.downgrade") {
		t.Errorf("the 1.0 client did not get the 1.0 stream unchanged: %s", types)
	}
	if len(current.Runs) != 1 || strings.Join(current.Runs[0].PendingToolCallIDs, ",") != "c-confirm" {
		t.Errorf("1.0 client runs: %+v", current.Runs)
	}
}

// TestLegacyUpstreamGetsFlattenedInput pins the other direction: an agent on
// the 0.x line receives tool messages flattened to text, and everything else,
// forwardedProps included, unchanged.
func TestLegacyUpstreamGetsFlattenedInput(t *testing.T) {
	got := make(chan string, 1)
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- string(b)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, frame(`{"type":"RUN_ERROR","message":"done"}`))
	}, func(o *Options) { o.UpstreamProtocol = "0.x" })
	body := `{"threadId":"t","runId":"r","protocolVersion":"1.0","messages":[` +
		`{"id":"a1","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"shot","arguments":"{}"}}]},` +
		`{"id":"t1","role":"tool","toolCallId":"c1","content":[{"type":"text","text":"see "},{"type":"image","source":{"type":"url","value":"https://x/y.png"}},{"type":"text","text":"chart"}]}],` +
		`"forwardedProps":{"keep":[1,{"b":2}]}}`
	resp := h.post(t, context.Background(), "/agent", body)
	readAll(t, resp.Body)
	resp.Body.Close()
	sent := <-got
	if !strings.Contains(sent, `"toolCallId":"c1","content":"see chart"`) {
		t.Errorf("tool message not flattened: %s", sent)
	}
	if !strings.Contains(sent, `"forwardedProps":{"keep":[1,{"b":2}]}`) {
		t.Errorf("forwardedProps changed: %s", sent)
	}
}

// TestLegacyClientAcceptsPolicySignals pins that aguard's own events (a
// denial with its declining TOOL_CALL_RESULT, an approval request) are ones
// the 0.x client accepts too.
func TestLegacyClientAcceptsPolicySignals(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, `package aguard
default decision := {"action": "allow"}
decision := {"action": "deny", "reason": "no"} if {
	input.phase == "tool_call_end"
	input.call.name == "confirm_order"
}
decision := {"action": "require_approval", "reason": "review"} if input.call.name == "transfer"
`)
	engine, err := policy.New(context.Background(), policy.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	events := []string{
		`{"type":"RUN_STARTED","threadId":"thread-l","runId":"run-l"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"c-deny","toolCallName":"confirm_order"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"c-deny"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"c-pay","toolCallName":"transfer"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"c-pay"}`,
		`{"type":"RUN_FINISHED","threadId":"thread-l","runId":"run-l"}`,
	}
	var body strings.Builder
	for _, e := range events {
		body.WriteString(frame(e))
	}
	h := newHarness(t, sseAgent(body.String()), func(o *Options) { o.Policy = engine })
	input := `{"threadId":"thread-l","runId":"run-l","messages":[],"tools":[` +
		`{"name":"confirm_order","description":"ask","parameters":{"type":"object"}},{"name":"transfer","description":"pay","parameters":{"type":"object"}}],"context":[],"state":{},"forwardedProps":{}}`
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := interop.Run(ctx, interop.Request{Mode: interop.ModeLive, Client: interop.Client0058, URL: h.url + "/agent", Input: json.RawMessage(input)})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Accepted {
		t.Fatalf("the 0.0.58 client rejected aguard's policy signals: %s\nevents: %v", res.Error, res.EventTypes())
	}
	joined := ""
	for _, e := range res.Events {
		joined += string(e)
	}
	for _, want := range []string{"aguard.tool_call_denied", "aguard-declined-c-deny", "aguard.approval_required"} {
		if !strings.Contains(joined, want) {
			t.Errorf("the legacy client did not get %s", want)
		}
	}
}

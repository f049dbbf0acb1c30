package proxy

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/interop"
)

// corpus is producer streams of every kind aguard must handle: valid runs,
// fabricated answers in each place they hide, wrong pending lists, and one
// stream per fatal rule. Each runs against the input of confirmInput (the
// frontend tool confirm_order) with the given runId.
var corpus = []struct {
	name   string
	events []string
	want   string // substring of the last event the consumer receives
}{
	{"valid: text, agent tool, frontend call", []string{
		`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","delta":"hi"}`,
		`{"type":"TOOL_CALL_CHUNK","toolCallId":"s1","toolCallName":"search","parentMessageId":"m1","delta":"{}"}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"t1","toolCallId":"s1","content":[{"type":"text","text":"found"}]}`,
		`{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"confirm_order","parentMessageId":"m1"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"{\"orderId\":\"A\"}"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"c1"}`,
		`{"type":"RUN_FINISHED","threadId":"thread-p","runId":"%r"}`}, `"pendingToolCallIds":["c1"]`},
	{"valid: two runs and a late RUN_ERROR", []string{
		`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"RUN_FINISHED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r-2"}`,
		`{"type":"RUN_FINISHED","threadId":"thread-p","runId":"%r-2"}`,
		`{"type":"RUN_ERROR","message":"late"}`}, `"message":"late"`},
	{"fabricated TOOL_CALL_RESULT", []string{
		`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"confirm_order"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"c1"}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"t1","toolCallId":"c1","content":"Forwarded to client"}`,
		`{"type":"RUN_FINISHED","threadId":"thread-p","runId":"%r","outcome":{"type":"success"}}`}, `"pendingToolCallIds":["c1"]`},
	{"fabricated tool message in MESSAGES_SNAPSHOT", []string{
		`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"confirm_order","parentMessageId":"a1"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"c1"}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u1","role":"user","content":"go"},{"id":"a1","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm_order","arguments":"{}"}}]},{"id":"t1","role":"tool","toolCallId":"c1","content":"done"}]}`,
		`{"type":"RUN_FINISHED","threadId":"thread-p","runId":"%r"}`}, `"pendingToolCallIds":["c1"]`},
	{"fabricated tool message in the RUN_STARTED input echo", []string{
		`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r","input":{"threadId":"thread-p","runId":"%r","messages":[{"id":"a0","role":"assistant","toolCalls":[{"id":"c0","type":"function","function":{"name":"confirm_order","arguments":"{}"}}]},{"id":"t0","role":"tool","toolCallId":"c0","content":"made up"}],"tools":[],"context":[]}}`,
		`{"type":"RUN_FINISHED","threadId":"thread-p","runId":"%r"}`}, `"type":"RUN_FINISHED"`},
	{"wrong pending list replaced", []string{
		`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"confirm_order"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"c1"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"c2","toolCallName":"confirm_order"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"c2"}`,
		`{"type":"RUN_FINISHED","threadId":"thread-p","runId":"%r","outcome":{"type":"success","pendingToolCallIds":["c2","zz"]}}`}, `"pendingToolCallIds":["c1","c2"]`},
	{"wrong non-empty list with nothing pending becomes []", []string{
		`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"RUN_FINISHED","threadId":"thread-p","runId":"%r","outcome":{"type":"success","pendingToolCallIds":["ghost"]}}`}, `"pendingToolCallIds":[]`},
	{"call seen only in a snapshot, its ToolNode answer removed, RUN_FINISHED with LangGraph's runId", []string{
		`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","role":"assistant","delta":"Confirm?"}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u1","role":"user","content":"go"},{"id":"m1","role":"assistant","content":"Confirm?","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm_order","arguments":"{\"orderId\":\"A\"}"}}]},{"id":"t1","role":"tool","toolCallId":"c1","content":"Error: Tool \"confirm_order\" not found"}]}`,
		`{"type":"RUN_FINISHED","threadId":"thread-p","runId":"1f0c3a52-lg"}`}, `"pendingToolCallIds":["c1"]`},
	{"forged aguard signals", []string{
		`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","delta":"a"}`,
		`{"type":"CUSTOM","name":"aguard.tool_call_denied","value":{"toolCallId":"c1","toolCallName":"confirm_order","reason":"forged","decisionId":"d"}}`,
		`{"type":"TEXT_MESSAGE_CHUNK","delta":"b"}`,
		`{"type":"RUN_FINISHED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"RUN_ERROR","code":"AGUARD_POLICY_DENIED","message":"forged"}`}, `"code":"AGENT_AGUARD_POLICY_DENIED"`},
	{"violation: first event", []string{`{"type":"TEXT_MESSAGE_START","messageId":"m"}`}, "first_event"},
	{"violation: ARGS for a call not open", []string{`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`, `{"type":"TOOL_CALL_ARGS","toolCallId":"x","delta":"{}"}`}, "tool_call_not_open"},
	{"violation: END for a call not open", []string{`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`, `{"type":"TOOL_CALL_END","toolCallId":"x"}`}, "tool_call_not_open"},
	{"violation: START for an open call", []string{`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"x","toolCallName":"a"}`, `{"type":"TOOL_CALL_START","toolCallId":"x","toolCallName":"a"}`}, "tool_call_already_open"},
	{"violation: reopen with another name", []string{`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"x","toolCallName":"a"}`, `{"type":"TOOL_CALL_END","toolCallId":"x"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"x","toolCallName":"b"}`}, "tool_call_reopen_mismatch"},
	{"violation: conflicting chunk continuation", []string{`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"TOOL_CALL_CHUNK","toolCallId":"x","toolCallName":"a","delta":"{"}`, `{"type":"TOOL_CALL_CHUNK","toolCallName":"b","delta":"}"}`}, "chunk_conflict"},
	{"violation: first chunk without a name", []string{`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"TOOL_CALL_CHUNK","toolCallId":"x","delta":"{"}`}, "chunk_missing_name"},
	{"violation: event after RUN_FINISHED", []string{`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"RUN_FINISHED","threadId":"thread-p","runId":"%r"}`, `{"type":"TEXT_MESSAGE_START","messageId":"m"}`}, "event_after_run_finished"},
	{"violation: RUN_FINISHED with a call open", []string{`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"x","toolCallName":"a"}`, `{"type":"RUN_FINISHED","threadId":"thread-p","runId":"%r"}`}, "run_finished_with_open_tool_calls"},
	{"violation: RUN_FINISHED with a message open", []string{`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"m"}`, `{"type":"RUN_FINISHED","threadId":"thread-p","runId":"%r"}`}, "run_finished_with_open_messages"},
	{"violation: nested RUN_STARTED", []string{`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`}, "run_already_started"},
	{"violation: malformed JSON", []string{`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`, `{"type":"TEXT_MESSAGE_START",`}, "malformed_event"},
	{"violation: known field of the wrong type", []string{`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"TOOL_CALL_START","toolCallId":7,"toolCallName":"a"}`}, "malformed_event"},
	{"violation: subagent attribution", []string{`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"m","subagentRunId":"s1"}`, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x","subagentRunId":"s2"}`}, "owner_mismatch"},
	{"truncated", []string{`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`, `{"type":"TEXT_MESSAGE_START","messageId":"m"}`}, "AGUARD_UPSTREAM_LOST"},
}

// TestCorpusThroughAguardAcceptedByOfficialClient runs the corpus through
// aguard and every output through the official @ag-ui/client 1.0.0, which
// must accept it and, for a finished run, derive the same pending list
// aguard stated on RUN_FINISHED.
func TestCorpusThroughAguardAcceptedByOfficialClient(t *testing.T) {
	runs := map[string][]string{}
	for i, c := range corpus {
		run := "corpus-" + string(rune('a'+i))
		var evs []string
		for _, e := range c.events {
			evs = append(evs, strings.ReplaceAll(e, "%r", run))
		}
		runs[run] = evs
	}
	h := newHarness(t, scriptedAgent(runs, nil))
	var reqs []interop.Request
	var stated [][]string
	for i, c := range corpus {
		run := "corpus-" + string(rune('a'+i))
		resp := h.post(t, context.Background(), "/agent", confirmInput(run))
		got := readAll(t, resp.Body)
		resp.Body.Close()
		if len(got) == 0 || !strings.Contains(got[len(got)-1], c.want) {
			t.Errorf("%s: last event %q lacks %q", c.name, got, c.want)
			continue
		}
		var body strings.Builder
		var pending []string
		for _, e := range got {
			body.WriteString("data: " + e + "\n\n")
			var ev struct {
				Type    string
				Outcome struct{ PendingToolCallIds []string }
			}
			json.Unmarshal([]byte(e), &ev)
			if ev.Type == "RUN_FINISHED" {
				pending = ev.Outcome.PendingToolCallIds
			}
		}
		stated = append(stated, pending)
		reqs = append(reqs, interop.Request{Mode: interop.ModeBody, Client: interop.Client10,
			Input: json.RawMessage(confirmInput(run)), Body: body.String(), ChunkSize: 13})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	results, err := interop.RunAll(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range results {
		if !res.Accepted {
			t.Errorf("%s: the official client rejected aguard's output: %s", corpus[i].name, res.Error)
			continue
		}
		for _, r := range res.Runs {
			if r.Terminal == "RUN_FINISHED" && stated[i] != nil && strings.Join(r.PendingToolCallIDs, ",") != strings.Join(stated[i], ",") {
				t.Errorf("%s: client derived pending %v, aguard stated %v", corpus[i].name, r.PendingToolCallIDs, stated[i])
			}
		}
	}
}

// TestForgedSignalsThroughAguard runs both official clients, live, against
// aguard in front of an agent that speaks as aguard: a CUSTOM
// aguard.tool_call_denied inside a chunked text message (which would close
// it, failing the id-less continuation, were it delivered), a CUSTOM
// aguard.approval_required, and a late RUN_ERROR AGUARD_POLICY_DENIED. The
// clients accept the stream, receive neither CUSTOM, and see the error as
// the agent's: AGENT_AGUARD_POLICY_DENIED. The 0.0.58 client gets the same
// through the 0.x bridge.
func TestForgedSignalsThroughAguard(t *testing.T) {
	h := newHarness(t, sseAgent(
		frame(`{"type":"RUN_STARTED","threadId":"thread-f","runId":"run-f"}`),
		frame(`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","delta":"a"}`),
		frame(`{"type":"CUSTOM","name":"aguard.tool_call_denied","value":{"toolCallId":"c1","toolCallName":"confirm_order","reason":"forged","decisionId":"d"}}`),
		frame(`{"type":"TEXT_MESSAGE_CHUNK","delta":"b"}`),
		frame(`{"type":"CUSTOM","name":"aguard.approval_required","value":{"toolCallId":"c1"}}`),
		frame(`{"type":"CUSTOM","name":"com.example.progress","value":1}`),
		frame(`{"type":"RUN_FINISHED","threadId":"thread-f","runId":"run-f"}`),
		frame(`{"type":"RUN_ERROR","code":"AGUARD_POLICY_DENIED","message":"forged"}`),
	))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	input := json.RawMessage(`{"threadId":"thread-f","runId":"run-f","messages":[],"tools":[],"context":[],"state":{}}`)
	results, err := interop.RunAll(ctx, []interop.Request{
		{Mode: interop.ModeLive, Client: interop.Client10, URL: h.url + "/agent", Input: input},
		{Mode: interop.ModeLive, Client: interop.Client0058, URL: h.url + "/agent", Input: input},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range results {
		client := []string{interop.Client10, interop.Client0058}[i]
		if !res.Accepted {
			t.Fatalf("%s rejected aguard's stream: %s\nevents: %v", client, res.Error, res.EventTypes())
		}
		var customs []string
		for _, e := range res.Events {
			var ev struct{ Type, Name string }
			json.Unmarshal(e, &ev)
			if ev.Type == "CUSTOM" {
				customs = append(customs, ev.Name)
			}
		}
		if !slices.Equal(customs, []string{"com.example.progress"}) {
			t.Errorf("%s received CUSTOM events %v, want only the agent's own com.example.progress", client, customs)
		}
		if res.RunError == nil || res.RunError.Code != "AGENT_AGUARD_POLICY_DENIED" || res.RunError.Message != "forged" {
			t.Errorf("%s received RUN_ERROR %+v, want the agent's, renamed AGENT_AGUARD_POLICY_DENIED", client, res.RunError)
		}
		if !strings.Contains(string(res.Messages), `"content":"ab"`) {
			t.Errorf("%s holds messages %s, want the text message \"ab\"", client, res.Messages)
		}
	}
}

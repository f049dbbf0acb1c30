package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/interop"
)

// TestOfficialClientAcceptsPlainRun runs the official @ag-ui/client 1.0.0
// HttpAgent, live, against aguard in front of a scripted agent: text, an
// agent-side tool call answered in-stream, and a frontend call left pending.
// The client must accept the stream and derive the pending list aguard set.
func TestOfficialClientAcceptsPlainRun(t *testing.T) {
	var gotInput map[string]any
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		json.Unmarshal(b, &gotInput)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range []string{
			`{"type":"RUN_STARTED","threadId":"thread-1","runId":"run-1","protocolVersion":"1.0"}`,
			`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`,
			`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"Looking up "}`,
			`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"the order."}`,
			`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
			`{"type":"TOOL_CALL_START","toolCallId":"c-lookup","toolCallName":"lookup_order","parentMessageId":"m1"}`,
			`{"type":"TOOL_CALL_ARGS","toolCallId":"c-lookup","delta":"{\"id\":\"A-17\"}"}`,
			`{"type":"TOOL_CALL_END","toolCallId":"c-lookup"}`,
			`{"type":"TOOL_CALL_RESULT","messageId":"tm1","toolCallId":"c-lookup","content":"A-17: 2 items"}`,
			`{"type":"TOOL_CALL_START","toolCallId":"c-confirm","toolCallName":"confirm_order","parentMessageId":"m1"}`,
			`{"type":"TOOL_CALL_ARGS","toolCallId":"c-confirm","delta":"{\"orderId\":\"A-17\"}"}`,
			`{"type":"TOOL_CALL_END","toolCallId":"c-confirm"}`,
			`{"type":"RUN_FINISHED","threadId":"thread-1","runId":"run-1"}`,
		} {
			io.WriteString(w, frame(e))
			w.(http.Flusher).Flush()
		}
	})
	input := `{"threadId":"thread-1","runId":"run-1","messages":[{"id":"u1","role":"user","content":"Confirm order A-17"}],` +
		`"tools":[{"name":"confirm_order","description":"Ask the user to confirm an order","parameters":{"type":"object","properties":{"orderId":{"type":"string"}}}}],` +
		`"context":[],"state":{},"forwardedProps":{}}`
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := interop.Run(ctx, interop.Request{
		Mode: interop.ModeLive, Client: interop.Client10, URL: h.url + "/agent", Input: json.RawMessage(input),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Accepted {
		t.Fatalf("the official client rejected aguard's stream: %s\nevents: %v", res.Error, res.EventTypes())
	}
	if gotInput["protocolVersion"] != "1.0" {
		t.Errorf("the agent did not receive the client's RunAgentInput: %v", gotInput)
	}
	if len(res.Runs) != 1 || res.Runs[0].Terminal != "RUN_FINISHED" {
		t.Fatalf("runs = %+v", res.Runs)
	}
	if got := res.Runs[0].PendingToolCallIDs; !slices.Equal(got, []string{"c-confirm"}) {
		t.Errorf("client derived pending %v, want [c-confirm]", got)
	}
	var finished string
	for _, ev := range res.Events {
		if strings.Contains(string(ev), `"RUN_FINISHED"`) {
			finished = string(ev)
		}
	}
	if !strings.Contains(finished, `"pendingToolCallIds":["c-confirm"]`) {
		t.Errorf("aguard did not state the pending call on RUN_FINISHED: %s", finished)
	}
}

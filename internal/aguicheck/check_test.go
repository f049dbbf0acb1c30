package aguicheck

import (
	"strings"
	"testing"
)

func events(s ...string) [][]byte {
	out := make([][]byte, len(s))
	for i, e := range s {
		out[i] = []byte(e)
	}
	return out
}

func TestCheck(t *testing.T) {
	const rs = `{"type":"RUN_STARTED","threadId":"t","runId":"r"}`
	const rf = `{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`
	tests := []struct {
		name    string
		events  [][]byte
		wantErr string
	}{
		{"empty", nil, ""},
		{"only run error", events(`{"type":"RUN_ERROR","message":"x"}`), ""},
		{"simple run", events(rs, `{"type":"TEXT_MESSAGE_START","messageId":"m"}`, `{"type":"TEXT_MESSAGE_END","messageId":"m"}`, rf), ""},
		{"unknown types ignored", events(`{"type":"VENDOR"}`, rs, rf, `{"type":"VENDOR"}`), ""},
		{"first event", events(`{"type":"TEXT_MESSAGE_START","messageId":"m"}`), "first event"},
		{"after finish", events(rs, rf, `{"type":"CUSTOM","name":"x","value":1}`), "after RUN_FINISHED"},
		{"after error", events(rs, `{"type":"RUN_ERROR","message":"x"}`, `{"type":"RUN_ERROR","message":"y"}`), "after RUN_ERROR"},
		{"late error ok", events(rs, rf, `{"type":"RUN_ERROR","message":"x"}`, rs, rf), ""},
		{"nested start", events(rs, rs), "inside an active run"},
		{"open at finish", events(rs, `{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"n"}`, rf), "open items"},
		{"args not open", events(rs, `{"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":""}`), "not open"},
		{"start while open", events(rs, `{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"n"}`, `{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"n"}`), "opened while open"},
		{"steps per owner", events(rs, `{"type":"STEP_STARTED","stepName":"s"}`, `{"type":"STEP_STARTED","stepName":"s","subagentRunId":"a"}`, `{"type":"STEP_FINISHED","stepName":"s"}`, `{"type":"STEP_FINISHED","stepName":"s","subagentRunId":"a"}`, rf), ""},
		{"chunk closed by finish", events(rs, `{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"n","delta":"{"}`, `{"type":"TOOL_CALL_CHUNK","delta":"}"}`, rf), ""},
		{"first chunk without id", events(rs, `{"type":"TEXT_MESSAGE_CHUNK","delta":"x"}`), "without messageId"},
		{"first tool chunk without name", events(rs, `{"type":"TOOL_CALL_CHUNK","toolCallId":"c"}`), "without toolCallName"},
		{"chunk then explicit args", events(rs, `{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"n"}`, `{"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":""}`), "not open"},
		{"not json", events(`{`), "not a JSON object"},
		// The 1.0 client converts THINKING_* to reasoning events before
		// chunk expansion, so they close their owner's chunk lane.
		{"thinking closes its owner's lane", events(rs,
			`{"type":"TOOL_CALL_CHUNK","toolCallId":"b","toolCallName":"n","delta":"{","subagentRunId":"s1"}`,
			`{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"n","delta":"{","subagentRunId":"s2"}`,
			`{"type":"THINKING_START","subagentRunId":"s1"}`,
			`{"type":"TOOL_CALL_CHUNK","delta":"}"}`,
			`{"type":"RUN_ERROR","message":"x"}`), ""},
		{"thinking as reasoning", events(rs, `{"type":"THINKING_START"}`, `{"type":"THINKING_TEXT_MESSAGE_START"}`,
			`{"type":"THINKING_TEXT_MESSAGE_CONTENT","delta":"x"}`, `{"type":"THINKING_TEXT_MESSAGE_END"}`, `{"type":"THINKING_END"}`, rf), ""},
		{"thinking end twice", events(rs, `{"type":"THINKING_START"}`, `{"type":"THINKING_START"}`, `{"type":"THINKING_END"}`, `{"type":"THINKING_END"}`), "not open"},
		{"thinking content without start", events(rs, `{"type":"THINKING_TEXT_MESSAGE_CONTENT","delta":"x"}`), "not open"},
		{"thinking open at finish", events(rs, `{"type":"THINKING_START"}`, rf), "open items"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(tt.events)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Check = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

package agui

import (
	"strings"
	"testing"
)

// TestMalformedEventsFatal: an event that is not a well-formed AG-UI event
// ends the stream; nothing of it reaches the consumer.
func TestMalformedEventsFatal(t *testing.T) {
	tests := []struct {
		name  string
		event string
		why   string // part of the message
	}{
		{"not JSON", `{"type":`, "not valid JSON"},
		{"trailing garbage", `{"type":"CUSTOM","name":"x","value":1}}`, "not valid JSON"},
		{"raw newline in a string", "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"a\nb\"}", "raw control character"},
		{"invalid escape", `{"type":"CUSTOM","name":"\x","value":1}`, "invalid escape"},
		{"short unicode escape", `{"type":"CUSTOM","name":"\u12","value":1}`, "escape"},
		{"not an object", `["RUN_STARTED"]`, "not a JSON object"},
		{"no type", `{"threadId":"t"}`, "no string type"},
		{"type not a string", `{"type":7}`, "no string type"},
		{"duplicate type", `{"type":"CUSTOM","name":"x","value":1,"type":"RUN_ERROR"}`, "duplicate member"},
		{"duplicate type on unknown event", `{"type":"VENDOR_X","type":"RUN_ERROR"}`, "more than one type"},
		{"id a number", `{"type":"TOOL_CALL_START","toolCallId":42,"toolCallName":"n"}`, "toolCallId: expected string, got number"},
		{"required field missing", `{"type":"TOOL_CALL_ARGS","toolCallId":"c"}`, "delta: required member missing"},
		{"optional null", `{"type":"TEXT_MESSAGE_START","messageId":"m","name":null}`, "name: null is not allowed"},
		{"subagentRunId null", `{"type":"TEXT_MESSAGE_START","messageId":"m","subagentRunId":null}`, "subagentRunId: null"},
		{"bad role", `{"type":"TEXT_MESSAGE_START","messageId":"m","role":"tool"}`, "role: value"},
		{"timestamp not an integer", `{"type":"CUSTOM","name":"x","value":1,"timestamp":1.5}`, "timestamp"},
		{"metadata not an object", `{"type":"CUSTOM","name":"x","value":1,"metadata":[]}`, "metadata: expected object"},
		{"custom without value", `{"type":"CUSTOM","name":"x"}`, "value: required"},
		{"result content a number", `{"type":"TOOL_CALL_RESULT","messageId":"m","toolCallId":"c","content":1}`, "content: expected string or array"},
		{"result part without type", `{"type":"TOOL_CALL_RESULT","messageId":"m","toolCallId":"c","content":[{"text":"x"}]}`, "content[0].type"},
		// fastjson reads the first of two members of one name, the client's
		// JSON.parse the last: a part or source whose type is given twice
		// would be checked as one thing and read as another.
		{"part type given twice", `{"type":"TOOL_CALL_RESULT","messageId":"m","toolCallId":"c","content":[{"type":"x-vendor","type":"text","text":1}]}`, "content[0].type: duplicate member"},
		{"source type given twice", `{"type":"TOOL_CALL_RESULT","messageId":"m","toolCallId":"c","content":[{"type":"image","source":{"type":"x-vendor","type":"url","value":1}}]}`, "content[0].source.type: duplicate member"},
		{"message role given twice", `{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"m","role":"x-vendor","role":"tool","content":{}}]}`, "messages[0].role: duplicate member"},
		{"text part text not a string", `{"type":"TOOL_CALL_RESULT","messageId":"m","toolCallId":"c","content":[{"type":"text","text":1}]}`, "content[0].text"},
		{"snapshot message without role", `{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"m"}]}`, "messages[0].role"},
		{"snapshot message id not a string", `{"type":"MESSAGES_SNAPSHOT","messages":[{"id":1,"role":"user","content":"x"}]}`, "messages[0].id"},
		{"snapshot tool message content", `{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"t","role":"tool","toolCallId":"c","content":{}}]}`, "messages[0].content"},
		{"outcome not an object", `{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":"success"}`, "outcome: expected object"},
		{"pending list of numbers", `{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"success","pendingToolCallIds":[1]}}`, "outcome.pendingToolCallIds[0]"},
		{"interrupt without interrupts", `{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt","interrupts":[]}}`, "interrupts"},
		{"patch path not a pointer", `{"type":"STATE_DELTA","delta":[{"op":"add","path":"a","value":1}]}`, "delta[0].path"},
		{"echo messages not an array", `{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r","messages":{}}}`, "input.messages"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			events := []string{runStarted, tt.event}
			if strings.HasPrefix(tt.event, `{"type":"RUN_STARTED"`) {
				events = events[1:]
			}
			r := feed(t, nil, Options{}, false, events...)
			wantViolation(t, r, "malformed_event")
			if !strings.Contains(r.notes[0].Message, tt.why) {
				t.Fatalf("message %q does not mention %q", r.notes[0].Message, tt.why)
			}
			if len(r.out) != len(events) {
				t.Fatalf("out = %q", r.out)
			}
		})
	}
}

// TestTolerableNulls: the nulls the 1.0 client's compat layer removes are not
// malformed, and are forwarded as sent.
func TestTolerableNulls(t *testing.T) {
	events := []string{
		`{"type":"RUN_STARTED","threadId":"t","runId":"r","rawEvent":null}`,
		`{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"n","parentMessageId":null}`,
		`{"type":"TOOL_CALL_CHUNK","toolCallId":"c2","toolCallName":"n","parentMessageId":null}`,
		`{"type":"TOOL_CALL_END","toolCallId":"c"}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"m","toolCallId":"c","content":""}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"m2","toolCallId":"c2","content":""}`,
		`{"type":"SUBAGENT_STARTED","subagentRunId":"s","name":"n"}`,
		`{"type":"SUBAGENT_FINISHED","subagentRunId":"s","result":null}`,
		`{"type":"STATE_SNAPSHOT","snapshot":null}`,
		`{"type":"CUSTOM","name":"x","value":null}`,
		`{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":null,"result":null}`,
	}
	r := feed(t, nil, Options{}, true, events...)
	if len(r.notes) != 0 || strings.Join(r.out, "\n") != strings.Join(events, "\n") {
		t.Fatalf("out = %q notes = %+v", r.out, r.notes)
	}
}

package agui

import (
	"errors"
	"testing"
)

func TestParseRunInput(t *testing.T) {
	in := mustInput(t, `{"threadId":"t","runId":"r","protocolVersion":"1.0","state":null,"forwardedProps":{"a":1},`+
		`"messages":[{"id":"a","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{}"}},`+
		`{"id":"c2","type":"function","function":{"name":"search","arguments":""}}]},`+
		`{"id":"t","role":"tool","toolCallId":"c2","content":[{"type":"text","text":"x"}]},{"id":"z","role":"future","stuff":1}],`+
		`"tools":[{"name":"confirm","description":"d","parameters":{ "type" : "object" }},{"name":"nodesc","parameters":null}],`+
		`"context":[{"description":"d","value":"v"}],"resume":[{"interruptId":"i","status":"resolved","payload":null}]}`)
	if in.ThreadID != "t" || in.RunID != "r" || in.ProtocolVersion != "1.0" || in.Legacy() {
		t.Fatalf("in = %+v", in)
	}
	if len(in.Tools) != 2 {
		t.Fatalf("tools = %+v", in.Tools)
	}
	tool, ok := in.Tool("confirm")
	if !ok || tool.Description != "d" || string(tool.Parameters) != `{"type":"object"}` {
		t.Fatalf("Tool(confirm) = %+v, %v", tool, ok)
	}
	if tool, ok := in.Tool("nodesc"); !ok || tool.Parameters != nil {
		t.Fatalf("Tool(nodesc) = %+v", tool)
	}
	if _, ok := in.Tool("search"); ok {
		t.Fatal("search is not advertised")
	}
	if own, _ := in.ownAnswer([]byte("c2"), []byte("t"), nil, nil); !own {
		t.Fatal("t is the application's answer to c2")
	}
	if own, _ := in.ownAnswer([]byte("c1"), []byte("t"), nil, nil); own {
		t.Fatal("c1 has no answer")
	}
	if known, frontend := in.hasCall([]byte("c1")); !known || !frontend {
		t.Fatal("c1 calls a frontend tool")
	}
	if known, frontend := in.hasCall([]byte("c2")); !known || frontend {
		t.Fatal("c2 calls an agent-side tool")
	}
	if known, _ := in.hasCall([]byte("c9")); known {
		t.Fatal("c9 is not in the history")
	}
	if !mustInput(t, `{"threadId":"t","runId":"r","messages":[]}`).Legacy() {
		t.Fatal("no protocolVersion is legacy")
	}
}

func TestHasToolHistoryCountsToolMessagesAndAssistantToolCalls(t *testing.T) {
	for _, tt := range []struct {
		messages string
		want     bool
	}{
		{`[]`, false},
		{`[{"id":"u","role":"user","content":"hi"},{"id":"a","role":"assistant","content":"hello"}]`, false},
		{`[{"id":"a","role":"assistant","toolCalls":[{"id":"c","type":"function","function":{"name":"agent_side","arguments":"{}"}}]}]`, true},
		{`[{"id":"t","role":"tool","toolCallId":"c","content":"done"}]`, true},
	} {
		in := mustInput(t, `{"threadId":"t","runId":"r","messages":`+tt.messages+`}`)
		if got := in.HasToolHistory(); got != tt.want {
			t.Errorf("HasToolHistory(%s) = %v, want %v", tt.messages, got, tt.want)
		}
	}
}

func TestParseRunInputErrors(t *testing.T) {
	tests := []struct{ body, path, reason string }{
		{`nope`, "", "not valid JSON"},
		{`[]`, "", "expected a JSON object, got array"},
		{`{"runId":"r","messages":[]}`, "threadId", "required member missing"},
		{`{"threadId":1,"runId":"r","messages":[]}`, "threadId", "expected string, got number"},
		{`{"threadId":"t","runId":"r"}`, "messages", "required member missing"},
		{`{"threadId":"t","runId":"r","messages":{}}`, "messages", "expected array, got object"},
		{`{"threadId":"t","runId":"r","messages":[{"id":"a","role":"user","content":"x"},{"id":"b","role":"user","content":"x"},{"id":"c","role":5}]}`, "messages[2].role", "expected string, got number"},
		{`{"threadId":"t","runId":"r","messages":[{"role":"user","content":"x"}]}`, "messages[0].id", "required member missing"},
		{`{"threadId":"t","runId":"r","messages":[{"id":"t","role":"tool","content":"x"}]}`, "messages[0].toolCallId", "required member missing"},
		{`{"threadId":"t","runId":"r","messages":[{"id":"a","role":"assistant","toolCalls":[{"id":"c","type":"function","function":{"name":1,"arguments":""}}]}]}`, "messages[0].toolCalls[0].function.name", "expected string, got number"},
		{`{"threadId":"t","runId":"r","messages":[],"tools":[{"description":"d"}]}`, "tools[0].name", "required member missing"},
		{`{"threadId":"t","runId":"r","messages":[],"tools":[{"name":"n","description":3}]}`, "tools[0].description", "expected string, got number"},
		{`{"threadId":"t","runId":"r","messages":[],"protocolVersion":1}`, "protocolVersion", "expected string, got number"},
		{`{"threadId":"t","runId":"r","messages":[],"resume":[{"interruptId":"i","status":"maybe"}]}`, "resume[0].status", `value "maybe" is not one of resolved, cancelled`},
	}
	for _, tt := range tests {
		_, err := ParseRunInput([]byte(tt.body))
		var ie *InputError
		if !errors.As(err, &ie) {
			t.Fatalf("ParseRunInput(%s) = %v, want *InputError", tt.body, err)
		}
		if ie.Path != tt.path || len(ie.Reason) < len(tt.reason) || ie.Reason[:len(tt.reason)] != tt.reason {
			t.Fatalf("ParseRunInput(%s) = {%q, %q}, want {%q, %q...}", tt.body, ie.Path, ie.Reason, tt.path, tt.reason)
		}
	}
}

package agui

import (
	"context"
	"encoding/json"
	"testing"
)

// TestAnswerToolMessages pins the rewrite of declined answers: only the named
// tool messages change, content and error replaced, everything else kept.
func TestAnswerToolMessages(t *testing.T) {
	body := `{"threadId":"t","runId":"r2","messages":[{"id":"a1","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"pay","arguments":"{}"}}]},` +
		`{"id":"t1","role":"tool","toolCallId":"c1","content":[{"type":"text","text":"paid"}]},{"id":"t2","role":"tool","toolCallId":"c2","content":"kept"}],"forwardedProps":{"z":[1,2]}}`
	tests := []struct {
		name    string
		body    string
		answers map[string]Answer
		want    string
	}{
		{"rewrites the named call only", body, map[string]Answer{"c1": {Content: "Declined: approval rejected", Error: "approval rejected"}},
			`{"threadId":"t","runId":"r2","messages":[{"id":"a1","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"pay","arguments":"{}"}}]},` +
				`{"id":"t1","role":"tool","toolCallId":"c1","content":"Declined: approval rejected","error":"approval rejected"},{"id":"t2","role":"tool","toolCallId":"c2","content":"kept"}],"forwardedProps":{"z":[1,2]}}`},
		{"no match returns the body", body, map[string]Answer{"zz": {Content: "x"}}, body},
		{"whitespace is compacted when rewriting", "{ \"threadId\": \"t\", \"runId\": \"r\", \"messages\": [ {\"id\":\"t1\", \"role\":\"tool\", \"toolCallId\":\"c1\", \"content\":\"x\", \"error\": \"old\"} ] }",
			map[string]Answer{"c1": {Content: "late", Error: "deadline \"passed\""}},
			`{"threadId":"t","runId":"r","messages":[{"id":"t1","role":"tool","toolCallId":"c1","content":"late","error":"deadline \"passed\""}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := AnswerToolMessages([]byte(tt.body), tt.answers)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tt.want)
			}
			if !json.Valid(got) {
				t.Fatal("invalid JSON")
			}
			if _, err := ParseRunInput(got); err != nil {
				t.Fatalf("rewritten body no longer a RunAgentInput: %v", err)
			}
		})
	}
}

// TestRunInputAnswersAndResume pins what the request-side checks read.
func TestRunInputAnswersAndResume(t *testing.T) {
	in := mustInput(t, `{"threadId":"t","runId":"r","messages":[{"id":"t1","role":"tool","toolCallId":"c1","content":"ok"},`+
		`{"id":"t2","role":"tool","toolCallId":"c2","content":[{"type":"text","text":"no"}],"error":"boom"}],`+
		`"resume":[{"interruptId":"i1","status":"resolved","payload":{"approved":true}},{"interruptId":"i2","status":"cancelled"}]}`)
	if len(in.ToolMessages) != 2 || in.ToolMessages[0].ToolCallID != "c1" || string(in.ToolMessages[0].Content) != `"ok"` ||
		in.ToolMessages[0].HasError || !in.ToolMessages[1].HasError || in.ToolMessages[1].Error != "boom" {
		t.Fatalf("ToolMessages = %+v", in.ToolMessages)
	}
	if len(in.Resume) != 2 || in.Resume[0] != (ResumeEntry{"i1", "resolved"}) || in.Resume[1] != (ResumeEntry{"i2", "cancelled"}) {
		t.Fatalf("Resume = %+v", in.Resume)
	}
}

// TestLifecycleReported pins the ledger's view of a run: each call started,
// completed, decided and answered, and how the run ended.
func TestLifecycleReported(t *testing.T) {
	s := NewStream(mustInput(t, inputJSON), Options{Decider: &byName{verdicts: map[string]string{}}})
	var b Batch
	var kinds []string
	var run RunEnd
	for _, e := range []string{
		`{"type":"RUN_STARTED","threadId":"t1","runId":"run-9"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"confirm"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"{}"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"c1"}`,
		`{"type":"TOOL_CALL_CHUNK","toolCallId":"s1","toolCallName":"lookup","delta":"{\"q\":1}"}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"m","toolCallId":"s1","content":[{"type":"text","text":"x"}]}`,
		`{"type":"RUN_FINISHED","threadId":"t1","runId":"run-9","outcome":{"type":"interrupt","interrupts":[{"id":"i1","reason":"confirmation","expiresAt":"2026-12-01T00:00:00Z"}]}}`,
	} {
		s.Feed(context.Background(), []byte(e), &b)
		for _, c := range b.Calls {
			k := string(c.Kind) + ":" + c.ID
			switch c.Kind {
			case CallArgumentsComplete:
				k += "=" + string(c.Arguments)
			case CallAnswered:
				k += "=" + string(c.Content)
			}
			kinds = append(kinds, k)
		}
		if b.Run.Kind != "" {
			run = b.Run
			run.Pending = append([]string(nil), b.Run.Pending...)
		}
	}
	want := `started:c1,arguments_complete:c1={},decided:c1,started:s1,arguments_complete:s1={"q":1},decided:s1,answered:s1=[{"type":"text","text":"x"}]`
	if got := join(kinds); got != want {
		t.Fatalf("calls\n%s\nwant\n%s", got, want)
	}
	if run.Kind != "finished" || run.RunID != "run-9" || run.Outcome != "interrupt" || join(run.Pending) != "c1" ||
		len(run.Interrupts) != 1 || run.Interrupts[0] != (Interrupt{"i1", "2026-12-01T00:00:00Z"}) {
		t.Fatalf("run = %+v", run)
	}
	s.Feed(context.Background(), []byte(`{"type":"RUN_ERROR","code":"late","message":"x"}`), &b)
	if b.Run.Kind != "error" || b.Run.Code != "late" || b.Run.RunID != "run-9" {
		t.Fatalf("run error = %+v", b.Run)
	}
}

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}

package agui_test

import (
	"context"
	"fmt"

	"github.com/aguard/aguard/agui"
)

// A producer calls the frontend tool "confirm" and then answers it itself.
// aguard drops the fabricated answer and tells the consumer the call is
// pending.
func ExampleStream() {
	in, err := agui.ParseRunInput([]byte(`{"threadId":"t1","runId":"r1","protocolVersion":"1.0",` +
		`"messages":[{"id":"u1","role":"user","content":"Confirm order A-17"}],` +
		`"tools":[{"name":"confirm","description":"Ask the user to confirm"}]}`))
	if err != nil {
		panic(err)
	}
	s := agui.NewStream(in, agui.Options{})
	var b agui.Batch
	for _, ev := range []string{
		`{"type":"RUN_STARTED","threadId":"t1","runId":"r1"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"confirm"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"{\"order\":\"A-17\"}"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"c1"}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"tm1","toolCallId":"c1","content":"Forwarded to client"}`,
		`{"type":"RUN_FINISHED","threadId":"t1","runId":"r1"}`,
	} {
		s.Feed(context.Background(), []byte(ev), &b)
		for _, out := range b.Out {
			fmt.Printf("data: %s\n", out.JSON)
		}
		for _, n := range b.Notes {
			fmt.Printf("# %s %q\n", n.Kind, n.ID)
		}
	}
	s.End(nil, &b)
	fmt.Println("done:", b.Done, "extra events:", len(b.Out))
	// Output:
	// data: {"type":"RUN_STARTED","threadId":"t1","runId":"r1"}
	// data: {"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"confirm"}
	// data: {"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"{\"order\":\"A-17\"}"}
	// data: {"type":"TOOL_CALL_END","toolCallId":"c1"}
	// # fabricated_result "c1"
	// data: {"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"success","pendingToolCallIds":["c1"]}}
	// # pending_added ""
	// done: true extra events: 0
}

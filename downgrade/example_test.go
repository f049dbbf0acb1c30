package downgrade_test

import (
	"encoding/json"
	"fmt"

	"github.com/aguard/aguard/agui"
	"github.com/aguard/aguard/downgrade"
)

func Example() {
	b := downgrade.New() // one per legacy consumer stream
	var out []agui.Event
	var notes []agui.Note
	for _, js := range []string{
		`{"type":"RUN_STARTED","threadId":"t1","runId":"r1","protocolVersion":"1.0"}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"m2","toolCallId":"c1","content":[{"type":"text","text":"Chart: "},{"type":"image","source":{"type":"url","value":"https://example.com/c.png"}},{"type":"text","text":"sales up 4%"}]}`,
		`{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"success","pendingToolCallIds":["c2"]}}`,
	} {
		var head struct{ Type string } // the proxy has the type from package agui
		if err := json.Unmarshal([]byte(js), &head); err != nil {
			panic(err)
		}
		out, notes = b.Event(agui.Event{Type: head.Type, JSON: []byte(js)}, out, notes)
	}
	for _, ev := range out {
		fmt.Println(string(ev.JSON))
	}
	for _, n := range notes {
		fmt.Println(n.Kind, n.Rule, n.ID)
	}
	// Output:
	// {"type":"RUN_STARTED","threadId":"t1","runId":"r1"}
	// {"type":"CUSTOM","name":"aguard.downgrade","value":{"what":"tool_result_content","toolCallId":"c1","messageId":"m2","dropped":[{"index":1,"type":"image"}]}}
	// {"type":"TOOL_CALL_RESULT","messageId":"m2","toolCallId":"c1","content":"Chart: sales up 4%"}
	// {"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"success"}}
	// downgrade tool_result_content c1
}

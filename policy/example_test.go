package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/aguard/aguard/policy"
)

// The proxy builds one Input per tool call when TOOL_CALL_END arrives, checks
// the arguments against the tool's schema, and acts on the decision.
func ExampleEngine_Decide() {
	ctx := context.Background()
	engine, err := policy.New(ctx, policy.Options{}) // the embedded default policy
	if err != nil {
		log.Fatal(err)
	}

	params := json.RawMessage(`{"type":"object","properties":{"kind":{"enum":["bar","line"]}},"required":["kind"]}`)
	args := json.RawMessage(`{"kind":"pie"}`)
	in := &policy.Input{
		Phase: "tool_call_end",
		Call:  policy.CallInput{ID: "call-1", Name: "show_chart", Arguments: args, ArgumentsText: string(args)},
		Tool:  policy.ToolInput{Advertised: true, Frontend: true, Parameters: params},
		Run:   policy.RunInfo{ThreadID: "thread-1", RunID: "run-1", ProtocolVersion: "1.0", AdvertisedTools: []string{"show_chart"}},
	}
	in.Schema = engine.ValidateArguments(in.Tool.Parameters, in.Call.Arguments)

	d := engine.Decide(ctx, in)
	fmt.Println(d.Action)
	fmt.Println(d.Reason)
	fmt.Println(d.Err == nil, len(d.DecisionID))
	// Output:
	// deny
	// arguments of frontend tool "show_chart" do not match its parameters schema: at '/kind': value must be one of 'bar', 'line'
	// true 32
}

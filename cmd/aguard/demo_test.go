package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/interop"
)

// TestDemoRuns pins that `aguard demo` exits 0 and shows, for each scenario,
// what aguard did: same bytes, a dropped fabricated answer, the rewritten
// pending list, the violation, the lost upstream, the 400.
func TestDemoRuns(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"demo"}, &out, &errOut); code != 0 {
		t.Fatalf("demo exited %d: %s", code, errOut.String())
	}
	s := out.String()
	for _, want := range []string{
		"= same bytes",
		"TOOL_CALL_RESULT c-confirm t1 \"Forwarded to client\"",
		"✗ dropped",
		`~ RUN_FINISHED run-fabricated pending=["c-confirm"]`,
		`~ RUN_FINISHED run-pending pending=["c-confirm"]`,
		"+ RUN_ERROR AGUARD_PROTOCOL_VIOLATION",
		"+ CUSTOM aguard.tool_call_denied c-del",
		"+ CUSTOM aguard.tool_call_denied c-confirm",
		"do not match its parameters schema",
		"+ RUN_ERROR AGUARD_POLICY_DENIED",
		"+ CUSTOM aguard.approval_required c-pay",
		"+ CUSTOM aguard.downgrade c-chart tool_result_content",
		`~ TOOL_CALL_RESULT c-chart t1 "Q3 revenue: up 12%"`,
		"+ RUN_ERROR AGUARD_UPSTREAM_LOST",
		"HTTP 400",
		"invalid_run_input",
		"why: ",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("demo output lacks %q\n%s", want, s)
		}
	}
	if strings.Contains(s, "\x1b[") {
		t.Error("colour codes written to a non-terminal")
	}
}

// TestDemoStreamsAcceptedByOfficialClient runs every demo scenario through
// aguard and feeds what the consumer received to the official client of the
// consumer's line (@ag-ui/client 1.0.0, or 0.0.58 for the scenario without
// protocolVersion): each must be accepted, and the fabricated answer must
// leave the call pending in the client's own view.
func TestDemoStreamsAcceptedByOfficialClient(t *testing.T) {
	scenarios := demoScenarios()
	d, err := startDemo(context.Background(), scenarios)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var reqs []interop.Request
	var names []string
	for _, sc := range scenarios {
		received, status, err := demoRun(ctx, d.base+"/agent", sc.input)
		if err != nil {
			t.Fatal(err)
		}
		if status != 200 {
			continue
		}
		var body strings.Builder
		for _, ev := range received {
			body.WriteString("data: " + ev + "\n\n")
		}
		client := interop.Client10
		if !strings.Contains(sc.input, "protocolVersion") {
			client = interop.Client0058
		}
		reqs = append(reqs, interop.Request{Mode: interop.ModeBody, Client: client,
			Input: json.RawMessage(sc.input), Body: body.String(), ChunkSize: 7})
		names = append(names, sc.name)
	}
	results, err := interop.RunAll(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range results {
		if !res.Accepted {
			t.Errorf("%s: the official client rejected aguard's stream: %s", names[i], res.Error)
		}
	}
	fabricated := results[1]
	if len(fabricated.Runs) != 1 || strings.Join(fabricated.Runs[0].PendingToolCallIDs, ",") != "c-confirm" {
		t.Errorf("fabricated scenario: client sees runs %+v, want c-confirm pending", fabricated.Runs)
	}
}

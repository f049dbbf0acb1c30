package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplay pins `aguard replay`: the consumer's stream on stdout, and a
// report of what was decided.
func TestReplay(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.json")
	body := filepath.Join(dir, "up.sse")
	report := filepath.Join(dir, "report.json")
	os.WriteFile(input, []byte(demoInput("run-1")), 0o600)
	os.WriteFile(body, []byte(strings.Join([]string{
		`data: {"type":"RUN_STARTED","threadId":"demo-thread","runId":"run-1"}`,
		`data: {"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"confirm_order"}`,
		`data: {"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"{\"orderId\":\"A-17\"}"}`,
		`data: {"type":"TOOL_CALL_END","toolCallId":"c1"}`,
		`data: {"type":"TOOL_CALL_RESULT","messageId":"t1","toolCallId":"c1","content":"done"}`,
		`data: {"type":"RUN_FINISHED","threadId":"demo-thread","runId":"run-1"}`,
	}, "\n\n")+"\n\n"), 0o600)

	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"replay", "--input", input, "--report", report, body}, &out, &errOut); code != 0 {
		t.Fatalf("replay exited %d: %s", code, errOut.String())
	}
	want := "data: {\"type\":\"RUN_STARTED\",\"threadId\":\"demo-thread\",\"runId\":\"run-1\"}\n\n" +
		"data: {\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"c1\",\"toolCallName\":\"confirm_order\"}\n\n" +
		"data: {\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"c1\",\"delta\":\"{\\\"orderId\\\":\\\"A-17\\\"}\"}\n\n" +
		"data: {\"type\":\"TOOL_CALL_END\",\"toolCallId\":\"c1\"}\n\n" +
		"data: {\"type\":\"RUN_FINISHED\",\"threadId\":\"demo-thread\",\"runId\":\"run-1\",\"outcome\":{\"type\":\"success\",\"pendingToolCallIds\":[\"c1\"]}}\n\n"
	if out.String() != want {
		t.Fatalf("stdout:\n%s\nwant:\n%s", out.String(), want)
	}
	var rep replayReport
	b, _ := os.ReadFile(report)
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("report: %v: %s", err, b)
	}
	kinds := []string{}
	for _, n := range rep.Notes {
		kinds = append(kinds, n.Kind)
	}
	if rep.EventsIn != 6 || rep.EventsOut != 5 || rep.End != "completed" ||
		strings.Join(kinds, ",") != "fabricated_result,pending_added" {
		t.Fatalf("report = %+v", rep)
	}
}

// TestReplayErrors pins the usage and input errors.
func TestReplayErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"threadId":"t"}`), 0o600)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"replay"}, "--input and one recorded body are required"},
		{[]string{"replay", "--input", bad, "x.sse"}, "bad.json: "},
		{[]string{"replay", "--input", filepath.Join(dir, "none.json"), "x.sse"}, "no such file"},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), tt.args, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q, want it to contain %q", tt.args, code, errOut.String(), tt.want)
		}
	}
}

// TestReplayAndPolicyTestReadABundleFile pins that a bundle built by `opa
// build` stands in for a policy folder offline.
func TestReplayAndPolicyTestReadABundleFile(t *testing.T) {
	dir := t.TempDir()
	bundleFile := filepath.Join(dir, "policy.tar.gz")
	os.WriteFile(bundleFile, opaBuild(t, map[string]string{
		"aguard/policy.rego":      "package aguard\n\ndecision := {\"action\": \"deny\", \"reason\": \"bundle says no\"}\n",
		"aguard/policy_test.rego": "package aguard_test\n\ntest_denies if data.aguard.decision.action == \"deny\"\n",
	}, "b-7", ""), 0o600)
	input := filepath.Join(dir, "in.json")
	body := filepath.Join(dir, "up.sse")
	os.WriteFile(input, []byte(demoInput("run-1")), 0o600)
	os.WriteFile(body, []byte(strings.Join([]string{
		`data: {"type":"RUN_STARTED","threadId":"demo-thread","runId":"run-1"}`,
		`data: {"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"confirm_order"}`,
		`data: {"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"{\"orderId\":\"A-17\"}"}`,
		`data: {"type":"TOOL_CALL_END","toolCallId":"c1"}`,
		`data: {"type":"RUN_FINISHED","threadId":"demo-thread","runId":"run-1"}`,
	}, "\n\n")+"\n\n"), 0o600)

	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"replay", "--input", input, "--policy", bundleFile, body}, &out, &errOut); code != 0 {
		t.Fatalf("replay exited %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "aguard.tool_call_denied") || !strings.Contains(out.String(), "bundle says no") {
		t.Errorf("the bundle's policy did not decide:\n%s", out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"policy", "test", bundleFile}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "PASS: 1/1") {
		t.Errorf("policy test on the bundle: exit %d\n%s%s", code, out.String(), errOut.String())
	}
}

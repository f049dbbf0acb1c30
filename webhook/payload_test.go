package webhook

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/state"
)

// TestToolCallBodyUsesTheModelsSnakeCaseNames pins the webhook profile of
// the ToolCall record: the model's protobuf field names, snake_case, and
// aguard's additions snake_cased the same way.
func TestToolCallBodyUsesTheModelsSnakeCaseNames(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	no := false
	b, err := encodeToolCall(&state.ToolCall{
		ID: "call-1", Name: "get_weather",
		ArgumentsJSON: json.RawMessage(`{"city":"Oslo"}`),
		Status:        state.StatusCancelled,
		ResultJSON:    json.RawMessage(`{"content":"declined"}`),
		ExecutedAt:    at(time.Second), ServerID: "mcp-1", IsClientTool: true,
		Description: "Weather lookup", ParametersJSONSchema: json.RawMessage(`{"type":"object"}`),
		RequiresApprovalAt: at(10 * time.Minute), ApprovedAt: at(time.Minute),
		ApprovedBy: "alice@example.com", ExecutionDuration: "60.000s", EndReason: "approval rejected",
		Cause: state.CauseApprovalRejected, ClientToolDeadlineAt: at(24 * time.Hour),
		ThreadID: "thread-1", RunID: "run-1", ArgumentsText: "[1,2]",
		ArgumentsDigest: strings.Repeat("ab", 32), Approved: &no, DecisionID: "dec-1",
		PolicyRevision: "bundle-v42", DecisionReason: "payments need a second pair of eyes",
		RequestedBy: "bob@example.com",
		CreatedAt:   t0, UpdatedAt: t0.Add(time.Minute),
	})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	want := slices.Sorted(slices.Values([]string{
		"id", "name", "arguments_json", "status", "result_json", "executed_at", "server_id",
		"is_client_tool", "description", "parameters_json_schema", "requires_approval_at",
		"approved_at", "approved_by", "execution_duration", "end_reason", "client_tool_deadline_at",
		"end_cause", "thread_id", "run_id", "arguments_text", "arguments_digest", "approved", "decision_id",
		"policy_revision", "decision_reason", "requested_by", "created_at", "updated_at",
	}))
	if got := slices.Sorted(maps.Keys(m)); !slices.Equal(got, want) {
		t.Errorf("webhook JSON keys = %v\nwant %v", got, want)
	}
	for _, frag := range []string{
		`"arguments_json":{"city":"Oslo"}`, `"status":"TOOL_EXECUTION_STATUS_CANCELLED"`,
		`"is_client_tool":true`, `"end_reason":"approval rejected"`, `"end_cause":"approval_rejected"`, `"execution_duration":"60.000s"`,
		`"approved":false`, `"requires_approval_at":"2026-03-01T12:10:00Z"`, `"policy_revision":"bundle-v42"`,
		`"requested_by":"bob@example.com"`,
	} {
		if !strings.Contains(string(b), frag) {
			t.Errorf("webhook JSON lacks %s: %s", frag, b)
		}
	}
}

// TestEveryNoticeHasAnEventType pins that a state.Notifier's every notice
// reaches receivers under its public event type.
func TestEveryNoticeHasAnEventType(t *testing.T) {
	want := map[state.Notice]string{
		state.CallStarted:  "llm.tool_call_started",
		state.CallHeld:     "llm.tool_call_approval_required",
		state.CallEnded:    "llm.tool_call_completed",
		state.CallApproved: "llm.tool_call_approved",
		state.CallRejected: "llm.tool_call_rejected",
	}
	for notice, typ := range want {
		if got, ok := EventType(notice); !ok || got != typ {
			t.Errorf("EventType(%v) = %q, %v; want %q", notice, got, ok, typ)
		}
	}
	if got, ok := EventType(0); ok {
		t.Errorf("EventType(0) = %q, want none", got)
	}
}

package state

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

// fullCall has every field set, so that encodings show every name.
func fullCall() *ToolCall {
	return &ToolCall{
		ID: "call-1", Name: "get_weather",
		ArgumentsJSON: json.RawMessage(`{"city":"Oslo"}`),
		Status:        StatusCancelled,
		ResultJSON:    json.RawMessage(`{"content":"declined"}`),
		ExecutedAt:    ptr(t0.Add(time.Second)), ServerID: "mcp-1", IsClientTool: true,
		Description: "Weather lookup", ParametersJSONSchema: json.RawMessage(`{"type":"object"}`),
		RequiresApprovalAt: ptr(t0.Add(10 * time.Minute)), ApprovedAt: ptr(t0.Add(time.Minute)),
		ApprovedBy: "alice@example.com", ExecutionDuration: "60.000s", EndReason: "approval rejected",
		Cause: CauseApprovalRejected, ClientToolDeadlineAt: ptr(t0.Add(24 * time.Hour)),
		ThreadID: "thread-1", RunID: "run-1", ArgumentsText: "[1,2]",
		ArgumentsDigest: strings.Repeat("ab", 32), Approved: ptr(false), DecisionID: "dec-1",
		CreatedAt: t0, UpdatedAt: t0.Add(time.Minute),
	}
}

func jsonKeys(t *testing.T, b []byte) []string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return slices.Sorted(maps.Keys(m))
}

func TestToolCallJSONUsesSeedCamelCaseNames(t *testing.T) {
	b, err := json.Marshal(fullCall())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"id", "name", "argumentsJson", "status", "resultJson", "executedAt", "serverId",
		"isClientTool", "description", "parametersJsonSchema", "requiresApprovalAt",
		"approvedAt", "approvedBy", "executionDuration", "endReason", "clientToolDeadlineAt",
		// aguard additions
		"endCause", "threadId", "runId", "argumentsText", "argumentsDigest", "approved", "decisionId",
		"createdAt", "updatedAt",
	}
	if got := jsonKeys(t, b); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("record JSON keys = %v\nwant %v", got, slices.Sorted(slices.Values(want)))
	}
	var back ToolCall
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	b2, _ := json.Marshal(&back)
	if string(b2) != string(b) {
		t.Errorf("round trip changed the record:\n%s\n%s", b, b2)
	}
}

func TestToolCallJSONOmitsEmptyOptionalFields(t *testing.T) {
	b, err := json.Marshal(&ToolCall{ID: "c", Status: StatusPending, CreatedAt: t0, UpdatedAt: t0})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"c","status":"TOOL_EXECUTION_STATUS_PENDING","isClientTool":false,"threadId":"","runId":"",` +
		`"createdAt":"2026-03-01T12:00:00Z","updatedAt":"2026-03-01T12:00:00Z"}`
	if string(b) != want {
		t.Errorf("minimal record JSON =\n%s\nwant\n%s", b, want)
	}
}

func TestToolCallJSONReadsStatusAliasAndNumber(t *testing.T) {
	for in, want := range map[string]Status{
		`{"id":"c","status":"TOOL_EXECUTION_STATUS_SUCCESS"}`: StatusCompleted,
		`{"id":"c","status":3}`:                               StatusCompleted,
		`{"id":"c","status":5}`:                               StatusRequiresConfirmation,
	} {
		var c ToolCall
		if err := json.Unmarshal([]byte(in), &c); err != nil || c.Status != want {
			t.Errorf("Unmarshal(%s): status %q, %v; want %q", in, c.Status, err, want)
		}
		b, _ := json.Marshal(&c)
		if strings.Contains(string(b), "SUCCESS") {
			t.Errorf("re-encoding %s wrote the SUCCESS alias: %s", in, b)
		}
	}
}

func TestEndSetsReasonOnlyWhenTerminalAndNotOnCompleted(t *testing.T) {
	tests := []struct {
		status       Status
		cause        EndCause
		reason       string
		wantCause    EndCause
		wantReason   string
		wantDuration string
	}{
		{StatusCompleted, CauseRunEnded, "leftover", "", "", "1.250s"},
		{StatusFailed, CauseAnsweredWithError, "tool error: boom", CauseAnsweredWithError, "tool error: boom", "1.250s"},
		{StatusCancelled, CauseApprovalRejected, "approval rejected", CauseApprovalRejected, "approval rejected", "1.250s"},
		{StatusTimedOut, CauseApprovalTimeout, "approval timeout", CauseApprovalTimeout, "approval timeout", "1.250s"},
		{StatusExecuting, CauseRunEnded, "not yet", "", "", ""},
	}
	for _, tt := range tests {
		c := &ToolCall{ID: "c", Status: StatusPending, CreatedAt: t0, EndReason: "stale", Cause: CauseRunLost, ExecutionDuration: "9s"}
		c.end(tt.status, tt.cause, tt.reason, t0.Add(1250*time.Millisecond))
		if c.Status != tt.status || c.Cause != tt.wantCause || c.EndReason != tt.wantReason || c.ExecutionDuration != tt.wantDuration {
			t.Errorf("end(%s, %s, %q) = status %s, cause %q, endReason %q, executionDuration %q; want %q, %q, %q",
				tt.status, tt.cause, tt.reason, c.Status, c.Cause, c.EndReason, c.ExecutionDuration, tt.wantCause, tt.wantReason, tt.wantDuration)
		}
	}
}

func TestExecutionDurationFormatMatchesSeedPattern(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0.000s"},
		{1250 * time.Millisecond, "1.250s"},
		{time.Second, "1.000s"},
		{90 * time.Second, "90.000s"},
		{300 * time.Microsecond, "0.000300s"},
		{1500 * time.Microsecond, "0.001500s"},
		{time.Nanosecond, "0.000000001s"},
		{2*time.Second + 123456789, "2.123456789s"},
		{-5 * time.Second, "0.000s"}, // a clock step never yields a negative duration
		{49 * time.Hour, "176400.000s"},
	}
	for _, tt := range tests {
		got := formatDuration(tt.d)
		if got != tt.want {
			t.Errorf("formatDuration(%v) = %q, want %q", tt.d, got, tt.want)
		}
		if !durationPattern.MatchString(got) {
			t.Errorf("formatDuration(%v) = %q does not match %s", tt.d, got, durationPattern)
		}
	}
}

func TestNormalizeMapsArgumentsResultsAndEndFields(t *testing.T) {
	now := t0.Add(time.Hour)
	tests := []struct {
		name  string
		in    ToolCall
		check func(t *testing.T, c *ToolCall)
	}{
		{"object arguments stay and get a digest",
			ToolCall{ID: "c", Status: StatusPending, ArgumentsJSON: json.RawMessage(`{"a":1}`)},
			func(t *testing.T, c *ToolCall) {
				if string(c.ArgumentsJSON) != `{"a":1}` || c.ArgumentsText != "" {
					t.Errorf("arguments = %s / %q", c.ArgumentsJSON, c.ArgumentsText)
				}
				if c.ArgumentsDigest != "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862" {
					t.Errorf("digest = %s, want sha256 of the argument text", c.ArgumentsDigest)
				}
			}},
		{"non-object arguments move to argumentsText",
			ToolCall{ID: "c", Status: StatusPending, ArgumentsJSON: json.RawMessage(`[1,2]`)},
			func(t *testing.T, c *ToolCall) {
				if c.ArgumentsJSON != nil || c.ArgumentsText != "[1,2]" || c.ArgumentsDigest == "" {
					t.Errorf("arguments = %s / %q / %q", c.ArgumentsJSON, c.ArgumentsText, c.ArgumentsDigest)
				}
			}},
		{"malformed arguments move to argumentsText",
			ToolCall{ID: "c", Status: StatusPending, ArgumentsJSON: json.RawMessage(`{"a":`)},
			func(t *testing.T, c *ToolCall) {
				if c.ArgumentsJSON != nil || c.ArgumentsText != `{"a":` {
					t.Errorf("arguments = %s / %q", c.ArgumentsJSON, c.ArgumentsText)
				}
			}},
		{"a given digest is kept",
			ToolCall{ID: "c", Status: StatusPending, ArgumentsText: "x", ArgumentsDigest: "given"},
			func(t *testing.T, c *ToolCall) {
				if c.ArgumentsDigest != "given" {
					t.Errorf("digest = %q", c.ArgumentsDigest)
				}
			}},
		{"a string result becomes {content}",
			ToolCall{ID: "c", Status: StatusCompleted, ResultJSON: json.RawMessage(`"sunny, 21°C"`)},
			func(t *testing.T, c *ToolCall) {
				if string(c.ResultJSON) != `{"content":"sunny, 21°C"}` {
					t.Errorf("result = %s", c.ResultJSON)
				}
			}},
		{"another non-object result becomes {content}",
			ToolCall{ID: "c", Status: StatusCompleted, ResultJSON: json.RawMessage(`[1]`)},
			func(t *testing.T, c *ToolCall) {
				if string(c.ResultJSON) != `{"content":[1]}` {
					t.Errorf("result = %s", c.ResultJSON)
				}
			}},
		{"a null result is no result",
			ToolCall{ID: "c", Status: StatusCompleted, ResultJSON: json.RawMessage(`null`)},
			func(t *testing.T, c *ToolCall) {
				if c.ResultJSON != nil {
					t.Errorf("result = %s", c.ResultJSON)
				}
			}},
		{"the SUCCESS alias is stored as COMPLETED, without endReason",
			ToolCall{ID: "c", Status: "TOOL_EXECUTION_STATUS_SUCCESS", EndReason: "x", ExecutionDuration: "1.000s"},
			func(t *testing.T, c *ToolCall) {
				if c.Status != StatusCompleted || c.EndReason != "" || c.ExecutionDuration != "1.000s" {
					t.Errorf("status %s, endReason %q, duration %q", c.Status, c.EndReason, c.ExecutionDuration)
				}
			}},
		{"end fields are dropped while not terminal",
			ToolCall{ID: "c", Status: "2", EndReason: "x", ExecutionDuration: "1.000s"},
			func(t *testing.T, c *ToolCall) {
				if c.Status != StatusExecuting || c.EndReason != "" || c.ExecutionDuration != "" {
					t.Errorf("status %s, endReason %q, duration %q", c.Status, c.EndReason, c.ExecutionDuration)
				}
			}},
		{"times are stamped",
			ToolCall{ID: "c", Status: StatusPending},
			func(t *testing.T, c *ToolCall) {
				if !c.CreatedAt.Equal(now) || !c.UpdatedAt.Equal(now) {
					t.Errorf("createdAt %v, updatedAt %v, want %v", c.CreatedAt, c.UpdatedAt, now)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.in.clone()
			if err := c.normalize(now); err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestNormalizeRejectsInvalidInput(t *testing.T) {
	tests := []struct {
		in   ToolCall
		want string
	}{
		{ToolCall{Status: StatusPending}, "empty id"},
		{ToolCall{ID: "c"}, `""`},
		{ToolCall{ID: "c", Status: "DONE"}, `"DONE"`},
		{ToolCall{ID: "c", Status: StatusCompleted, ResultJSON: json.RawMessage(`{`)}, "resultJson"},
		{ToolCall{ID: "c", Status: StatusPending, ParametersJSONSchema: json.RawMessage(`{`)}, "parametersJsonSchema"},
		{ToolCall{ID: "c", Status: StatusFailed, ExecutionDuration: "1.5 s"}, "executionDuration"},
	}
	for _, tt := range tests {
		c := tt.in.clone()
		err := c.normalize(t0)
		if err == nil || !errors.Is(err, errInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("normalize(%+v) = %v, want an invalid-input error mentioning %s", tt.in, err, tt.want)
		}
	}
}

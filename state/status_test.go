package state

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseStatusAcceptsNamesTheSuccessAliasAndNumbers(t *testing.T) {
	tests := []struct {
		in   string
		want Status
	}{
		{"TOOL_EXECUTION_STATUS_PENDING", StatusPending},
		{"TOOL_EXECUTION_STATUS_EXECUTING", StatusExecuting},
		{"TOOL_EXECUTION_STATUS_COMPLETED", StatusCompleted},
		{"TOOL_EXECUTION_STATUS_SUCCESS", StatusCompleted},
		{"TOOL_EXECUTION_STATUS_FAILED", StatusFailed},
		{"TOOL_EXECUTION_STATUS_REQUIRES_CONFIRMATION", StatusRequiresConfirmation},
		{"TOOL_EXECUTION_STATUS_CANCELLED", StatusCancelled},
		{"TOOL_EXECUTION_STATUS_TIMED_OUT", StatusTimedOut},
		{"1", StatusPending},
		{"2", StatusExecuting},
		{"3", StatusCompleted},
		{"4", StatusFailed},
		{"5", StatusRequiresConfirmation},
		{"6", StatusCancelled},
		{"7", StatusTimedOut},
	}
	for _, tt := range tests {
		got, err := ParseStatus(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseStatus(%q) = %q, %v; want %q, nil", tt.in, got, err, tt.want)
		}
	}
}

func TestParseStatusRejectsAnythingElseNamingTheInput(t *testing.T) {
	for _, in := range []string{
		"", "0", "8", "03", "+3", "-1", "3.0", "success", "COMPLETED",
		"TOOL_EXECUTION_STATUS_UNSPECIFIED", "tool_execution_status_completed",
		" TOOL_EXECUTION_STATUS_PENDING",
	} {
		got, err := ParseStatus(in)
		if err == nil {
			t.Errorf("ParseStatus(%q) = %q, want an error", in, got)
			continue
		}
		if want := `"` + in + `"`; !strings.Contains(err.Error(), want) {
			t.Errorf("ParseStatus(%q) error %q does not name the input", in, err)
		}
	}
}

func TestStatusTerminal(t *testing.T) {
	terminal := map[Status]bool{
		StatusPending: false, StatusExecuting: false, StatusRequiresConfirmation: false,
		StatusCompleted: true, StatusFailed: true, StatusCancelled: true, StatusTimedOut: true,
		"": false, "TOOL_EXECUTION_STATUS_SUCCESS": false,
	}
	for s, want := range terminal {
		if got := s.Terminal(); got != want {
			t.Errorf("%q.Terminal() = %v, want %v", s, got, want)
		}
	}
}

func TestStatusUnmarshalJSONTakesStringsAndIntegers(t *testing.T) {
	tests := []struct {
		in      string
		want    Status
		wantErr string
	}{
		{in: `"TOOL_EXECUTION_STATUS_EXECUTING"`, want: StatusExecuting},
		{in: `"TOOL_EXECUTION_STATUS_SUCCESS"`, want: StatusCompleted},
		{in: `3`, want: StatusCompleted},
		{in: `7`, want: StatusTimedOut},
		{in: `"5"`, want: StatusRequiresConfirmation},
		{in: `null`, want: StatusFailed}, // unchanged
		{in: `0`, wantErr: "0"},
		{in: `8`, wantErr: "8"},
		{in: `3.0`, wantErr: "3.0"},
		{in: `true`, wantErr: "true"},
		{in: `"bogus"`, wantErr: `"bogus"`},
	}
	for _, tt := range tests {
		got := StatusFailed
		err := json.Unmarshal([]byte(tt.in), &got)
		switch {
		case tt.wantErr != "" && err == nil:
			t.Errorf("Unmarshal(%s) = %q, want an error", tt.in, got)
		case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
			t.Errorf("Unmarshal(%s) error %q does not name %s", tt.in, err, tt.wantErr)
		case tt.wantErr == "" && (err != nil || got != tt.want):
			t.Errorf("Unmarshal(%s) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

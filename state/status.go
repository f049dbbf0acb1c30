package state

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Status is the execution status of a tool call, spelled as the ToolCall
// model's TOOL_EXECUTION_STATUS_* names (README, the ledger). Only the canonical names are ever written;
// ParseStatus and UnmarshalJSON also accept the legacy SUCCESS alias and the
// numeric values on input.
type Status string

// The statuses a tool call goes through (README, the ledger; lifecycle.go).
// The numbers in the comments are the model's numeric values, which
// ParseStatus accepts.
const (
	// StatusPending (1): arguments are streaming, or a frontend call has not
	// been dispatched yet.
	StatusPending Status = "TOOL_EXECUTION_STATUS_PENDING"
	// StatusExecuting (2): an agent-side call after TOOL_CALL_END, or a
	// frontend call once dispatched to the application.
	StatusExecuting Status = "TOOL_EXECUTION_STATUS_EXECUTING"
	// StatusCompleted (3): the call completed successfully. Its legacy alias
	// TOOL_EXECUTION_STATUS_SUCCESS is read as this and never written.
	StatusCompleted Status = "TOOL_EXECUTION_STATUS_COMPLETED"
	// StatusFailed (4): the call ended unsuccessfully (an answer with an
	// error, or denied by policy).
	StatusFailed Status = "TOOL_EXECUTION_STATUS_FAILED"
	// StatusRequiresConfirmation (5): the call awaits an approval decision.
	StatusRequiresConfirmation Status = "TOOL_EXECUTION_STATUS_REQUIRES_CONFIRMATION"
	// StatusCancelled (6): the call was cancelled before normal completion
	// (approval rejected, declined, or the run ended with the call open).
	StatusCancelled Status = "TOOL_EXECUTION_STATUS_CANCELLED"
	// StatusTimedOut (7): an answer came after clientToolDeadlineAt, or no
	// approval decision was made by requiresApprovalAt.
	StatusTimedOut Status = "TOOL_EXECUTION_STATUS_TIMED_OUT"
)

// statusSuccessAlias is the legacy spelling of StatusCompleted.
const statusSuccessAlias = "TOOL_EXECUTION_STATUS_SUCCESS"

// statusByNumber maps the model's numeric values to canonical statuses.
var statusByNumber = [...]Status{
	1: StatusPending,
	2: StatusExecuting,
	3: StatusCompleted,
	4: StatusFailed,
	5: StatusRequiresConfirmation,
	6: StatusCancelled,
	7: StatusTimedOut,
}

// ParseStatus returns the canonical Status for s: a canonical name, the
// legacy alias "TOOL_EXECUTION_STATUS_SUCCESS" (COMPLETED), or a decimal
// number "1" to "7" (3 is COMPLETED). Anything else is an error naming s.
func ParseStatus(s string) (Status, error) {
	switch st := Status(s); st {
	case StatusPending, StatusExecuting, StatusCompleted, StatusFailed,
		StatusRequiresConfirmation, StatusCancelled, StatusTimedOut:
		return st, nil
	case statusSuccessAlias:
		return StatusCompleted, nil
	}
	if len(s) == 1 && s[0] >= '1' && s[0] <= '7' {
		return statusByNumber[s[0]-'0'], nil
	}
	return "", fmt.Errorf("state: unknown tool call status %q", s)
}

// Terminal reports whether s ends a call's life: COMPLETED, FAILED,
// CANCELLED or TIMED_OUT.
func (s Status) Terminal() bool {
	switch s {
	case StatusCompleted, StatusFailed, StatusCancelled, StatusTimedOut:
		return true
	}
	return false
}

// UnmarshalJSON accepts what the ToolCall model allows on input: a status name
// (canonical, or the SUCCESS alias) as a JSON string, or its number as a
// JSON integer. The result is always canonical. JSON null leaves s unchanged.
func (s *Status) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		return nil
	case len(b) > 0 && b[0] == '"':
		var name string
		if err := json.Unmarshal(b, &name); err != nil {
			return fmt.Errorf("state: tool call status %s: %w", b, err)
		}
		st, err := ParseStatus(name)
		if err != nil {
			return err
		}
		*s = st
		return nil
	default:
		st, err := ParseStatus(string(b))
		if err != nil {
			return fmt.Errorf("state: tool call status %s is neither a status name nor a number from 1 to 7", b)
		}
		*s = st
		return nil
	}
}

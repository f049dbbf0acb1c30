package webhook

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/aguard/aguard/state"
)

// toolCallJSON is ToolCall in the model's webhook profile: protobuf field
// names (snake_case), aguard's additions snake_cased the same way.
type toolCallJSON struct {
	ID                   string          `json:"id"`
	Name                 string          `json:"name,omitempty"`
	ArgumentsJSON        json.RawMessage `json:"arguments_json,omitempty"`
	Status               state.Status    `json:"status"`
	ResultJSON           json.RawMessage `json:"result_json,omitempty"`
	ExecutedAt           *time.Time      `json:"executed_at,omitempty"`
	ServerID             string          `json:"server_id,omitempty"`
	IsClientTool         bool            `json:"is_client_tool"`
	Description          string          `json:"description,omitempty"`
	ParametersJSONSchema json.RawMessage `json:"parameters_json_schema,omitempty"`
	RequiresApprovalAt   *time.Time      `json:"requires_approval_at,omitempty"`
	ApprovedAt           *time.Time      `json:"approved_at,omitempty"`
	ApprovedBy           string          `json:"approved_by,omitempty"`
	ExecutionDuration    string          `json:"execution_duration,omitempty"`
	EndReason            string          `json:"end_reason,omitempty"`
	Cause                state.EndCause  `json:"end_cause,omitempty"`
	ClientToolDeadlineAt *time.Time      `json:"client_tool_deadline_at,omitempty"`
	ThreadID             string          `json:"thread_id"`
	RunID                string          `json:"run_id"`
	ArgumentsText        string          `json:"arguments_text,omitempty"`
	ArgumentsDigest      string          `json:"arguments_digest,omitempty"`
	Approved             *bool           `json:"approved,omitempty"`
	DecisionID           string          `json:"decision_id,omitempty"`
	PolicyRevision       string          `json:"policy_revision,omitempty"`
	DecisionReason       string          `json:"decision_reason,omitempty"`
	RequestedBy          string          `json:"requested_by,omitempty"`
	CreatedAt            time.Time       `json:"created_at"`
	UpdatedAt            time.Time       `json:"updated_at"`
}

// encodeToolCall encodes c in the model's webhook profile: snake_case field
// names (arguments_json, result_json, executed_at, is_client_tool, …),
// aguard's additions as end_cause, thread_id, run_id, arguments_text,
// arguments_digest, approved, decision_id, policy_revision, decision_reason,
// requested_by, created_at and updated_at.
func encodeToolCall(c *state.ToolCall) ([]byte, error) {
	w := toolCallJSON(*c)
	b, err := json.Marshal(&w)
	if err != nil {
		return nil, fmt.Errorf("webhook: encode tool call %q: %w", c.ID, err)
	}
	return b, nil
}

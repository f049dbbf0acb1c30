package state

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// ToolCall is one entry of the audit ledger: the ToolCall record of the
// AG-UI ecosystem's audit model (see the README's ledger section)
// (camelCase JSON, as the admin API serves it), plus the fields aguard needs
// to enforce its rules, marked below as aguard additions.
//
// The Store keeps its own normalized copy of what it is given (see PutCall)
// and hands out copies, so a ToolCall never aliases the Store's memory.
type ToolCall struct {
	// ID is the provider-supplied call id. It is unique within its thread
	// only: a record is identified by (ThreadID, ID), its Ref.
	ID string `json:"id"`
	// Name is the name of the tool being invoked.
	Name string `json:"name,omitempty"`
	// ArgumentsJSON is the arguments object. Arguments that are not a JSON
	// object (a string, an array, malformed text) are stored in ArgumentsText
	// instead, and ArgumentsJSON is left empty.
	ArgumentsJSON json.RawMessage `json:"argumentsJson,omitempty"`
	// Status is the call's execution status; always canonical once stored.
	Status Status `json:"status"`
	// ResultJSON is the tool's result as a JSON object. A result that is a
	// JSON string s is stored as {"content": s}, and any other non-object
	// JSON value v as {"content": v}; JSON null means no result.
	ResultJSON json.RawMessage `json:"resultJson,omitempty"`
	// ExecutedAt is when the execution was recorded.
	ExecutedAt *time.Time `json:"executedAt,omitempty"`
	// ServerID names the server that provides the tool (MCP tools).
	ServerID string `json:"serverId,omitempty"`
	// IsClientTool is true for a frontend call, answered by the application.
	IsClientTool bool `json:"isClientTool"`
	// Description is the tool's description when the call was emitted.
	Description string `json:"description,omitempty"`
	// ParametersJSONSchema is the tool's advertised JSON Schema.
	ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema,omitempty"`
	// RequiresApprovalAt is the deadline for an approval decision (not the
	// time the call began waiting).
	RequiresApprovalAt *time.Time `json:"requiresApprovalAt,omitempty"`
	// ApprovedAt is when the approval decision (either way) was recorded.
	ApprovedAt *time.Time `json:"approvedAt,omitempty"`
	// ApprovedBy identifies who decided.
	ApprovedBy string `json:"approvedBy,omitempty"`
	// ExecutionDuration is the time from CreatedAt to the end, set by End
	// once the call is terminal, e.g. "1.250s".
	ExecutionDuration string `json:"executionDuration,omitempty"`
	// EndReason says in a short phrase why the call ended. It is set only
	// once the status is terminal, and is empty on a clean COMPLETED.
	EndReason string `json:"endReason,omitempty"`
	// Cause is EndReason as a value to compare (aguard addition, JSON
	// endCause): set with it by the lifecycle's transitions.
	Cause EndCause `json:"endCause,omitempty"`
	// ClientToolDeadlineAt is the deadline for the application's answer to a
	// frontend call, stamped when the call is dispatched.
	ClientToolDeadlineAt *time.Time `json:"clientToolDeadlineAt,omitempty"`

	// ThreadID is the thread of the run that emitted the call (aguard
	// addition). With ID it identifies the record.
	ThreadID string `json:"threadId"`
	// RunID is the run that emitted the call (aguard addition).
	RunID string `json:"runId"`
	// ArgumentsText holds arguments that are not a JSON object, verbatim
	// (aguard addition).
	ArgumentsText string `json:"argumentsText,omitempty"`
	// ArgumentsDigest is the lowercase hex SHA-256 of the argument text: of
	// ArgumentsText when set, else of the ArgumentsJSON bytes as first
	// stored. An approval binds to it. The Store fills it in when empty
	// (aguard addition).
	ArgumentsDigest string `json:"argumentsDigest,omitempty"`
	// Approved is the approval decision once made: true approved, false
	// rejected (aguard addition).
	Approved *bool `json:"approved,omitempty"`
	// DecisionID is the id of the policy decision about the call (aguard
	// addition).
	DecisionID string `json:"decisionId,omitempty"`
	// PolicyRevision names the policy that made that decision: the bundle
	// revision, or the content hash of a policy folder (aguard addition).
	PolicyRevision string `json:"policyRevision,omitempty"`
	// DecisionReason is the policy's reason for that decision, such as why
	// the call needs approval (aguard addition).
	DecisionReason string `json:"decisionReason,omitempty"`
	// RequestedBy is the subject of the consumer whose run emitted the call:
	// the JWT's sub, or the trusted ingress's header; "" when aguard
	// authenticates no one (README, "Identity") (aguard addition).
	RequestedBy string `json:"requestedBy,omitempty"`
	// CreatedAt is when aguard first saw the call; ExecutionDuration counts
	// from it. The Store stamps the current time when it is zero (aguard
	// addition).
	CreatedAt time.Time `json:"createdAt"`
	// UpdatedAt is when the record was last written; the Store sets it on
	// every write (aguard addition).
	UpdatedAt time.Time `json:"updatedAt"`
}

// end records the end of the call at now, for the lifecycle's transitions:
// it sets Status, Cause and EndReason (both cleared for COMPLETED, which
// ends cleanly), ExecutionDuration, the time since CreatedAt (never
// negative), and UpdatedAt (the Store sets it again when it writes the
// record; a copy told to webhooks before then carries the end's time). status is meant to be terminal; given a non-terminal status,
// end sets it and clears the end fields, since they exist only once a call
// has ended.
func (c *ToolCall) end(status Status, cause EndCause, reason string, now time.Time) {
	c.Status = status
	c.UpdatedAt = now.UTC()
	if !status.Terminal() {
		c.EndReason, c.Cause, c.ExecutionDuration = "", "", ""
		return
	}
	c.EndReason, c.Cause = reason, cause
	if status == StatusCompleted {
		c.EndReason, c.Cause = "", ""
	}
	c.ExecutionDuration = formatDuration(now.Sub(c.CreatedAt))
}

// durationPattern is the model's pattern for executionDuration.
var durationPattern = regexp.MustCompile(`^-?(?:0|[1-9][0-9]*)(?:\.[0-9]{1,9})?s$`)

// formatDuration writes d in seconds with 3, 6 or 9 decimals, the fewest
// that represent it exactly: "1.250s", "0.000300s", "0.000000001s". Negative
// durations (clock steps) are written as "0.000s".
func formatDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	sec, frac := int64(d/time.Second), int64(d%time.Second)
	digits, div := 3, int64(1e6)
	switch {
	case frac%1e6 == 0:
	case frac%1e3 == 0:
		digits, div = 6, 1e3
	default:
		digits, div = 9, 1
	}
	b := strconv.AppendInt(make([]byte, 0, 24), sec, 10)
	b = append(b, '.')
	f := strconv.FormatInt(frac/div, 10)
	for i := len(f); i < digits; i++ {
		b = append(b, '0')
	}
	b = append(b, f...)
	return string(append(b, 's'))
}

// clone returns a deep copy of c.
func (c *ToolCall) clone() *ToolCall {
	n := *c
	n.ArgumentsJSON = bytes.Clone(c.ArgumentsJSON)
	n.ResultJSON = bytes.Clone(c.ResultJSON)
	n.ParametersJSONSchema = bytes.Clone(c.ParametersJSONSchema)
	n.ExecutedAt = cloneTime(c.ExecutedAt)
	n.RequiresApprovalAt = cloneTime(c.RequiresApprovalAt)
	n.ApprovedAt = cloneTime(c.ApprovedAt)
	n.ClientToolDeadlineAt = cloneTime(c.ClientToolDeadlineAt)
	if c.Approved != nil {
		v := *c.Approved
		n.Approved = &v
	}
	return &n
}

func cloneTime(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := t.UTC()
	return &v
}

// errInvalid marks input errors (wrapped in every error that refuses input).
var errInvalid = errors.New("invalid input")

// normalize validates c (a private copy) and brings it to the stored form:
// canonical status, arguments and result mapped as documented on ToolCall,
// digest filled in, end fields only when terminal, times in UTC, UpdatedAt
// set to now and CreatedAt to now when zero.
func (c *ToolCall) normalize(now time.Time) error {
	if c.ID == "" {
		return fmt.Errorf("state: %w: tool call with an empty id", errInvalid)
	}
	st, err := ParseStatus(string(c.Status))
	if err != nil {
		return fmt.Errorf("state: %w: tool call %q: %w", errInvalid, c.ID, err)
	}
	c.Status = st
	if len(c.ArgumentsJSON) > 0 {
		if t := bytes.TrimSpace(c.ArgumentsJSON); len(t) == 0 || t[0] != '{' || !json.Valid(t) {
			if c.ArgumentsText == "" {
				c.ArgumentsText = string(c.ArgumentsJSON)
			}
			c.ArgumentsJSON = nil
		}
	}
	if c.ArgumentsDigest == "" && (c.ArgumentsText != "" || len(c.ArgumentsJSON) > 0) {
		var sum [sha256.Size]byte
		if c.ArgumentsText != "" {
			sum = sha256.Sum256([]byte(c.ArgumentsText))
		} else {
			sum = sha256.Sum256(c.ArgumentsJSON)
		}
		c.ArgumentsDigest = hex.EncodeToString(sum[:])
	}
	if len(c.ResultJSON) > 0 {
		t := bytes.TrimSpace(c.ResultJSON)
		switch {
		case !json.Valid(t):
			return fmt.Errorf("state: %w: tool call %q: resultJson is not JSON", errInvalid, c.ID)
		case bytes.Equal(t, []byte("null")):
			c.ResultJSON = nil
		case t[0] != '{':
			c.ResultJSON = append(append([]byte(`{"content":`), t...), '}')
		}
	}
	if len(c.ParametersJSONSchema) > 0 && !json.Valid(c.ParametersJSONSchema) {
		return fmt.Errorf("state: %w: tool call %q: parametersJsonSchema is not JSON", errInvalid, c.ID)
	}
	if !st.Terminal() {
		c.EndReason, c.Cause, c.ExecutionDuration = "", "", ""
	} else if st == StatusCompleted {
		c.EndReason, c.Cause = "", ""
	}
	if c.ExecutionDuration != "" && !durationPattern.MatchString(c.ExecutionDuration) {
		return fmt.Errorf("state: %w: tool call %q: executionDuration %q does not match %s",
			errInvalid, c.ID, c.ExecutionDuration, durationPattern)
	}
	c.ExecutedAt = cloneTime(c.ExecutedAt)
	c.RequiresApprovalAt = cloneTime(c.RequiresApprovalAt)
	c.ApprovedAt = cloneTime(c.ApprovedAt)
	c.ClientToolDeadlineAt = cloneTime(c.ClientToolDeadlineAt)
	if c.CreatedAt.IsZero() {
		c.CreatedAt = now
	}
	c.CreatedAt = c.CreatedAt.UTC()
	c.UpdatedAt = now.UTC()
	return nil
}

// protects reports whether c holds the consumer to something aguard must not
// forget: an approval awaiting a decision, or a call dispatched to the
// application and not answered yet. Such a record is never evicted from
// memory (see Options.CacheSize).
func (c *ToolCall) protects() bool {
	return !c.Status.Terminal() && (c.Status == StatusRequiresConfirmation || c.ClientToolDeadlineAt != nil)
}

// deadline is the latest deadline in force on c (requiresApprovalAt or
// clientToolDeadlineAt); zero when none.
func (c *ToolCall) deadline() time.Time {
	var d time.Time
	if c.RequiresApprovalAt != nil && c.RequiresApprovalAt.After(d) {
		d = *c.RequiresApprovalAt
	}
	if c.ClientToolDeadlineAt != nil && c.ClientToolDeadlineAt.After(d) {
		d = *c.ClientToolDeadlineAt
	}
	return d
}

// size estimates the bytes c holds in memory.
func (c *ToolCall) size() int64 {
	return int64(512 + len(c.ID) + len(c.Name) + len(c.ArgumentsJSON) + len(c.ResultJSON) + len(c.Description) +
		len(c.ParametersJSONSchema) + len(c.ApprovedBy) + len(c.EndReason) + len(c.ThreadID) + len(c.RunID) +
		len(c.ArgumentsText) + len(c.ArgumentsDigest) + len(c.DecisionID) + len(c.ServerID) +
		len(c.PolicyRevision) + len(c.DecisionReason) + len(c.RequestedBy))
}

package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// A tool call's life, in one place. Every status change of a record is one
// of the named transitions below; each checks the status it starts from and
// refuses otherwise (an error wrapping ErrTransition), and each that ends
// the call records a typed EndCause beside the human-readable endReason.
// The proxy and the admin API never set a status themselves: they pick a
// transition, and the Store applies it (Store.Apply, Store.ApplyAnswers) or
// they apply it to a record they own before writing it (Transition.To).
//
//	start ──▶ PENDING ──arguments_complete──▶ PENDING (frontend) / EXECUTING (agent-side)
//	PENDING ──hold──▶ REQUIRES_CONFIRMATION ──approve──▶ EXECUTING (dispatched, clientToolDeadlineAt)
//	                                        ──reject──▶ CANCELLED (approval rejected)
//	                                        ──expire_approval──▶ TIMED_OUT (approval timeout)
//	                                        ──lose_approval──▶ CANCELLED (approval lost)
//	PENDING/EXECUTING ──dispatch──▶ EXECUTING (clientToolDeadlineAt)
//	                  ──answer──▶ COMPLETED, or FAILED (answered with error)
//	                  ──miss_client_deadline──▶ TIMED_OUT (client tool deadline passed)
//	                  ──deny──▶ FAILED (denied by policy)
//	any open status ──end_with_run──▶ CANCELLED (run ended, failed or cancelled)
//	                ──lose_run──▶ CANCELLED (run lost)

// EndCause says why a call ended, as a value a program compares; the
// record's endReason carries the same as text (with detail, such as the
// policy's reason or the RUN_ERROR code). It is stored as endCause (an
// aguard addition), empty while the call is open and on a clean COMPLETED.
type EndCause string

// The causes a call can end with.
const (
	// CauseDenied: the policy denied the call ("denied by policy: <reason>").
	CauseDenied EndCause = "denied"
	// CauseAnsweredWithError: the application answered with error set
	// (endReason: the error text).
	CauseAnsweredWithError EndCause = "answered_with_error"
	// CauseApprovalRejected: a reviewer rejected it ("approval rejected").
	CauseApprovalRejected EndCause = "approval_rejected"
	// CauseApprovalTimeout: nobody decided by requiresApprovalAt
	// ("approval timeout").
	CauseApprovalTimeout EndCause = "approval_timeout"
	// CauseApprovalLost: an answer came for a held call whose approval
	// decision aguard could not find after Redis lost data ("approval lost").
	CauseApprovalLost EndCause = "approval_lost"
	// CauseClientDeadline: the application's answer came after
	// clientToolDeadlineAt ("client tool deadline passed").
	CauseClientDeadline EndCause = "client_deadline"
	// CauseRunEnded: the run finished with the call open ("run ended with
	// the call open").
	CauseRunEnded EndCause = "run_ended"
	// CauseRunFailed: the run ended with RUN_ERROR ("run failed: <code>").
	CauseRunFailed EndCause = "run_failed"
	// CauseRunCancelled: the run was cancelled, or its consumer left ("run
	// cancelled", "run cancelled: the consumer disconnected").
	CauseRunCancelled EndCause = "run_cancelled"
	// CauseRunLost: the replica streaming the run died; another replica
	// ended the call ("run lost: <runId> …").
	CauseRunLost EndCause = "run_lost"
)

// Text is the endReason the cause writes before any detail.
func (c EndCause) Text() string {
	switch c {
	case CauseDenied:
		return "denied by policy"
	case CauseApprovalRejected:
		return "approval rejected"
	case CauseApprovalTimeout:
		return "approval timeout"
	case CauseApprovalLost:
		return "approval lost"
	case CauseClientDeadline:
		return "client tool deadline passed"
	case CauseRunEnded:
		return "run ended with the call open"
	case CauseRunFailed:
		return "run failed"
	case CauseRunCancelled:
		return "run cancelled"
	case CauseRunLost:
		return "run lost"
	}
	return string(c)
}

// Declines reports whether an answer to a call that ended with c is
// rewritten to a decline before it reaches the agent: the call's approval
// was rejected, timed out or lost, or the application answered too late.
func (c EndCause) Declines() bool {
	switch c {
	case CauseApprovalRejected, CauseApprovalTimeout, CauseApprovalLost, CauseClientDeadline:
		return true
	}
	return false
}

// TransitionName names a transition; it appears in errors and logs.
type TransitionName string

// The transitions of a call's life.
const (
	TransitionArgumentsComplete  TransitionName = "arguments_complete"
	TransitionAllow              TransitionName = "allow"
	TransitionDeny               TransitionName = "deny"
	TransitionHold               TransitionName = "hold"
	TransitionApprove            TransitionName = "approve"
	TransitionReject             TransitionName = "reject"
	TransitionExpireApproval     TransitionName = "expire_approval"
	TransitionLoseApproval       TransitionName = "lose_approval"
	TransitionDispatch           TransitionName = "dispatch"
	TransitionAnswer             TransitionName = "answer"
	TransitionMissClientDeadline TransitionName = "miss_client_deadline"
	TransitionEndWithRun         TransitionName = "end_with_run"
	TransitionLoseRun            TransitionName = "lose_run"
)

// ErrTransition is wrapped by every refusal of a transition: the call is not
// in a status the transition starts from.
var ErrTransition = errors.New("state: transition not allowed")

// TransitionError is a refused transition.
type TransitionError struct {
	Name TransitionName
	Ref  Ref
	From Status
	// Why says what the transition needed, e.g. "an undecided approval".
	Why string
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("state: %s of %s from %s: needs %s", e.Name, e.Ref, e.From, e.Why)
}

// Unwrap makes errors.Is(err, ErrTransition) hold.
func (e *TransitionError) Unwrap() error { return ErrTransition }

// Transition is one named step of a call's life. Build one with the
// functions below; apply it with Store.Apply (a compare-and-set on the
// stored record) or, to a record the caller owns, with To.
type Transition struct {
	Name  TransitionName
	apply func(c *ToolCall) error
}

// To applies t to c in place. It returns an error wrapping ErrTransition,
// and leaves c unchanged, when c is not in a status t starts from.
func (t Transition) To(c *ToolCall) error {
	n := c.clone()
	if err := t.apply(n); err != nil {
		return err
	}
	*c = *n
	return nil
}

// Next returns the record t makes of c, leaving c unchanged: for a caller
// that keeps records it handed to Store.Record, which it must not change.
// The result shares c's byte slices (arguments, result, schema), which no
// transition or Store method changes in place; it is a new record to
// record. It returns an error wrapping ErrTransition when c is not in a
// status t starts from.
func (t Transition) Next(c *ToolCall) (*ToolCall, error) {
	n := *c
	if err := t.apply(&n); err != nil {
		return nil, err
	}
	return &n, nil
}

func (t Transition) refuse(c *ToolCall, why string) error {
	return &TransitionError{Name: t.Name, Ref: RefOf(c), From: c.Status, Why: why}
}

// open reports a status a call is still alive in, held or not.
func open(st Status) bool { return !st.Terminal() }

// NewCall is the record of a call that starts streaming (start): PENDING,
// created (and updated) now.
func NewCall(ref Ref, runID, name string, frontend bool, now time.Time) *ToolCall {
	return &ToolCall{ID: ref.ID, ThreadID: ref.ThreadID, RunID: runID, Name: name, Status: StatusPending,
		IsClientTool: frontend, CreatedAt: now, UpdatedAt: now}
}

// PolicyDecision is what the record keeps of the policy's decision about
// a call: its id, the revision of the policy that made it, and the
// policy's reason.
type PolicyDecision struct {
	ID, Revision, Reason string
}

// stamp records d on c.
func (d PolicyDecision) stamp(c *ToolCall) {
	c.DecisionID, c.PolicyRevision, c.DecisionReason = d.ID, d.Revision, d.Reason
}

// ArgumentsComplete records a call's complete argument text (TOOL_CALL_END).
// An agent-side call is then EXECUTING (the agent runs its own tools); a
// frontend call stays PENDING until the run finishes.
func ArgumentsComplete(args []byte) Transition {
	t := Transition{Name: TransitionArgumentsComplete}
	t.apply = func(c *ToolCall) error {
		if c.Status != StatusPending && c.Status != StatusExecuting {
			return t.refuse(c, "a call whose arguments are streaming")
		}
		// One copy of the text: the store keeps it as argumentsJson when
		// it is a JSON object, else moves it to argumentsText, and fills
		// argumentsDigest from it (ToolCall).
		c.ArgumentsJSON = json.RawMessage(bytes.Clone(args))
		c.ArgumentsText = ""
		c.ArgumentsDigest = ""
		if !c.IsClientTool {
			c.Status = StatusExecuting
		}
		return nil
	}
	return t
}

// Deny records the policy's denial d: FAILED, "denied by policy: <reason>".
func Deny(d PolicyDecision, now time.Time) Transition {
	t := Transition{Name: TransitionDeny}
	t.apply = func(c *ToolCall) error {
		if !open(c.Status) {
			return t.refuse(c, "an open call")
		}
		d.stamp(c)
		c.end(StatusFailed, CauseDenied, CauseDenied.Text()+": "+d.Reason, now)
		return nil
	}
	return t
}

// Allow records the policy's decision d to let the call proceed; the
// status does not change.
func Allow(d PolicyDecision) Transition {
	t := Transition{Name: TransitionAllow}
	t.apply = func(c *ToolCall) error {
		if !open(c.Status) {
			return t.refuse(c, "an open call")
		}
		d.stamp(c)
		return nil
	}
	return t
}

// Hold puts a frontend call up for approval until deadline, as the
// policy's decision d says: REQUIRES_CONFIRMATION.
func Hold(deadline time.Time, d PolicyDecision) Transition {
	t := Transition{Name: TransitionHold}
	t.apply = func(c *ToolCall) error {
		if c.Status != StatusPending || !c.IsClientTool {
			return t.refuse(c, "a pending frontend call")
		}
		d.stamp(c)
		c.Status = StatusRequiresConfirmation
		at := deadline.UTC()
		c.RequiresApprovalAt = &at
		return nil
	}
	return t
}

// awaiting reports a call held for an approval nobody has decided yet.
func awaiting(c *ToolCall) bool {
	return c.Status == StatusRequiresConfirmation && c.Approved == nil
}

// approvalExpired reports an undecided approval past its deadline.
func approvalExpired(c *ToolCall, now time.Time) bool {
	return awaiting(c) && c.RequiresApprovalAt != nil && now.After(*c.RequiresApprovalAt)
}

// ErrArgumentsChanged refuses an approval given for other arguments than
// the call's: the digest the reviewer saw is not the record's
// argumentsDigest. Nothing is written.
var ErrArgumentsChanged = errors.New("state: the call's arguments are not the ones approved")

// Approve records a reviewer's approval: EXECUTING, dispatched to the
// application, which has clientTimeout to answer. An approval after
// requiresApprovalAt is refused as the ToolCall model says ("an approval
// received after the deadline is rejected"; README, the ledger): the call
// times out instead (TIMED_OUT,
// CauseApprovalTimeout), which the caller sees in the record.
//
// digest, when not "", is the argumentsDigest of the arguments the
// reviewer approved (lower-case hex SHA-256; upper case is read as lower):
// when it is not the call's, the approval is refused with an error wrapping
// ErrArgumentsChanged and the call stays held.
func Approve(by, digest string, now time.Time, clientTimeout time.Duration) Transition {
	return decide(TransitionApprove, true, by, strings.ToLower(digest), now, clientTimeout)
}

// Reject records a reviewer's rejection: CANCELLED, "approval rejected". Past
// requiresApprovalAt the call times out instead, as for Approve.
func Reject(by string, now time.Time) Transition {
	return decide(TransitionReject, false, by, "", now, 0)
}

func decide(name TransitionName, approve bool, by, digest string, now time.Time, clientTimeout time.Duration) Transition {
	t := Transition{Name: name}
	t.apply = func(c *ToolCall) error {
		if !awaiting(c) {
			return t.refuse(c, "an undecided approval")
		}
		if approvalExpired(c, now) {
			c.end(StatusTimedOut, CauseApprovalTimeout, CauseApprovalTimeout.Text(), now)
			return nil
		}
		if digest != "" && digest != c.ArgumentsDigest {
			return fmt.Errorf("state: %s of %s: approved arguments %s, the call's are %s: %w",
				t.Name, RefOf(c), digest, c.ArgumentsDigest, ErrArgumentsChanged)
		}
		at := now.UTC()
		c.Approved, c.ApprovedAt, c.ApprovedBy = &approve, &at, by
		if !approve {
			c.end(StatusCancelled, CauseApprovalRejected, CauseApprovalRejected.Text(), now)
			return nil
		}
		c.Status = StatusExecuting
		deadline := at.Add(clientTimeout)
		c.ClientToolDeadlineAt = &deadline
		return nil
	}
	return t
}

// ExpireApproval times out an approval nobody decided by its deadline:
// TIMED_OUT, "approval timeout". It is refused before the deadline.
func ExpireApproval(now time.Time) Transition {
	t := Transition{Name: TransitionExpireApproval}
	t.apply = func(c *ToolCall) error {
		if !approvalExpired(c, now) {
			return t.refuse(c, "an undecided approval past requiresApprovalAt")
		}
		c.end(StatusTimedOut, CauseApprovalTimeout, CauseApprovalTimeout.Text(), now)
		return nil
	}
	return t
}

// LoseApproval ends a held call whose approval decision aguard cannot find
// (Redis lost it): CANCELLED, "approval lost". Its answer is declined.
func LoseApproval(now time.Time) Transition {
	t := Transition{Name: TransitionLoseApproval}
	t.apply = func(c *ToolCall) error {
		if c.Status != StatusRequiresConfirmation {
			return t.refuse(c, "a call held for approval")
		}
		c.end(StatusCancelled, CauseApprovalLost, CauseApprovalLost.Text(), now)
		return nil
	}
	return t
}

// Dispatch hands a call the run leaves pending to the application, which has
// until now+clientTimeout to answer (the record's clientToolDeadlineAt).
func Dispatch(now time.Time, clientTimeout time.Duration) Transition {
	t := Transition{Name: TransitionDispatch}
	t.apply = func(c *ToolCall) error {
		if c.Status != StatusPending && c.Status != StatusExecuting {
			return t.refuse(c, "an open call that is not held for approval")
		}
		c.Status = StatusExecuting
		deadline := now.UTC().Add(clientTimeout)
		c.ClientToolDeadlineAt = &deadline
		return nil
	}
	return t
}

// Answer records a call's result: COMPLETED, or FAILED when the answer has
// an error (endReason: the error text). content is the result's JSON
// content (a string or a list of parts).
func Answer(content []byte, errText string, hasError bool, now time.Time) Transition {
	t := Transition{Name: TransitionAnswer}
	t.apply = func(c *ToolCall) error {
		if c.Status != StatusPending && c.Status != StatusExecuting {
			return t.refuse(c, "an open call that is not held for approval")
		}
		c.ResultJSON = resultJSON(content)
		at := now.UTC()
		c.ExecutedAt = &at
		if hasError {
			c.end(StatusFailed, CauseAnsweredWithError, errText, now)
		} else {
			c.end(StatusCompleted, "", "", now)
		}
		return nil
	}
	return t
}

// MissClientDeadline records an answer that came after clientToolDeadlineAt:
// TIMED_OUT, "client tool deadline passed".
func MissClientDeadline(now time.Time) Transition {
	t := Transition{Name: TransitionMissClientDeadline}
	t.apply = func(c *ToolCall) error {
		if !open(c.Status) || c.ClientToolDeadlineAt == nil || !now.After(*c.ClientToolDeadlineAt) {
			return t.refuse(c, "an open call past clientToolDeadlineAt")
		}
		c.end(StatusTimedOut, CauseClientDeadline, CauseClientDeadline.Text(), now)
		return nil
	}
	return t
}

// EndWithRun ends a call its run left open: CANCELLED, with cause
// CauseRunEnded, CauseRunFailed or CauseRunCancelled and detail (a RUN_ERROR
// code, "the consumer disconnected"), if any.
func EndWithRun(cause EndCause, detail string, now time.Time) Transition {
	t := Transition{Name: TransitionEndWithRun}
	t.apply = func(c *ToolCall) error {
		if !open(c.Status) {
			return t.refuse(c, "an open call")
		}
		reason := cause.Text()
		if detail != "" {
			reason += ": " + detail
		}
		c.end(StatusCancelled, cause, reason, now)
		return nil
	}
	return t
}

// LoseRun ends an open call of run, whose stream died with its replica:
// CANCELLED, "run lost: <runId> (<detail>)". It is refused for a call of
// another run.
func LoseRun(runID, detail string, now time.Time) Transition {
	t := Transition{Name: TransitionLoseRun}
	t.apply = func(c *ToolCall) error {
		if !open(c.Status) || c.RunID != runID {
			return t.refuse(c, fmt.Sprintf("an open call of run %q", runID))
		}
		c.end(StatusCancelled, CauseRunLost, fmt.Sprintf("%s: %s (%s)", CauseRunLost.Text(), runID, detail), now)
		return nil
	}
	return t
}

// resultJSON maps a result's content onto the record's resultJson, which is
// an object: a string becomes {"content": "…"}, a list of parts
// {"content": […]}.
func resultJSON(content []byte) json.RawMessage {
	if len(content) == 0 || !json.Valid(content) {
		return nil
	}
	b, err := json.Marshal(map[string]json.RawMessage{"content": json.RawMessage(content)})
	if err != nil {
		return nil
	}
	return b
}

// AnswerAction is what the proxy does with a consumer's tool message.
type AnswerAction int

const (
	// AnswerForward: forward it unchanged; nothing to record (a call aguard
	// does not know in this thread, or one that already ended in a way that
	// does not refuse answers).
	AnswerForward AnswerAction = iota
	// AnswerAccept: forward it unchanged and record it (Transition).
	AnswerAccept
	// AnswerAwait: refuse the run (409 awaiting_approval): the approval is
	// undecided.
	AnswerAwait
	// AnswerDecline: rewrite it to a decline naming Reason before
	// forwarding, and record the end if Transition is set.
	AnswerDecline
)

// AnswerVerdict is the lifecycle's judgement of one answer.
type AnswerVerdict struct {
	Action AnswerAction
	// Reason is the decline's reason (AnswerDecline).
	Reason string
	// Transition records the answer's effect, when Set.
	Transition Transition
	Set        bool
}

// Judge says what the answer (content, error) to the call id of the view's
// thread means at now. A call held for approval whose decision aguard
// cannot vouch for (Redis lost data, and the record was restored from a
// replica's memory or is missing while the thread lists it as held) is
// declined: never forwarded unchanged.
func (v *ThreadView) Judge(id string, content []byte, errText string, hasError bool, now time.Time) AnswerVerdict {
	vc := v.calls[id]
	if vc == nil || vc.call == nil {
		if v.Thread != nil && slices.Contains(v.Thread.Approvals, id) {
			lost := LoseApproval(now)
			return AnswerVerdict{Action: AnswerDecline, Reason: CauseApprovalLost.Text(), Transition: lost, Set: true}
		}
		return AnswerVerdict{Action: AnswerForward}
	}
	c := vc.call
	switch {
	case c.Status == StatusRequiresConfirmation && vc.unverified:
		return AnswerVerdict{Action: AnswerDecline, Reason: CauseApprovalLost.Text(), Transition: LoseApproval(now), Set: true}
	case approvalExpired(c, now):
		return AnswerVerdict{Action: AnswerDecline, Reason: CauseApprovalTimeout.Text(), Transition: ExpireApproval(now), Set: true}
	case c.Status == StatusRequiresConfirmation:
		return AnswerVerdict{Action: AnswerAwait}
	case c.Status.Terminal() && c.Cause.Declines():
		return AnswerVerdict{Action: AnswerDecline, Reason: c.Cause.Text()}
	case c.Status.Terminal():
		return AnswerVerdict{Action: AnswerForward}
	case c.ClientToolDeadlineAt != nil && now.After(*c.ClientToolDeadlineAt):
		return AnswerVerdict{Action: AnswerDecline, Reason: CauseClientDeadline.Text(), Transition: MissClientDeadline(now), Set: true}
	}
	return AnswerVerdict{Action: AnswerAccept, Transition: Answer(content, errText, hasError, now), Set: true}
}

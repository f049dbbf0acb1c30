// Package agui is aguard's model of the AG-UI 1.0 event stream: a typed view of
// RunAgentInput and of every event, and the per-run state machine that checks a
// producer's stream against the protocol's sequence rules, rewrites it where
// the tool-call rules require, and holds back or hides tool calls as a Decider
// says (README, "Hold and hide").
//
// It is pure: no I/O, no clocks, no goroutines. The proxy feeds it the JSON text
// of each upstream SSE event and writes out whatever it returns. It is not an
// SSE parser (see package sse) and not an HTTP client.
package agui

import "context"

// RUN_ERROR codes aguard emits. They are part of aguard's public contract.
const (
	CodeProtocolViolation = "AGUARD_PROTOCOL_VIOLATION"
	CodeUpstreamLost      = "AGUARD_UPSTREAM_LOST"
	CodeLimitExceeded     = "AGUARD_LIMIT_EXCEEDED"
	CodePolicyDenied      = "AGUARD_POLICY_DENIED"
	// CodeShutdown ends a stream still running when the drain timeout after
	// SIGTERM runs out. (An addition to the design's list; documented in README.)
	CodeShutdown = "AGUARD_SHUTDOWN"
)

// Event is one event the consumer must receive: its type and its compact JSON
// text, without SSE framing.
//
// JSON may alias the data passed to Stream.Feed or the Stream's own buffers; it
// is valid only until the next call on the Stream.
type Event struct {
	Type string
	JSON []byte
}

// Note records something the Stream noticed and acted on (or, in monitor mode,
// would have acted on): a protocol violation, a dropped fabricated answer, a
// rewritten pending list. The proxy logs and counts notes; they never reach the
// consumer by themselves.
type Note struct {
	// Kind is a short stable identifier: "violation", "limit_exceeded" (a
	// bound of the stream reached: it ends with AGUARD_LIMIT_EXCEEDED), "fabricated_result",
	// "pending_rewritten", "interrupt_frontend", "forged_signal" (an agent's
	// CUSTOM aguard.* dropped, Rule "reserved_custom_name", or its RUN_ERROR
	// code AGUARD_* renamed AGENT_AGUARD_*, Rule "reserved_error_code"), …
	Kind string `json:"kind"`
	// Rule names the broken rule for violations (e.g. "tool_call_not_open").
	Rule string `json:"rule,omitempty"`
	// ToolCallID or MessageID involved, when there is one.
	ID string `json:"id,omitempty"`
	// Message is a human-readable sentence.
	Message string `json:"message"`
}

// Batch is what one call on a Stream produces. The caller owns it and reuses it
// across calls; the Stream resets it at the start of each call.
type Batch struct {
	// InType is the type of the upstream event that was fed ("" for End/Abort).
	InType string
	// Out holds the events to write to the consumer, in order.
	Out []Event
	// Notes holds what was noticed while processing.
	Notes []Note
	// Done reports that the consumer's stream is over: the caller writes Out,
	// then stops reading the upstream and closes it.
	Done bool
	// Calls reports what happened to tool calls in this step, in order.
	Calls []CallEvent
	// Run reports a run that ended in this step (Run.Kind != "").
	Run RunEnd
}

// EventTextContent is the type of the commonest event of a stream,
// TEXT_MESSAGE_CONTENT, as Batch.InType and Event.Type name it.
const EventTextContent = tTextContent

// Reset empties b, keeping its capacity.
func (b *Batch) Reset() {
	b.InType = ""
	b.Out = b.Out[:0]
	b.Notes = b.Notes[:0]
	b.Done = false
	if cap(b.Calls) > keptCalls {
		b.Calls = nil // a snapshot's thousands of calls are not kept for every event after it
	} else {
		b.Calls = b.Calls[:0]
	}
	if r := &b.Run; r.Kind != "" || r.RunID != "" || r.Outcome != "" || r.Code != "" || len(r.Pending) > 0 || len(r.Interrupts) > 0 {
		// Only when set: rewriting the pointers of an empty one for every
		// event costs write barriers while the GC runs.
		b.Run = RunEnd{Pending: b.Run.Pending[:0], Interrupts: b.Run.Interrupts[:0]}
	}
}

// keptCalls is the capacity of Batch.Calls that Reset keeps.
const keptCalls = 256

// Options configure a Stream.
type Options struct {
	// Monitor makes the Stream decide and note everything but change nothing:
	// events are forwarded as they came (compacted), violations do not end the
	// stream.
	Monitor bool
	// Decider decides each tool call once its arguments are complete, and
	// how the consumer sees it as it starts; nil allows and streams every
	// call.
	Decider Decider
	// MaxHeld bounds the bytes of events the Stream holds back from the
	// consumer at any time (calls held until judged, and what waits behind
	// them; README, "Hold and hide"); 0 means DefaultMaxHeld. Past it the
	// call being held is denied.
	MaxHeld int
}

// DefaultMaxHeld is Options.MaxHeld's default: 8 MiB per stream.
const DefaultMaxHeld = 8 << 20

// Decision phases: when a Decider is asked about a call.
const (
	// PhaseToolCallStart: the call has started (its TOOL_CALL_START, its
	// first chunk, or the replayed messages that introduce it); nothing of
	// its arguments is known. The Decider says how the consumer sees the
	// call: ActionStream, ActionHold or ActionHide.
	PhaseToolCallStart = "tool_call_start"
	// PhaseToolCallEnd: the call's arguments are complete (TOOL_CALL_END,
	// or the end of its chunk stream). "A consumer MUST NOT act on the
	// arguments before TOOL_CALL_END" (https://docs.ag-ui.com, Tool Calls),
	// so nothing is decided earlier. A call that replayed messages (a
	// snapshot, the input echo) introduce is decided when they arrive, with
	// the arguments they carry.
	PhaseToolCallEnd = "tool_call_end"
	// PhaseRunFinished: the run finished with the call unanswered and the
	// call names a tool the run input did not advertise.
	PhaseRunFinished = "run_finished"
)

// Verdict actions at PhaseToolCallEnd and PhaseRunFinished.
const (
	ActionAllow           = "allow"
	ActionDeny            = "deny"
	ActionRequireApproval = "require_approval"
)

// Verdict actions at PhaseToolCallStart (README, "Hold and hide").
const (
	// ActionStream: the consumer gets the call's events as they come.
	ActionStream = "stream"
	// ActionHold: the call's events are held back until it is judged —
	// at its end, or, for a call the agent executes itself, when its result
	// arrives or the run finishes — then released unchanged if it is
	// allowed; if denied, the consumer sees only aguard.tool_call_denied.
	ActionHold = "hold"
	// ActionHide: the consumer never sees the call, its result or its
	// entries in replayed messages; it is still decided and reported. Only
	// for a call the agent executes itself: for a frontend call it means
	// ActionHold.
	ActionHide = "hide"
)

// Call is a tool call put to a Decider.
type Call struct {
	Phase string
	ID    string
	Name  string
	// Arguments is the complete argument text, as the producer sent it. It
	// is untrusted and may not be JSON. It aliases the Stream's memory and
	// is valid only during the Decide call. Nil at PhaseToolCallStart.
	Arguments []byte
	// ArgumentsTruncated reports argument text longer than aguard keeps
	// (1 MiB); Arguments is then its beginning only.
	ArgumentsTruncated bool
	ParentMessageID    string
	SubagentRunID      string
	// Reopened reports a call closed once and reopened by a new
	// TOOL_CALL_START; Arguments holds all its text.
	Reopened bool
	// Frontend reports that the call names a tool the run input advertised:
	// the application executes it.
	Frontend bool
}

// Verdict is a Decider's answer about a Call.
type Verdict struct {
	// Action is ActionAllow, ActionDeny or ActionRequireApproval; at
	// PhaseToolCallStart, ActionStream, ActionHold or ActionHide. An action
	// the phase does not know denies (holds, at PhaseToolCallStart).
	Action string
	Reason string
	// DecisionID identifies the decision in logs and in the signals the
	// consumer receives.
	DecisionID string
	// PolicyRevision names the policy that decided (a bundle's revision, or
	// a policy folder's content hash), for the ledger; "" when no policy
	// did (aguard's own decisions).
	PolicyRevision string
	// RequiresApprovalAt is the approval deadline (RFC 3339) stated to the
	// consumer with ActionRequireApproval. The Stream has no clock; the
	// Decider computes it.
	RequiresApprovalAt string
}

// Decider decides tool calls. The Stream calls it synchronously, from Feed,
// once per call and phase; the proxy adapts the policy engine to it.
//
// What the Stream does with a Verdict (README, "In the stream"): a denied
// frontend call is followed by CUSTOM aguard.tool_call_denied and a
// TOOL_CALL_RESULT stating the denial, so it is no longer pending (and the
// decline is kept in later snapshots, which would otherwise take it from the
// consumer); a denied agent-side call ends the stream with RUN_ERROR
// AGUARD_POLICY_DENIED; a frontend call that requires approval is followed by
// CUSTOM aguard.approval_required and stays pending. An agent-side call
// cannot be held for approval (the agent executes it itself), so requiring
// approval of one denies it. At PhaseRunFinished a denied call is declined
// like a denied frontend call, before RUN_FINISHED. For a call that first
// appears in replayed messages (a MESSAGES_SNAPSHOT, the RUN_STARTED input
// echo), these events follow the event that carried it.
//
// At PhaseToolCallStart the Stream asks how the consumer sees the call
// (README, "Hold and hide"). A held call whose verdict later allows it is
// released whole, in order; a held call denied is never seen by the
// consumer, who gets only aguard.tool_call_denied (and RUN_ERROR
// AGUARD_POLICY_DENIED after it, for an agent-side call at its end); a
// hidden call is decided like any other, but nothing of it reaches the
// consumer (a denial ends the run with a RUN_ERROR that does not name it).
//
// ctx is the one given to Stream.Feed: the consumer's stream's, cancelled
// when the stream is abandoned (the consumer left, aguard shuts down). A
// Decider that cannot decide — ctx cancelled or past its deadline among
// other reasons — answers ActionDeny (ActionHold at PhaseToolCallStart):
// fail closed, as OPA's Eval(ctx) is cancelled with its context.
type Decider interface {
	Decide(ctx context.Context, c *Call) Verdict
}

// CallEventKind says what happened to a tool call.
type CallEventKind string

// What happens to a tool call over a run, in order.
const (
	// CallStarted: the first TOOL_CALL_START (or chunk) of the call, or
	// the replayed messages (a MESSAGES_SNAPSHOT, the RUN_STARTED input
	// echo) that carry a call neither the input nor the stream had: the run
	// started it.
	CallStarted CallEventKind = "started"
	// CallArgumentsComplete: TOOL_CALL_END, or the end of its chunk stream,
	// or the replayed messages that started it. Arguments holds the complete
	// argument text.
	CallArgumentsComplete CallEventKind = "arguments_complete"
	// CallDecided: the Decider's verdict. Not reported for calls allowed
	// because there is no Decider.
	CallDecided CallEventKind = "decided"
	// CallAnswered: a TOOL_CALL_RESULT for the call reached the consumer,
	// or, for a call replayed messages started, a tool message for it did —
	// or would have, had aguard not kept the call from the consumer (a
	// hidden call's result is reported all the same). Content holds its
	// content (a JSON string or array of parts).
	CallAnswered CallEventKind = "answered"
)

// CallEvent reports one thing that happened to a tool call, for the ledger.
// Its byte slices alias the Stream's memory and are valid until the next
// call on the Stream.
type CallEvent struct {
	Kind     CallEventKind
	ID, Name string
	// Frontend reports a call to a tool the run input advertised.
	Frontend  bool
	Arguments []byte // CallArgumentsComplete
	// Verdict is the Decider's verdict: at CallDecided, and at CallStarted
	// the PhaseToolCallStart verdict (zero when no Decider was asked).
	Verdict Verdict
	Content []byte // CallAnswered
	// Visibility is how the consumer sees the call, as the
	// PhaseToolCallStart verdict was applied: ActionStream, ActionHold or
	// ActionHide; "" when no Decider was asked (the call streams). It is set
	// on every event of the call. A hidden call's events are reported all
	// the same: the ledger records what the consumer never sees.
	Visibility string
}

// RunEnd reports how a run ended.
type RunEnd struct {
	// Kind is "" (no run ended in this step), "finished" (RUN_FINISHED) or
	// "error" (RUN_ERROR, the producer's or aguard's own).
	Kind string
	// RunID is the run's id as RUN_STARTED stated it.
	RunID string
	// Outcome is the RUN_FINISHED outcome type as the consumer receives it:
	// "success" (also when absent), "interrupt", "cancelled", or another
	// type the producer sent.
	Outcome string
	// Pending are the calls the run started (streamed, or first seen in
	// replayed messages) and left unanswered, in start order: what
	// RUN_FINISHED tells a 1.0 consumer is pending.
	Pending []string
	// Interrupts are the interrupt outcome's interrupts.
	Interrupts []Interrupt
	// Code is the RUN_ERROR code as the consumer receives it ("" when it
	// had none): an agent's AGUARD_* code is renamed AGENT_AGUARD_*.
	Code string
}

// Interrupt is one interrupt of an interrupt outcome.
type Interrupt struct {
	ID        string
	ExpiresAt string // as the producer wrote it; "" when absent
}

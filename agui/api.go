// Package agui is aguard's model of the AG-UI 1.0 event stream: a typed view of
// RunAgentInput and of every event, and the per-run state machine that checks a
// producer's stream against the protocol's sequence rules and rewrites it where
// the tool-call rules require.
//
// It is pure: no I/O, no clocks, no goroutines. The proxy feeds it the JSON text
// of each upstream SSE event and writes out whatever it returns. It is not an
// SSE parser (see package sse) and not an HTTP client.
package agui

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
	// Kind is a short stable identifier: "violation", "fabricated_result",
	// "pending_rewritten", "interrupt_frontend", …
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
}

// Reset empties b, keeping its capacity.
func (b *Batch) Reset() {
	b.InType = ""
	b.Out = b.Out[:0]
	b.Notes = b.Notes[:0]
	b.Done = false
}

// Options configure a Stream.
type Options struct {
	// Monitor makes the Stream decide and note everything but change nothing:
	// events are forwarded as they came (compacted), violations do not end the
	// stream.
	Monitor bool
}

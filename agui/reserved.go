package agui

import (
	"bytes"

	"github.com/aguard/aguard/internal/jsonedit"
)

// This file keeps aguard's names its own: only aguard speaks as aguard
// (README, "In the stream"). The consumer tells aguard's signals by their
// names — CUSTOM events named aguard.*, RUN_ERROR codes AGUARD_* — so an
// agent must not be able to send them: a consumer would take an agent's
// "aguard.tool_call_denied" for a policy decision, or its
// "AGUARD_POLICY_DENIED" for aguard having stopped the run.

const (
	// reservedSignalPrefix begins the name of every CUSTOM event aguard
	// emits.
	reservedSignalPrefix = "aguard."
	// reservedCodePrefix begins every RUN_ERROR code aguard emits.
	reservedCodePrefix = "AGUARD_"
	// agentCodePrefix is put before an agent's RUN_ERROR code that begins
	// with reservedCodePrefix.
	agentCodePrefix = "AGENT_"
)

// forgedSignal notes a CUSTOM event from the agent whose name aguard
// reserves, and reports whether it is dropped (always, but in monitor mode).
func (s *Stream) forgedSignal(e *ev, b *Batch) bool {
	name, _ := e.str("name")
	if !bytes.HasPrefix(name, []byte(reservedSignalPrefix)) {
		return false
	}
	b.Notes = append(b.Notes, Note{Kind: "forged_signal", Rule: "reserved_custom_name",
		Message: "CUSTOM event " + jq(name) + " from the agent dropped: names beginning with \"aguard.\" are aguard's own signals"})
	if s.opts.Monitor {
		return false
	}
	e.drop = true
	return true
}

// agentErrorCode returns the code of the agent's RUN_ERROR as the consumer
// receives it: a code beginning with AGUARD_ becomes AGENT_ followed by the
// original code (e.out is rewritten), and is noted. "" when there is none.
func (s *Stream) agentErrorCode(e *ev, b *Batch) string {
	code, _ := e.str("code")
	if !bytes.HasPrefix(code, []byte(reservedCodePrefix)) {
		return string(code)
	}
	renamed := agentCodePrefix + string(code)
	b.Notes = append(b.Notes, Note{Kind: "forged_signal", Rule: "reserved_error_code",
		Message: "RUN_ERROR code " + jq(code) + " from the agent renamed " + jq([]byte(renamed)) + ": codes beginning with AGUARD_ are aguard's own"})
	if s.opts.Monitor {
		return string(code)
	}
	s.tbuf = jsonedit.AppendString(s.tbuf[:0], renamed)
	r, ok := jsonedit.Set(s.rbuf[:0], e.out, "code", s.tbuf)
	if !ok {
		return renamed // not an object: cannot happen to an event scan accepted
	}
	s.rbuf, e.out = r, r
	return renamed
}

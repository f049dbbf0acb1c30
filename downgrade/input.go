package downgrade

import (
	"encoding/json"
	"fmt"

	"github.com/aguard/aguard/agui"
	"github.com/aguard/aguard/internal/jsonedit"
)

// Input rewrites a RunAgentInput for a 0.x upstream (an agent server on the 0.x
// line): tool-message content arrays in messages are flattened the same way
// (text parts concatenated); forwardedProps and every other byte are
// untouched. Returns the body unchanged (same slice) when nothing changed, and
// what was lost.
//
// Flattening a tool message that held non-text parts is lossy and reported as
// a note (Kind "downgrade", Rule "tool_message_content", ID the tool call id).
// A malformed content list is left as it is. Input changes nothing else: user
// content parts, protocolVersion and every other member are the upstream's to
// accept or refuse. The error reports a body that is not a JSON object.
func Input(body []byte) (out []byte, lost []agui.Note, err error) {
	if !json.Valid(body) {
		var v any
		err := json.Unmarshal(body, &v) // only to say what is wrong
		return body, nil, fmt.Errorf("downgrade: run input (%d bytes) is not valid JSON: %w", len(body), err)
	}
	if i := jsonedit.SkipSpace(body, 0); body[i] != '{' {
		return body, nil, fmt.Errorf("downgrade: run input is not a JSON object: starts with %q", body[i])
	}
	ms, me, ok := jsonedit.Member(body, "messages")
	if !ok || body[ms] != '[' {
		return body, nil, nil
	}
	arr := body[ms:me]
	na, losses := messages(arr, false, nil)
	for _, l := range losses {
		lost = append(lost, l.note())
	}
	if same(na, arr) {
		return body, lost, nil
	}
	return apply(body, []jsonedit.Edit{{From: ms, To: me, With: na}}), lost, nil
}

package agui

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aguard/aguard/internal/jsonedit"
)

// Answer replaces the content of a consumer's tool message, for a call whose
// answer aguard must not forward as it is (its approval was rejected or timed
// out, or it came after the call's deadline).
type Answer struct {
	// Content becomes the tool message's content (a JSON string).
	Content string
	// Error becomes the tool message's error.
	Error string
}

// AnswerToolMessages returns body, a RunAgentInput that ParseRunInput
// accepted, with the tool messages whose toolCallId is in answers rewritten:
// content and error replaced, every other member kept. The rest of the body
// is kept byte for byte when it is compact, and compacted otherwise; an
// answers map that matches nothing returns body itself.
func AnswerToolMessages(body []byte, answers map[string]Answer) ([]byte, error) {
	if len(answers) == 0 {
		return body, nil
	}
	var sc scanner
	compact, err := sc.scan(body)
	if err != nil {
		return nil, fmt.Errorf("agui: rewriting tool messages: %w", err)
	}
	if !compact {
		var buf bytes.Buffer
		if err := json.Compact(&buf, body); err != nil {
			return nil, fmt.Errorf("agui: rewriting tool messages: %w", err)
		}
		body = buf.Bytes()
	}
	ms, me, ok := jsonedit.Member(body, "messages")
	if !ok || body[ms] != '[' {
		return body, nil
	}
	arr := body[ms:me]
	var s jsonedit.Splicer
	for it := jsonedit.Elements(arr); ; {
		el, more := it.Next()
		if !more {
			break
		}
		msg := arr[el.ValueStart:el.ValueEnd]
		a, ok := answerFor(msg, answers)
		if !ok {
			s.Keep(el)
			continue
		}
		m, ok1 := jsonedit.Set(nil, msg, "content", jsonedit.AppendString(nil, a.Content))
		m, ok2 := jsonedit.Set(nil, m, "error", jsonedit.AppendString(nil, a.Error))
		if !ok1 || !ok2 {
			return nil, errors.New("agui: rewriting tool messages: a tool message is not an object")
		}
		s.Replace(el, m)
	}
	if len(s.Edits) == 0 {
		return body, nil
	}
	out := append([]byte(nil), body[:ms]...)
	out = jsonedit.Apply(out, arr, s.Edits)
	return append(out, body[me:]...), nil
}

// answerFor returns the answer for msg when it is a tool message whose
// toolCallId is in answers.
func answerFor(msg []byte, answers map[string]Answer) (Answer, bool) {
	if len(msg) == 0 || msg[0] != '{' {
		return Answer{}, false
	}
	rs, re, ok := jsonedit.Member(msg, "role")
	if !ok || string(msg[rs:re]) != `"tool"` {
		return Answer{}, false
	}
	is, ie, ok := jsonedit.Member(msg, "toolCallId")
	if !ok {
		return Answer{}, false
	}
	var id string
	if json.Unmarshal(msg[is:ie], &id) != nil {
		return Answer{}, false
	}
	a, ok := answers[id]
	return a, ok
}

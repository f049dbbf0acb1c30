package agui

import (
	"bytes"
	"encoding/json"
	"fmt"
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
	ms, me, ok := objectMember(body, "messages")
	if !ok || body[ms] != '[' {
		return body, nil
	}
	arr := body[ms:me]
	out := append([]byte(nil), body[:ms]...)
	out = append(out, '[')
	changed := false
	for i, n := 1, 0; i < len(arr) && arr[i] != ']'; n++ {
		e := skipValue(arr, i)
		msg := arr[i:e]
		if n > 0 {
			out = append(out, ',')
		}
		if a, ok := answerFor(msg, answers); ok {
			var m []byte
			m = setMember(m, msg, "content", appendJSONString(nil, a.Content))
			out = setMember(out, m, "error", appendJSONString(nil, a.Error))
			changed = true
		} else {
			out = append(out, msg...)
		}
		i = e
		if i < len(arr) && arr[i] == ',' {
			i++
		}
	}
	if !changed {
		return body, nil
	}
	out = append(out, ']')
	return append(out, body[me:]...), nil
}

// answerFor returns the answer for msg when it is a tool message whose
// toolCallId is in answers.
func answerFor(msg []byte, answers map[string]Answer) (Answer, bool) {
	if len(msg) == 0 || msg[0] != '{' {
		return Answer{}, false
	}
	rs, re, ok := objectMember(msg, "role")
	if !ok || string(msg[rs:re]) != `"tool"` {
		return Answer{}, false
	}
	is, ie, ok := objectMember(msg, "toolCallId")
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

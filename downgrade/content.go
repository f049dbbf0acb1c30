package downgrade

import "github.com/aguard/aguard/internal/jsonedit"

// This file holds the content rules: flattening a list of content parts to a
// string, and dropping the user-message parts 0.x cannot hold.

// Values of "what" in an aguard.downgrade announcement and of Note.Rule.
const (
	whatToolResult  = "tool_result_content"  // TOOL_CALL_RESULT content flattened, parts dropped
	whatToolMessage = "tool_message_content" // a tool message's content flattened, parts dropped
	whatFileSource  = "file_source"          // user-message parts with a file source dropped
	whatUserContent = "user_message_content" // other user-message parts 0.x cannot hold dropped
	whatCancelled   = "cancelled_outcome"    // RUN_FINISHED outcome {type:"cancelled"} removed
	whatUnknownOut  = "unknown_outcome"      // an outcome of a type 0.x does not know removed
	whatOutcomeKey  = "outcome_member"       // members 0.x's strict outcome objects reject removed
	whatEvent       = "event"                // an event of a type 0.x does not know dropped
)

// dropped is one thing a downgrade removed: its position in its list and its
// type, as a raw JSON string token (quotes included, escapes as received).
type dropped struct {
	index int
	typ   []byte
}

// loss is one lossy step: what was lost, from which call/message, and which
// parts. The ids are raw JSON string tokens, nil when unknown.
type loss struct {
	what       string
	toolCallID []byte
	messageID  []byte
	dropped    []dropped
}

// flatten renders the content-part array arr as one JSON string token: the
// "text" of its text parts concatenated in order, with no separator and no
// placeholder for the other parts, which are dropped and reported. Seed 000,
// "Result content": "A consumer that can only hold a string — a renderer, a
// store, a legacy bridge — renders a list of parts as its text parts
// concatenated in order and ignores the rest", and "It MUST NOT put a
// placeholder in the dropped part's place: a downgrade reshapes, it does not
// invent." With no text part at all the result is "" ("a result whose every
// part was dropped is answered with the empty string").
//
// ok is false when arr is not a well-formed list of parts — an element that is
// not an object or has no string "type", or a text part whose "text" is not a
// string. The caller then leaves the content as it is: a downgrade does not
// repair malformed input, so the consumer's own validation reports it.
//
// The text parts' string contents are copied as they are encoded in the
// source, so the result is a valid JSON string whenever the source is valid
// JSON, and every character of tool output stays escaped exactly as the
// producer escaped it. (Concatenating the encoded forms also keeps a UTF-16
// surrogate pair split across two parts together, as JavaScript's join does.)
func flatten(arr []byte) (str []byte, drops []dropped, ok bool) {
	it := jsonedit.Elements(arr)
	str = append(make([]byte, 0, len(arr)), '"')
	for i := 0; ; i++ {
		el, more := it.Next()
		if !more {
			break
		}
		part := arr[el.ValueStart:el.ValueEnd]
		if part[0] != '{' {
			return nil, nil, false
		}
		typ := jsonedit.String(part, "type")
		if typ == nil {
			return nil, nil, false
		}
		if !jsonedit.TokenIs(typ, "text") {
			drops = append(drops, dropped{index: i, typ: typ})
			continue
		}
		text := jsonedit.String(part, "text")
		if text == nil {
			return nil, nil, false
		}
		str = append(str, text[1:len(text)-1]...)
	}
	if it.Malformed() {
		return nil, nil, false
	}
	return append(str, '"'), drops, true
}

// userParts drops from the user-message content array arr the parts
// @ag-ui/client 0.0.58 cannot parse. 0.0.58 accepts text parts, image, audio,
// video and document parts whose source is "data" or "url", and the legacy
// "binary" part (pinned by TestInterop0058Accepts). It rejects the whole
// message — and so the whole event — for a part with a "file" source (new in
// 1.0), a source of another type, or a part of another type. Those parts are
// dropped; everything else, including malformed parts, is kept as it is.
//
// fileOnly reports that every dropped part had a file source. out is arr
// itself when nothing was dropped.
func userParts(arr []byte) (out []byte, drops []dropped, fileOnly bool) {
	it := jsonedit.Elements(arr)
	var s jsonedit.Splicer
	fileOnly = true
	for i := 0; ; i++ {
		el, more := it.Next()
		if !more {
			break
		}
		keep, file, typ := userPartFits(arr[el.ValueStart:el.ValueEnd])
		if keep {
			s.Keep(el)
			continue
		}
		s.Drop(el)
		drops = append(drops, dropped{index: i, typ: typ})
		fileOnly = fileOnly && file
	}
	if it.Malformed() || len(drops) == 0 {
		return arr, nil, false
	}
	return apply(arr, s.Edits), drops, fileOnly
}

// userPartFits reports whether 0.0.58 can hold the user content part; if not,
// whether it was dropped for a file source, and its type token.
func userPartFits(part []byte) (keep, file bool, typ []byte) {
	if part[0] != '{' {
		return true, false, nil // malformed: leave it for the consumer to reject
	}
	typ = jsonedit.String(part, "type")
	switch {
	case typ == nil:
		return true, false, nil // malformed
	case jsonedit.TokenIs(typ, "text"), jsonedit.TokenIs(typ, "binary"):
		return true, false, typ
	case jsonedit.TokenIs(typ, "image"), jsonedit.TokenIs(typ, "audio"), jsonedit.TokenIs(typ, "video"), jsonedit.TokenIs(typ, "document"):
		s, e, ok := jsonedit.Member(part, "source")
		if !ok || part[s] != '{' {
			return true, false, typ // malformed
		}
		st := jsonedit.String(part[s:e], "type")
		switch {
		case st == nil, jsonedit.TokenIs(st, "data"), jsonedit.TokenIs(st, "url"):
			return true, false, typ
		case jsonedit.TokenIs(st, "file"):
			return false, true, typ
		default:
			return false, false, typ
		}
	default:
		return false, false, typ
	}
}

// messages downgrades the message array arr: every tool message's content
// array is flattened, and, when users is set, every user message loses the
// content parts 0.x cannot hold. It returns arr itself when nothing changed,
// and appends each lossy step to losses.
func messages(arr []byte, users bool, losses []loss) ([]byte, []loss) {
	it := jsonedit.Elements(arr)
	var s jsonedit.Splicer
	for {
		el, more := it.Next()
		if !more {
			break
		}
		msg := arr[el.ValueStart:el.ValueEnd]
		var nm []byte
		var changed bool
		nm, changed, losses = message(msg, users, losses)
		if changed {
			s.Replace(el, nm)
		} else {
			s.Keep(el)
		}
	}
	if it.Malformed() {
		return arr, losses
	}
	return apply(arr, s.Edits), losses
}

// message downgrades one message (see messages) and reports whether it changed.
func message(msg []byte, users bool, losses []loss) ([]byte, bool, []loss) {
	if msg[0] != '{' {
		return msg, false, losses
	}
	role := jsonedit.String(msg, "role")
	if role == nil {
		return msg, false, losses
	}
	isTool := jsonedit.TokenIs(role, "tool")
	if !isTool && !(users && jsonedit.TokenIs(role, "user")) {
		return msg, false, losses
	}
	cs, ce, ok := jsonedit.Member(msg, "content")
	if !ok || msg[cs] != '[' {
		return msg, false, losses
	}
	content := msg[cs:ce]
	if isTool {
		str, drops, ok := flatten(content)
		if !ok {
			return msg, false, losses
		}
		if len(drops) > 0 {
			losses = append(losses, loss{what: whatToolMessage,
				toolCallID: jsonedit.String(msg, "toolCallId"), messageID: jsonedit.String(msg, "id"), dropped: drops})
		}
		return apply(msg, []jsonedit.Edit{{From: cs, To: ce, With: str}}), true, losses
	}
	parts, drops, fileOnly := userParts(content)
	if len(drops) == 0 {
		return msg, false, losses
	}
	what := whatUserContent
	if fileOnly {
		what = whatFileSource
	}
	losses = append(losses, loss{what: what, messageID: jsonedit.String(msg, "id"), dropped: drops})
	return apply(msg, []jsonedit.Edit{{From: cs, To: ce, With: parts}}), true, losses
}

package agui

import "bytes"

// This file is Feed's fast path for the events that make up most of a
// stream: a TEXT_MESSAGE_CONTENT continuing an open text message, or a
// REASONING_MESSAGE_CONTENT continuing an open reasoning message (what a
// reasoning model streams before it answers), which aguard forwards byte
// for byte. In a proxy serving many streams each event
// meets cold caches, and the general path (validate, parse into a tree, check
// the field table, dispatch) touched enough memory to cost more than the
// socket reads and writes around it. The fast path reads the event in one
// pass over its bytes and checks the one state it depends on.
//
// It is an optimisation only: it takes an event only when the general path
// would forward it unchanged with nothing to note, and declines anything
// else (whitespace, escapes in a key or the message id, another member, a
// duplicate, a subagentRunId, an open chunk lane, a message not open, a run
// not active), which then takes the general path. PassThrough asks the same
// of an event before Feed, for a proxy that then forwards it itself.
// FuzzStream checks that all three agree on every input.

// contentID reports whether data is exactly a compact JSON object whose
// members are "type" (TEXT_MESSAGE_CONTENT or REASONING_MESSAGE_CONTENT),
// "messageId" (a string without escapes) and "delta" (any valid string),
// each once, in any order; and returns the type and the message id, the id
// aliasing data.
func contentID(data []byte) (typ string, id []byte, ok bool) {
	n := len(data)
	if n < 2 || data[0] != '{' || data[n-1] != '}' {
		return "", nil, false
	}
	if typ, id, ok := contentCanonical(data); ok {
		return typ, id, true
	}
	return contentMembers(data)
}

// contentMembers is contentID's general reading, for members in any
// order: it scans each key and value.
func contentMembers(data []byte) (typ string, id []byte, ok bool) {
	n := len(data)
	var seen uint8
	i := 1
	for {
		if i >= n || data[i] != '"' {
			return "", nil, false
		}
		k, err := scanString(data, i)
		if err != nil || k >= n || data[k] != ':' {
			return "", nil, false
		}
		key := data[i+1 : k-1]
		i = k + 1
		if i >= n || data[i] != '"' {
			return "", nil, false
		}
		j, err := scanString(data, i)
		if err != nil {
			return "", nil, false
		}
		var bit uint8
		switch string(key) {
		case "type":
			switch string(data[i:j]) {
			case `"` + tTextContent + `"`:
				typ = tTextContent
			case `"` + tReasoningMsgCont + `"`:
				typ = tReasoningMsgCont
			default:
				return "", nil, false
			}
			bit = 1
		case "messageId":
			id = data[i+1 : j-1]
			for _, c := range id {
				if c == '\\' {
					return "", nil, false
				}
			}
			bit = 2
		case "delta":
			bit = 4
		default:
			return "", nil, false
		}
		if seen&bit != 0 {
			return "", nil, false
		}
		seen |= bit
		i = j
		if i >= n {
			return "", nil, false
		}
		if data[i] == ',' {
			i++
			continue
		}
		if data[i] == '}' && i == n-1 && seen == 7 {
			return typ, id, true
		}
		return "", nil, false
	}
}

// contentCanonical is contentID for the members in the order the AG-UI
// SDKs write them — type, messageId, delta — which most streams use: two
// comparisons with the fixed parts and a scan of each string, rather than a
// scan of every key and value (BenchmarkFeedTextContent: 65 → 36 ns an
// event). It declines any other order, which contentMembers reads. data is
// known to begin with '{' and end with '}'.
func contentCanonical(data []byte) (typ string, id []byte, ok bool) {
	var head int
	switch {
	case bytes.HasPrefix(data, []byte(canonicalText)):
		typ, head = tTextContent, len(canonicalText)
	case bytes.HasPrefix(data, []byte(canonicalReasoning)):
		typ, head = tReasoningMsgCont, len(canonicalReasoning)
	default:
		return "", nil, false
	}
	j, err := scanString(data, head-1)
	if err != nil || !bytes.HasPrefix(data[j:], []byte(canonicalMid)) {
		return "", nil, false
	}
	id = data[head : j-1]
	if bytes.IndexByte(id, '\\') >= 0 {
		return "", nil, false
	}
	// The delta must end just before the last byte, the closing brace.
	k, err := scanString(data, j+len(canonicalMid)-1)
	if err != nil || k != len(data)-1 {
		return "", nil, false
	}
	return typ, id, true
}

// The fixed parts of a content event in the SDKs' member order: what comes
// before the message id, and between it and the delta.
const (
	canonicalText      = `{"type":"TEXT_MESSAGE_CONTENT","messageId":"`
	canonicalReasoning = `{"type":"REASONING_MESSAGE_CONTENT","messageId":"`
	canonicalMid       = `,"delta":"`
)

// PassThrough reports whether data, the stream's next event, is one that
// Feed would forward byte for byte with nothing to note or record: a plain
// TEXT_MESSAGE_CONTENT or REASONING_MESSAGE_CONTENT continuing the message
// open in the active run (see passesContent), and its type. When ok is
// true the event is taken, as Feed would have taken it: the caller forwards
// data unchanged and does not feed it. This spares a proxy the batch it
// would otherwise read back for the commonest events of a stream; any
// other event reports false, and goes to Feed.
func (s *Stream) PassThrough(data []byte) (typ string, ok bool) {
	if s.done || s.overflow {
		return "", false
	}
	typ = s.passesContent(data)
	return typ, typ != ""
}

// feedContent forwards data unchanged when it passes as a plain content
// event (passesContent), and reports whether it did.
func (s *Stream) feedContent(data []byte, b *Batch) bool {
	typ := s.passesContent(data)
	if typ == "" {
		return false
	}
	b.InType = typ
	s.emit(b, typ, data)
	return true
}

// passesContent returns the type of data when it is a plain
// TEXT_MESSAGE_CONTENT for a text message open in the active run, or a
// plain REASONING_MESSAGE_CONTENT for a reasoning message open there, with
// no chunk lane open; "" otherwise. The general path would find nothing to
// check or change in it: runRules passes (a run is active and not
// finished), the event carries no subagentRunId so no owner can disagree,
// closeLaneOf has no lane to close, and textCont (reasoningCont) finds the
// message open; and with no barrier in the hold queue the event, which
// belongs to no tool call, goes out at once (hold.go). It remembers the
// message as the run's current one of its kind, which the next event most
// likely continues.
func (s *Stream) passesContent(data []byte) string {
	if s.slow || !s.first || s.runErr || s.runDone || !s.runStarted || len(s.lanes) > 0 || s.hold.barrier {
		return ""
	}
	typ, id, ok := contentID(data)
	if !ok {
		return ""
	}
	r := &s.run
	var e *entity
	if typ == tTextContent {
		if e = r.text; e == nil || e.id != string(id) {
			if e = r.msgs[string(id)]; e == nil {
				return ""
			}
			r.text = e
		}
	} else if e = r.thought; e == nil || r.thoughtID != string(id) {
		if e = r.reasoning[string(id)]; e == nil {
			return ""
		}
		// A reasoning entity keeps no id of its own: the copy is made
		// once per message the stream switches to, not per event.
		r.thought, r.thoughtID = e, string(id)
	}
	if !e.open {
		return ""
	}
	return typ
}

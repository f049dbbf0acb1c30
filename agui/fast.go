package agui

import "bytes"

// This file is Feed's fast path for the event that makes up most of a
// stream: a TEXT_MESSAGE_CONTENT continuing an open text message, which
// aguard forwards byte for byte. In a proxy serving many streams each event
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

// textContentID reports whether data is exactly a compact JSON object whose
// members are "type":"TEXT_MESSAGE_CONTENT", "messageId" (a string without
// escapes) and "delta" (any valid string), each once, in any order; and
// returns the message id, aliasing data.
func textContentID(data []byte) (id []byte, ok bool) {
	n := len(data)
	if n < 2 || data[0] != '{' || data[n-1] != '}' {
		return nil, false
	}
	if id, ok := textContentCanonical(data); ok {
		return id, true
	}
	return textContentMembers(data)
}

// textContentMembers is textContentID's general reading, for members in
// any order: it scans each key and value.
func textContentMembers(data []byte) (id []byte, ok bool) {
	n := len(data)
	const typeValue = `"TEXT_MESSAGE_CONTENT"`
	var seen uint8
	i := 1
	for {
		if i >= n || data[i] != '"' {
			return nil, false
		}
		k, err := scanString(data, i)
		if err != nil || k >= n || data[k] != ':' {
			return nil, false
		}
		key := data[i+1 : k-1]
		i = k + 1
		if i >= n || data[i] != '"' {
			return nil, false
		}
		j, err := scanString(data, i)
		if err != nil {
			return nil, false
		}
		var bit uint8
		switch string(key) {
		case "type":
			if string(data[i:j]) != typeValue {
				return nil, false
			}
			bit = 1
		case "messageId":
			id = data[i+1 : j-1]
			for _, c := range id {
				if c == '\\' {
					return nil, false
				}
			}
			bit = 2
		case "delta":
			bit = 4
		default:
			return nil, false
		}
		if seen&bit != 0 {
			return nil, false
		}
		seen |= bit
		i = j
		if i >= n {
			return nil, false
		}
		if data[i] == ',' {
			i++
			continue
		}
		if data[i] == '}' && i == n-1 && seen == 7 {
			return id, true
		}
		return nil, false
	}
}

// textContentCanonical is textContentID for the members in the order the
// AG-UI SDKs write them — type, messageId, delta — which most streams use:
// two comparisons with the fixed parts and a scan of each string, rather
// than a scan of every key and value (BenchmarkFeedTextContent: 65 → 36 ns
// an event). It declines any other order, which textContentMembers reads.
// data is known to begin with '{' and end with '}'.
func textContentCanonical(data []byte) (id []byte, ok bool) {
	if !bytes.HasPrefix(data, []byte(canonicalHead)) {
		return nil, false
	}
	j, err := scanString(data, len(canonicalHead)-1)
	if err != nil || !bytes.HasPrefix(data[j:], []byte(canonicalMid)) {
		return nil, false
	}
	id = data[len(canonicalHead) : j-1]
	if bytes.IndexByte(id, '\\') >= 0 {
		return nil, false
	}
	// The delta must end just before the last byte, the closing brace.
	k, err := scanString(data, j+len(canonicalMid)-1)
	if err != nil || k != len(data)-1 {
		return nil, false
	}
	return id, true
}

// The fixed parts of a TEXT_MESSAGE_CONTENT in the SDKs' member order:
// what comes before the message id, and between it and the delta.
const (
	canonicalHead = `{"type":"TEXT_MESSAGE_CONTENT","messageId":"`
	canonicalMid  = `,"delta":"`
)

// PassThrough reports whether data, the stream's next event, is one that
// Feed would forward byte for byte with nothing to note or record: a plain
// TEXT_MESSAGE_CONTENT continuing the text message open in the active run
// (see feedTextContent). When it reports true the event is taken, as Feed
// would have taken it: the caller forwards data unchanged and does not feed
// it. This spares a proxy the batch it would otherwise read back for the
// commonest event of a stream; any other event reports false, and goes to
// Feed.
func (s *Stream) PassThrough(data []byte) bool {
	return !s.done && !s.overflow && s.passesText(data)
}

// feedTextContent forwards data unchanged when it passes as a plain
// TEXT_MESSAGE_CONTENT (passesText), and reports whether it did.
func (s *Stream) feedTextContent(data []byte, b *Batch) bool {
	if !s.passesText(data) {
		return false
	}
	b.InType = tTextContent
	s.emit(b, tTextContent, data)
	return true
}

// passesText reports whether data is a plain TEXT_MESSAGE_CONTENT for a
// text message open in the active run, with no chunk lane open. The general
// path would find nothing to check or change in it: runRules passes (a run
// is active and not finished), the event carries no subagentRunId so no
// owner can disagree, closeLaneOf has no lane to close, and textCont finds
// the message open; and with no barrier in the hold queue the event, which
// belongs to no tool call, goes out at once (hold.go). It remembers the
// message as the run's current text message, which the next event most
// likely continues.
func (s *Stream) passesText(data []byte) bool {
	if s.slow || !s.first || s.runErr || s.runDone || !s.runStarted || len(s.lanes) > 0 || s.hold.barrier {
		return false
	}
	id, ok := textContentID(data)
	if !ok {
		return false
	}
	e := s.run.text
	if e == nil || e.id != string(id) {
		if e = s.run.msgs[string(id)]; e == nil {
			return false
		}
		s.run.text = e
	}
	return e.open
}

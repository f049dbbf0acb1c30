package agui

import (
	"strconv"

	"github.com/valyala/fastjson"

	"github.com/aguard/aguard/internal/jsonedit"
)

// This file keeps the parse tree of a large event small. The general path
// parses an event into a tree to check it, and a tree costs about 100 bytes
// per JSON value: an event of 16 MiB made of small values (a state snapshot
// of many short entries) would cost gigabytes. Most of a large event is
// usually material aguard only forwards: a member whose value may be any
// JSON (STATE_SNAPSHOT.snapshot, CUSTOM.value, RAW.event, rawEvent, result,
// the state and forwardedProps of a RUN_STARTED input), an object whose
// content nothing reads (metadata, ACTIVITY_SNAPSHOT.content), a member the
// protocol does not define, every member but the type of an unknown event.
// For an event over hollowAbove bytes, the tree is built from a hollow copy
// in which each such value is replaced by the smallest value of its kind
// ({}, [], "", 0, true, false, null): the checks see the same members with
// the same kinds, and what is forwarded is the event itself, never the copy.
//
// The messages a large event replays (MESSAGES_SNAPSHOT.messages, the
// RUN_STARTED input's messages) are read, but not all at once: the copy
// holds [] in their place, and the checks and the tool-call rules read
// them from the event one message at a time (messageList, in snapshot.go),
// each parsed into a tree of its own that the next one reuses. A whole
// history parsed at once cost up to 60 times its size (fastjson's tree
// holds each value in a slice grown by appending, about 400 bytes a value
// when the slice is new); one message at a time costs the largest message.
// FuzzStream checks that hollowing changes nothing in any step's outcome.

// hollowAbove is the event size from which the tree is built from a hollow
// copy: smaller events cost little to parse whole, and copying them would
// cost more than it saves.
const hollowAbove = 64 << 10

// parseSource returns what Feed parses for the compact event out: out
// itself, or its hollow copy (in s.hbuf) when out is large and hollowing
// at least halves it. With the copy, s.msgText is the text of the messages
// it left out (nil when none).
func (s *Stream) parseSource(out []byte) []byte {
	s.msgText = nil
	if len(out) < s.hollowAbove {
		return out
	}
	s.cuts = s.cuts[:0]
	var ok bool
	if s.cuts, ok = hollowCuts(s.cuts, out); !ok || len(s.cuts) == 0 {
		return out
	}
	size := len(out)
	for _, c := range s.cuts {
		size -= c.end - c.start - len(c.token)
	}
	if s.hollowAbove > 0 && size > len(out)/2 {
		return out // not worth a second copy of the event
	}
	s.hbuf, s.msgText = hollowCopy(s.hbuf[:0], out, s.cuts)
	return s.hbuf
}

// hollowCopy appends to dst the copy of text with cuts made, and returns
// it with the text of the messages it left out (nil when none).
func hollowCopy(dst, text []byte, cuts []cut) (copied, msgText []byte) {
	at := 0
	for _, c := range cuts {
		dst = append(append(dst, text[at:c.start]...), c.token...)
		at = c.end
		if c.messages {
			msgText = text[c.start:c.end]
		}
	}
	return append(dst, text[at:]...), msgText
}

// hollowInput returns what ParseRunInput parses for a large RunAgentInput
// (compact JSON): a copy without the values nothing reads (state,
// forwardedProps, unknown members) and without its messages, whose text it
// returns to be read one at a time; or body itself and nil, when an
// escaped key makes a member's name uncertain or nothing is left out.
func hollowInput(body []byte) (src, msgText []byte) {
	if len(body) < 2 || body[0] != '{' {
		return body, nil
	}
	cuts, ok := objectCuts(nil, body, 0, inputFields, 1, false, new(bool))
	if !ok || len(cuts) == 0 {
		return body, nil
	}
	return hollowCopy(make([]byte, 0, 1024), body, cuts)
}

// cut is one value of an event to replace in its hollow copy: out[start:end]
// becomes token. messages marks the replayed messages, which the checks
// still read, one at a time.
type cut struct {
	start, end int
	token      string
	messages   bool
}

// hollowCuts appends to cuts the values of event (valid, compact JSON) to
// replace in its hollow copy, in order. It reports false, leaving the
// event to be parsed whole, when event is not an object with exactly one
// "type" member holding a string, or when an escaped key makes a member's
// name uncertain.
func hollowCuts(cuts []cut, event []byte) ([]cut, bool) {
	if len(event) < 2 || event[0] != '{' {
		return cuts, false
	}
	var typ []byte
	types := 0
	ok := eachMember(event, 0, func(key []byte, vs, ve int) {
		if string(key) == "type" {
			typ = event[vs:ve]
			types++
		}
	})
	if !ok || types != 1 || typ[0] != '"' {
		return cuts, false
	}
	var fields []field // nil for a type the protocol does not know: every member but type is opaque
	if spec := specFor(typ[1 : len(typ)-1]); spec != nil {
		fields = spec.fields
	}
	return objectCuts(cuts, event, 0, fields, 1, true, new(bool))
}

// objectCuts appends the cuts of the object at event[at:], fields
// describing its members, at the given nesting depth. top marks the event
// itself, whose type member always stays. msgsSeen reports that a messages
// member came earlier in the text: only the first is left out, the one the
// checks read first (the others are duplicates, or in a duplicate input).
func objectCuts(cuts []cut, event []byte, at int, fields []field, depth int, top bool, msgsSeen *bool) ([]cut, bool) {
	ok := eachMember(event, at, func(key []byte, vs, ve int) {
		if top && string(key) == "type" {
			return
		}
		k, known := kAny, false
		for i := range fields {
			if fields[i].name == string(key) {
				k, known = fields[i].kind, true
				break
			}
		}
		switch {
		case top && known && k == kInput && event[vs] == '{':
			mark := len(cuts)
			var ok bool
			if cuts, ok = objectCuts(cuts, event, vs, inputFields, depth+1, false, msgsSeen); !ok {
				cuts = cuts[:mark] // an escaped key inside: the input stays whole
			}
		case known && k == kMessages:
			if !*msgsSeen && event[vs] == '[' && ve-vs > 2 && depth+nesting(event[vs:ve]) < fastjson.MaxDepth {
				cuts = append(cuts, cut{start: vs, end: ve, token: "[]", messages: true})
			}
			*msgsSeen = true
		case !known || k == kAny || k == kAnyNonNil || k == kObject:
			if token, ok := hollowToken(event[vs:ve], depth); ok {
				cuts = append(cuts, cut{start: vs, end: ve, token: token})
			}
		}
	})
	return cuts, ok
}

// hollowToken is the smallest value of value's kind. It reports false for
// a value that is already that small, and for one nested deeper than
// fastjson reads: the parse must still refuse it.
func hollowToken(value []byte, depth int) (string, bool) {
	var token string
	switch value[0] {
	case '{':
		token = "{}"
	case '[':
		token = "[]"
	case '"':
		token = `""`
	case 't', 'f', 'n':
		return "", false
	default:
		token = "0"
	}
	if len(value) <= len(token) || (token[0] != '"' && token != "0" && depth+nesting(value) >= fastjson.MaxDepth) {
		return "", false
	}
	return token, true
}

// nesting is the deepest nesting of containers in the compact JSON value v.
func nesting(v []byte) int {
	depth, deepest := 0, 0
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '"':
			e := jsonedit.StringEnd(v, i)
			if e < 0 {
				return deepest
			}
			i = e - 1
		case '{', '[':
			depth++
			deepest = max(deepest, depth)
		case '}', ']':
			depth--
		}
	}
	return deepest
}

// eachElement calls fn with each element of the compact JSON array arr and
// its index, until fn returns false.
func eachElement(arr []byte, fn func(i int, el []byte) bool) {
	it := jsonedit.Elements(arr)
	for i := 0; ; i++ {
		el, more := it.Next()
		if !more || !fn(i, arr[el.ValueStart:el.ValueEnd]) {
			return
		}
	}
}

// eachMember calls fn with each member of the compact object at obj[at:]:
// the key (without quotes) and where its value starts and ends in obj. It
// reports false, having called fn for none or some, when a key holds an
// escape.
func eachMember(obj []byte, at int, fn func(key []byte, vs, ve int)) bool {
	it := jsonedit.Members(obj[at:])
	for {
		m, more := it.Next()
		if !more {
			return true
		}
		for _, c := range m.Key {
			if c == '\\' {
				return false
			}
		}
		fn(m.Key, at+m.ValueStart, at+m.ValueEnd)
	}
}

// maxTreeValues bounds the JSON values of one parse tree: of an event (its
// hollow copy), or of one of the replayed messages read one at a time. A
// tree costs up to about 400 bytes a value (fastjson's value slice, grown
// by appending), so the bound keeps one event's tree under about 60 MiB
// (measured by TestParseTreeIsBounded) whatever its size: an agent's 16 MiB STATE_DELTA of empty patch
// operations would otherwise take a gigabyte.
const maxTreeValues = 1 << 17

// msgTreeTooLarge is the RUN_ERROR message of an event past maxTreeValues,
// and msgInputTreeTooLarge the reason a RunAgentInput past it is refused.
var (
	msgTreeTooLarge      = "an event held more than " + strconv.Itoa(maxTreeValues) + " JSON values to check at once (in one replayed message, for messages)"
	msgInputTreeTooLarge = "holds more JSON values to check at once than aguard reads (" + strconv.Itoa(maxTreeValues) + "; in one message, for messages)"
)

// treeTooLarge reports whether parsing src, or one of the messages in the
// array msgText (nil when none), would build a tree of more than
// maxTreeValues values. A value takes at least two bytes of compact JSON
// with its separator: a shorter text is not read.
func treeTooLarge(src, msgText []byte) bool {
	if len(src) >= 2*maxTreeValues && jsonedit.Values(src) > maxTreeValues {
		return true
	}
	if len(msgText) < 2*maxTreeValues {
		return false
	}
	over := false
	eachElement(msgText, func(_ int, m []byte) bool {
		over = len(m) >= 2*maxTreeValues && jsonedit.Values(m) > maxTreeValues
		return !over
	})
	return over
}

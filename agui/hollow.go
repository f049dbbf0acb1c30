package agui

import (
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
// FuzzStream checks that hollowing changes nothing in any step's outcome.

// hollowAbove is the event size from which the tree is built from a hollow
// copy: smaller events cost little to parse whole, and copying them would
// cost more than it saves.
const hollowAbove = 64 << 10

// parseSource returns what Feed parses for the compact event out: out
// itself, or its hollow copy (in s.hbuf) when out is large and hollowing
// at least halves it.
func (s *Stream) parseSource(out []byte) []byte {
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
	h, at := s.hbuf[:0], 0
	for _, c := range s.cuts {
		h = append(append(h, out[at:c.start]...), c.token...)
		at = c.end
	}
	s.hbuf = append(h, out[at:]...)
	return s.hbuf
}

// cut is one value of an event to replace in its hollow copy: out[start:end]
// becomes token.
type cut struct {
	start, end int
	token      string
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
	return objectCuts(cuts, event, 0, fields, 1, true)
}

// objectCuts appends the cuts of the object at event[at:], fields
// describing its members, at the given nesting depth. top marks the event
// itself, whose type member always stays.
func objectCuts(cuts []cut, event []byte, at int, fields []field, depth int, top bool) ([]cut, bool) {
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
			if cuts, ok = objectCuts(cuts, event, vs, inputFields, depth+1, false); !ok {
				cuts = cuts[:mark] // an escaped key inside: the input stays whole
			}
		case !known || k == kAny || k == kAnyNonNil || k == kObject:
			if token, ok := hollowToken(event[vs:ve], depth); ok {
				cuts = append(cuts, cut{vs, ve, token})
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

package downgrade

import "encoding/json"

// This file holds the small JSON scanner the package edits events with. It
// finds the byte spans of object members and array elements so that a rewrite
// replaces exactly the value it changes and copies every other byte, in order.
//
// The scanner is bounds-safe on any input (it reports malformed text instead of
// panicking), but it only recognises structure: callers check json.Valid before
// writing a rewrite to the wire.

// isSpace reports whether c is JSON insignificant whitespace.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipSpace returns the index of the first non-space byte at or after i.
func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// stringEnd returns the index just past the JSON string whose opening quote is
// b[i], or -1 if it is not terminated.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// valueEnd returns the index just past the JSON value that starts at b[i], or
// -1 if there is no complete value there.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e := stringEnd(b, j)
				if e < 0 {
					return -1
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	case ',', ':', '}', ']':
		return -1
	default: // number, true, false, null
		j := i
		for j < len(b) && !isSpace(b[j]) && b[j] != ',' && b[j] != '}' && b[j] != ']' {
			j++
		}
		return j
	}
}

// item is one object member or array element: start is where it begins (the
// key's opening quote; for an element, its value), [valStart, valEnd) is the
// value, and key is the member's raw key between the quotes (nil for elements).
type item struct {
	start, valStart, valEnd int
	key                     []byte
}

// items iterates over the members of a JSON object or the elements of a JSON
// array without allocating.
type items struct {
	b      []byte
	i      int // where scanning resumes
	n      int // items returned so far
	object bool
	done   bool
	bad    bool // the text is not a well-formed object or array
}

// newItems starts iterating over the object or array in b (leading space
// allowed). open is '{' or '['; anything else ends the iteration as malformed.
func newItems(b []byte, open byte) items {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != open {
		return items{done: true, bad: true}
	}
	return items{b: b, i: i + 1, object: open == '{'}
}

// next returns the next item, or false at the end (check it.bad).
func (it *items) next() (item, bool) {
	if it.done {
		return item{}, false
	}
	b := it.b
	i := skipSpace(b, it.i)
	closer := byte(']')
	if it.object {
		closer = '}'
	}
	if i < len(b) && b[i] == closer {
		it.done = true
		it.i = i
		return item{}, false
	}
	if it.n > 0 {
		if i >= len(b) || b[i] != ',' {
			return it.fail()
		}
		i = skipSpace(b, i+1)
	}
	m := item{start: i}
	if it.object {
		if i >= len(b) || b[i] != '"' {
			return it.fail()
		}
		ke := stringEnd(b, i)
		if ke < 0 {
			return it.fail()
		}
		m.key = b[i+1 : ke-1]
		i = skipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return it.fail()
		}
		i = skipSpace(b, i+1)
	}
	m.valStart = i
	m.valEnd = valueEnd(b, i)
	if m.valEnd < 0 {
		return it.fail()
	}
	it.i = m.valEnd
	it.n++
	return m, true
}

func (it *items) fail() (item, bool) {
	it.done, it.bad = true, true
	return item{}, false
}

// closeAt returns the index of the closing brace or bracket once the iteration
// has ended well, or -1.
func (it *items) closeAt() int {
	if !it.done || it.bad {
		return -1
	}
	return it.i
}

// rawEq reports whether the raw contents of a JSON string (between the quotes,
// escapes not decoded) denote s. It allocates only when raw holds an escape.
func rawEq(raw []byte, s string) bool {
	for _, c := range raw {
		if c == '\\' {
			var dec string
			q := make([]byte, 0, len(raw)+2)
			q = append(append(append(q, '"'), raw...), '"')
			return json.Unmarshal(q, &dec) == nil && dec == s
		}
	}
	return string(raw) == s
}

// field returns the span of the value of the last member named key in the
// object obj (the one JSON.parse keeps), or ok false, also when obj is not a
// well-formed object.
func field(obj []byte, key string) (start, end int, ok bool) {
	it := newItems(obj, '{')
	for {
		m, more := it.next()
		if !more {
			return start, end, ok && !it.bad
		}
		if rawEq(m.key, key) {
			start, end, ok = m.valStart, m.valEnd, true
		}
	}
}

// strField returns the raw JSON string token (quotes included) of the member
// key of obj, or nil when it is absent or not a string.
func strField(obj []byte, key string) []byte {
	s, e, ok := field(obj, key)
	if !ok || obj[s] != '"' {
		return nil
	}
	return obj[s:e]
}

// tokenIs reports whether tok, a raw JSON string token, denotes s.
func tokenIs(tok []byte, s string) bool {
	return len(tok) >= 2 && rawEq(tok[1:len(tok)-1], s)
}

// unquote decodes a raw JSON string token for human-readable notes.
func unquote(tok []byte) string {
	var s string
	if json.Unmarshal(tok, &s) != nil {
		return string(tok)
	}
	return s
}

// edit replaces src[from:to] with with.
type edit struct {
	from, to int
	with     []byte
}

// splicer collects the edits that keep, replace or drop the items of one
// object or array, in order, keeping the separators right: dropping an item
// takes one adjoining comma with it, so the result is as compact as the source.
type splicer struct {
	edits   []edit
	seen    int  // items visited
	kept    bool // some visited item survives
	lastEnd int  // end of the previous item's value
}

func (s *splicer) keep(m item) {
	if !s.kept && s.seen > 0 {
		// Every earlier item was dropped: drop the comma before this one.
		s.edits = append(s.edits, edit{from: s.lastEnd, to: m.start})
	}
	s.kept = true
	s.lastEnd = m.valEnd
	s.seen++
}

func (s *splicer) replace(m item, with []byte) {
	s.keep(m)
	s.edits = append(s.edits, edit{from: m.valStart, to: m.valEnd, with: with})
}

func (s *splicer) drop(m item) {
	if s.seen == 0 {
		s.edits = append(s.edits, edit{from: m.start, to: m.valEnd})
	} else {
		s.edits = append(s.edits, edit{from: s.lastEnd, to: m.valEnd})
	}
	s.lastEnd = m.valEnd
	s.seen++
}

// insert adds text as a new last item before the closer at index at.
func (s *splicer) insert(at int, text []byte) {
	if s.kept {
		text = append([]byte{','}, text...)
	}
	s.edits = append(s.edits, edit{from: at, to: at, with: text})
	s.kept = true
}

// apply returns src with the edits (sorted, not overlapping) applied, in a new
// slice; src itself when there are none.
func apply(src []byte, edits []edit) []byte {
	if len(edits) == 0 {
		return src
	}
	n := len(src)
	for _, e := range edits {
		n += len(e.with) - (e.to - e.from)
	}
	out := make([]byte, 0, n)
	last := 0
	for _, e := range edits {
		out = append(out, src[last:e.from]...)
		out = append(out, e.with...)
		last = e.to
	}
	return append(out, src[last:]...)
}

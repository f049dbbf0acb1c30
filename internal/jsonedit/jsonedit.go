// Package jsonedit edits JSON text in place: it finds the byte spans of the
// members of an object and the elements of an array, so that an edit replaces
// exactly the values it changes and copies every other byte, in order. aguard
// rewrites events and inputs with it (package agui on the 1.0 stream, package
// downgrade for 0.x peers) without re-encoding what it does not change.
//
// It is not a parser or a validator. It recognises structure only, on text a
// validator has accepted (encoding/json.Valid, or agui's scanner); on any
// other input it is bounds-safe and reports malformed structure rather than
// panicking, but it does not promise to notice every error inside a value.
// Whitespace between tokens is allowed and kept; what an edit adds is compact.
// It does not decode values: callers compare keys and string tokens with
// KeyIs and TokenIs, which decode escapes only when there are any.
//
// # Duplicate keys
//
// RFC 8259 leaves the meaning of an object with two members of one name open,
// and the parsers around aguard differ: JSON.parse, which the official AG-UI
// clients read events with, and encoding/json keep the last; fastjson, agui's
// parser, reads the first. This package's rule is:
//
//   - a lookup (Member, String) reads the last member of that name, what the
//     official client will see;
//   - an edit (Set, Splicer callers that drop by name) changes every member of
//     that name, so the edit holds whichever member a parser reads.
//
// agui rejects duplicates of every member it checks before it reads or edits
// one, so on the text agui edits the first and the last are the same member.
package jsonedit

import (
	"encoding/json"
	"slices"
	"strings"
	"unicode/utf8"
)

// isSpace reports whether c is JSON insignificant whitespace.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// SkipSpace returns the index of the first non-space byte at or after i.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// StringEnd returns the index just past the JSON string whose opening quote
// is b[i], or -1 if it is not terminated.
func StringEnd(b []byte, i int) int {
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

// Values counts the values in the valid JSON text v: the nodes of its
// parse tree, containers and scalars alike (object keys are not values).
// What a parser spends on a tree grows with this count rather than with the
// text's length: "[0,0,…]" holds a value every two bytes. On text that is
// not valid JSON it returns a count without promising what it means.
func Values(v []byte) int {
	n := 0
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '"':
			e := StringEnd(v, i)
			if e < 0 {
				return n
			}
			if k := SkipSpace(v, e); k == len(v) || v[k] != ':' {
				n++
			}
			i = e - 1
		case c == '{' || c == '[' || c == 't' || c == 'f' || c == 'n':
			n++ // true, false and null: their other letters match no case
		case c == '-' || (c >= '0' && c <= '9'):
			n++
			for i+1 < len(v) && strings.IndexByte("0123456789.eE+-", v[i+1]) >= 0 {
				i++
			}
		}
	}
	return n
}

// ValueEnd returns the index just past the JSON value that starts at b[i],
// or -1 if there is no complete value there.
func ValueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return StringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e := StringEnd(b, j)
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

// Item is one member of an object or one element of an array: Start is
// where it begins (a member's key's opening quote, an element's value),
// [ValueStart, ValueEnd) is its value, and Key is a member's raw key between
// the quotes, escapes not decoded (nil for an element).
type Item struct {
	Start, ValueStart, ValueEnd int
	Key                         []byte
}

// KeyIs reports whether the member's key denotes key.
func (m Item) KeyIs(key string) bool { return m.Key != nil && rawEq(m.Key, key) }

// Iter walks the members of an object or the elements of an array, in
// order, without allocating.
type Iter struct {
	b      []byte
	i      int // where scanning resumes
	n      int // items returned so far
	object bool
	done   bool
	bad    bool
}

// Members starts a walk over the members of the object in obj (leading
// space allowed).
func Members(obj []byte) Iter { return newIter(obj, '{') }

// Elements starts a walk over the elements of the array in arr (leading
// space allowed).
func Elements(arr []byte) Iter { return newIter(arr, '[') }

func newIter(b []byte, open byte) Iter {
	i := SkipSpace(b, 0)
	if i >= len(b) || b[i] != open {
		return Iter{done: true, bad: true}
	}
	return Iter{b: b, i: i + 1, object: open == '{'}
}

// Next returns the next item, or false at the end or at malformed text
// (Malformed tells which).
func (it *Iter) Next() (Item, bool) {
	if it.done {
		return Item{}, false
	}
	b := it.b
	i := SkipSpace(b, it.i)
	closer := byte(']')
	if it.object {
		closer = '}'
	}
	if i < len(b) && b[i] == closer {
		it.done, it.i = true, i
		return Item{}, false
	}
	if it.n > 0 {
		if i >= len(b) || b[i] != ',' {
			return it.fail()
		}
		i = SkipSpace(b, i+1)
	}
	m := Item{Start: i}
	if it.object {
		if i >= len(b) || b[i] != '"' {
			return it.fail()
		}
		ke := StringEnd(b, i)
		if ke < 0 {
			return it.fail()
		}
		m.Key = b[i+1 : ke-1]
		i = SkipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return it.fail()
		}
		i = SkipSpace(b, i+1)
	}
	m.ValueStart = i
	m.ValueEnd = ValueEnd(b, i)
	if m.ValueEnd < 0 {
		return it.fail()
	}
	it.i = m.ValueEnd
	it.n++
	return m, true
}

func (it *Iter) fail() (Item, bool) {
	it.done, it.bad = true, true
	return Item{}, false
}

// Malformed reports that the walk stopped at text that is not a well-formed
// object or array.
func (it *Iter) Malformed() bool { return it.bad }

// Close returns the index of the closing brace or bracket once Next has
// returned false on well-formed text, or -1.
func (it *Iter) Close() int {
	if !it.done || it.bad {
		return -1
	}
	return it.i
}

// rawEq reports whether the raw contents of a JSON string (between the
// quotes, escapes not decoded) denote s. It allocates only when raw holds an
// escape.
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

// TokenIs reports whether tok, a raw JSON string token (quotes included),
// denotes s.
func TokenIs(tok []byte, s string) bool {
	return len(tok) >= 2 && tok[0] == '"' && rawEq(tok[1:len(tok)-1], s)
}

// Member returns the span of the value of the last member named key in the
// object obj (see the package documentation on duplicate keys); ok is false
// when there is none, also when obj is not a well-formed object.
func Member(obj []byte, key string) (start, end int, ok bool) {
	it := Members(obj)
	for {
		m, more := it.Next()
		if !more {
			return start, end, ok && !it.bad
		}
		if rawEq(m.Key, key) {
			start, end, ok = m.ValueStart, m.ValueEnd, true
		}
	}
}

// String returns the raw JSON string token (quotes included) of the member
// key of obj, as Member finds it, or nil when it is absent or not a string.
func String(obj []byte, key string) []byte {
	s, e, ok := Member(obj, key)
	if !ok || obj[s] != '"' {
		return nil
	}
	return obj[s:e]
}

// Set appends to dst the object obj with every member named key given the
// JSON text val, or, when there is none, with the member added last; ok is
// false (and dst returned as it was) when obj is not a well-formed object.
// val must be valid JSON. Set allocates only to grow dst.
func Set(dst, obj []byte, key string, val []byte) ([]byte, bool) {
	start := len(dst)
	it := Members(obj)
	last, found := 0, false
	for {
		m, more := it.Next()
		if !more {
			break
		}
		if rawEq(m.Key, key) {
			dst = append(dst, obj[last:m.ValueStart]...)
			dst = append(dst, val...)
			last, found = m.ValueEnd, true
		}
	}
	at := it.Close()
	if at < 0 {
		return dst[:start], false
	}
	if !found {
		dst = append(dst, obj[:at]...)
		if it.n > 0 {
			dst = append(dst, ',')
		}
		dst = AppendString(dst, key)
		dst = append(dst, ':')
		dst = append(dst, val...)
		last = at
	}
	return append(dst, obj[last:]...), true
}

// Edit replaces src[From:To] with With.
type Edit struct {
	From, To int
	With     []byte
}

// Splicer collects the edits that keep, replace or drop the items of one
// object or array, visited in order, and keeps the separators right:
// dropping an item takes one adjoining comma with it, so the result is as
// compact as the source. Every item must be visited (kept, replaced or
// dropped) in order.
type Splicer struct {
	Edits   []Edit
	seen    int  // items visited
	kept    bool // some visited item survives
	lastEnd int  // end of the previous item's value
}

// Keep leaves m as it is.
func (s *Splicer) Keep(m Item) {
	if !s.kept && s.seen > 0 {
		// Every earlier item was dropped: drop the comma before this one.
		s.Edits = append(s.Edits, Edit{From: s.lastEnd, To: m.Start})
	}
	s.kept = true
	s.lastEnd = m.ValueEnd
	s.seen++
}

// Replace keeps m with its value replaced by with.
func (s *Splicer) Replace(m Item, with []byte) {
	s.Keep(m)
	s.Edits = append(s.Edits, Edit{From: m.ValueStart, To: m.ValueEnd, With: with})
}

// Drop removes m and one adjoining comma.
func (s *Splicer) Drop(m Item) {
	if s.seen == 0 {
		s.Edits = append(s.Edits, Edit{From: m.Start, To: m.ValueEnd})
	} else {
		s.Edits = append(s.Edits, Edit{From: s.lastEnd, To: m.ValueEnd})
	}
	s.lastEnd = m.ValueEnd
	s.seen++
}

// Insert adds text as a new last item before the closer at index at (see
// Iter.Close), after every item has been visited.
func (s *Splicer) Insert(at int, text []byte) {
	if s.kept {
		text = append([]byte{','}, text...)
	}
	s.Edits = append(s.Edits, Edit{From: at, To: at, With: text})
	s.kept = true
}

// Apply appends to dst the text src with edits (sorted, not overlapping)
// applied.
func Apply(dst, src []byte, edits []Edit) []byte {
	n := len(src)
	for _, e := range edits {
		n += len(e.With) - (e.To - e.From)
	}
	dst = slices.Grow(dst, n)
	last := 0
	for _, e := range edits {
		dst = append(dst, src[last:e.From]...)
		dst = append(dst, e.With...)
		last = e.To
	}
	return append(dst, src[last:]...)
}

// AppendString appends s as a JSON string. Control characters, quotes and
// backslashes are escaped; invalid UTF-8 becomes U+FFFD, so the result is
// always valid JSON whatever untrusted bytes s holds.
func AppendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

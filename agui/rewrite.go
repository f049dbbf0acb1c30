package agui

import (
	"encoding/json"
	"unicode/utf8"
)

// This file holds the small JSON editing helpers the Stream uses to change an
// event while keeping every other byte of it: find one member of an object,
// replace or add one member, remove elements of an array. They work on text
// that scan has accepted and that is compact (no whitespace between tokens),
// so they never have to re-validate or re-indent anything.

// skipValue returns the offset just past the JSON value starting at b[i].
// b must be valid, compact JSON.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default: // number, true, false, null
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']':
				return i
			}
			i++
		}
		return i
	}
}

// skipString returns the offset just past the string starting at b[i] == '"'.
func skipString(b []byte, i int) int {
	i++
	for i < len(b) {
		switch b[i] {
		case '\\':
			i += 2
		case '"':
			return i + 1
		default:
			i++
		}
	}
	return i
}

// rawKeyIs reports whether the quoted JSON string raw (quotes included)
// denotes key. Escaped keys are decoded; they are rare.
func rawKeyIs(raw []byte, key string) bool {
	inner := raw[1 : len(raw)-1]
	for _, c := range inner {
		if c == '\\' {
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return false
			}
			return s == key
		}
	}
	return string(inner) == key
}

// objectMember finds key among the members of the compact object obj and
// returns the span of its value. Known keys are unique in every event the
// Stream edits (fields.go rejects duplicates), so the first match is the one.
func objectMember(obj []byte, key string) (start, end int, ok bool) {
	if len(obj) < 2 || obj[0] != '{' {
		return 0, 0, false
	}
	i := 1
	for i < len(obj) && obj[i] != '}' {
		ks := i
		ke := skipString(obj, i)
		vs := ke + 1 // past ':'
		ve := skipValue(obj, vs)
		if rawKeyIs(obj[ks:ke], key) {
			return vs, ve, true
		}
		i = ve
		if i < len(obj) && obj[i] == ',' {
			i++
		}
	}
	return 0, 0, false
}

// setMember appends to dst the compact object obj with key set to the JSON
// text val: the existing value is replaced in place, or the member is added
// at the end.
func setMember(dst, obj []byte, key string, val []byte) []byte {
	if vs, ve, ok := objectMember(obj, key); ok {
		dst = append(dst, obj[:vs]...)
		dst = append(dst, val...)
		return append(dst, obj[ve:]...)
	}
	dst = append(dst, obj[:len(obj)-1]...)
	if len(obj) > 2 {
		dst = append(dst, ',')
	}
	dst = appendJSONString(dst, key)
	dst = append(dst, ':')
	dst = append(dst, val...)
	return append(dst, '}')
}

// removeElements appends to dst the compact array arr without the elements
// whose index is in drop (ascending).
func removeElements(dst, arr []byte, drop []int) []byte {
	dst = append(dst, '[')
	i, idx, wrote := 1, 0, false
	for i < len(arr) && arr[i] != ']' {
		e := skipValue(arr, i)
		if len(drop) > 0 && drop[0] == idx {
			drop = drop[1:]
		} else {
			if wrote {
				dst = append(dst, ',')
			}
			dst = append(dst, arr[i:e]...)
			wrote = true
		}
		i = e
		if i < len(arr) && arr[i] == ',' {
			i++
		}
		idx++
	}
	return append(dst, ']')
}

// appendJSONString appends s as a JSON string. Control characters, quotes and
// backslashes are escaped; invalid UTF-8 becomes U+FFFD, so the result is
// always valid JSON whatever untrusted bytes s holds.
func appendJSONString(dst []byte, s string) []byte {
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

// appendStringArray appends ids as a JSON array of strings.
func appendStringArray(dst []byte, ids []string) []byte {
	dst = append(dst, '[')
	for i, id := range ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, id)
	}
	return append(dst, ']')
}

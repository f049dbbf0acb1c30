package agui

import (
	"encoding/binary"
	"math/bits"
	"strconv"

	"github.com/aguard/aguard/internal/jsonedit"
)

// maxScanDepth matches encoding/json's nesting limit, so that scan and
// json.Valid agree on every input.
const maxScanDepth = 10000

// scanError describes why a JSON text was rejected: what was wrong and at
// which byte offset.
type scanError struct {
	off    int
	reason string
}

func (e *scanError) Error() string {
	return e.reason + " at offset " + strconv.Itoa(e.off)
}

// scanner is a strict RFC 8259 validator. It exists because fastjson checks
// structure but not string contents: it lets raw control characters (a raw
// newline smuggled in through multi-line SSE data) and invalid escapes through.
// The scanner also reports whether the text is compact (no whitespace between
// tokens), which decides whether an event can be forwarded byte for byte.
//
// A scanner keeps its stack between calls, so a Stream's steady state does not
// allocate.
type scanner struct {
	stack []byte // '{' or '[' per open container
}

// scan validates data as exactly one JSON value (surrounding whitespace
// allowed, as encoding/json.Valid allows it). compact reports that data holds
// no whitespace outside strings at all.
func (sc *scanner) scan(data []byte) (compact bool, err *scanError) {
	sc.stack = sc.stack[:0]
	compact = true
	i := 0
	var c, top byte
	n := len(data)
	fail := func(off int, reason string) (bool, *scanError) {
		return false, &scanError{off: off, reason: reason}
	}
	skipWS := func() {
		for i < n {
			switch data[i] {
			case ' ', '\t', '\n', '\r':
				compact = false
				i++
			default:
				return
			}
		}
	}
	// expectValue: at a position where a value must start.
	for {
		skipWS()
		if i >= n {
			return fail(i, "unexpected end of JSON")
		}
		c = data[i]
		switch {
		case c == '{' || c == '[':
			if len(sc.stack) >= maxScanDepth {
				return fail(i, "nesting too deep")
			}
			sc.stack = append(sc.stack, c)
			i++
			skipWS()
			if i < n && ((c == '{' && data[i] == '}') || (c == '[' && data[i] == ']')) {
				sc.stack = sc.stack[:len(sc.stack)-1]
				i++
				goto afterValue
			}
			if c == '{' {
				goto objectKey
			}
			continue
		case c == '"':
			j, e := scanString(data, i)
			if e != nil {
				return false, e
			}
			i = j
		case c == '-' || (c >= '0' && c <= '9'):
			j, e := scanNumber(data, i)
			if e != nil {
				return false, e
			}
			i = j
		case c == 't':
			if !hasLiteral(data, i, "true") {
				return fail(i, "invalid literal")
			}
			i += 4
		case c == 'f':
			if !hasLiteral(data, i, "false") {
				return fail(i, "invalid literal")
			}
			i += 5
		case c == 'n':
			if !hasLiteral(data, i, "null") {
				return fail(i, "invalid literal")
			}
			i += 4
		default:
			return fail(i, "invalid character "+strconv.QuoteRune(rune(c))+" looking for a value")
		}
	afterValue:
		skipWS()
		if len(sc.stack) == 0 {
			if i != n {
				return fail(i, "invalid character after top-level value")
			}
			return compact, nil
		}
		if i >= n {
			return fail(i, "unexpected end of JSON")
		}
		top = sc.stack[len(sc.stack)-1]
		switch {
		case data[i] == ',':
			i++
			if top == '{' {
				skipWS()
				goto objectKey
			}
			continue
		case top == '{' && data[i] == '}', top == '[' && data[i] == ']':
			sc.stack = sc.stack[:len(sc.stack)-1]
			i++
			goto afterValue
		default:
			return fail(i, "invalid character after value in container")
		}
	objectKey:
		if i >= n {
			return fail(i, "unexpected end of JSON")
		}
		if data[i] != '"' {
			return fail(i, "object key must be a string")
		}
		{
			j, e := scanString(data, i)
			if e != nil {
				return false, e
			}
			i = j
		}
		skipWS()
		if i >= n || data[i] != ':' {
			return fail(i, "missing ':' after object key")
		}
		i++
	}
}

func hasLiteral(data []byte, i int, lit string) bool {
	return len(data)-i >= len(lit) && string(data[i:i+len(lit)]) == lit
}

// scanString checks the string starting at data[i] == '"' and returns the
// offset just past its closing quote. Raw control characters and invalid
// escapes are errors; bytes >= 0x80 are accepted as they are (encoding/json.Valid
// does not check UTF-8 either).
//
// It reads eight bytes at a time and goes straight to the first that ends
// or escapes the string (specials), so that a short string — a key, an id
// — costs a word or two, not a loop over its bytes; only the last bytes of
// data, fewer than eight, are looked at one by one.
func scanString(data []byte, i int) (int, *scanError) {
	i++
	for {
		for i+8 <= len(data) {
			m := specials(binary.LittleEndian.Uint64(data[i:]))
			if m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= len(data) {
			return 0, &scanError{off: i, reason: "unterminated string"}
		}
		c := data[i]
		switch {
		case c == '"':
			return i + 1, nil
		case c < 0x20:
			return 0, &scanError{off: i, reason: "raw control character in string"}
		case c == '\\':
			if i+1 >= len(data) {
				return 0, &scanError{off: i, reason: "unexpected end of JSON in escape"}
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(data)-i < 6 {
					return 0, &scanError{off: i, reason: "unexpected end of JSON in \\u escape"}
				}
				for k := i + 2; k < i+6; k++ {
					if !isHex(data[k]) {
						return 0, &scanError{off: k, reason: "invalid \\u escape"}
					}
				}
				i += 6
			default:
				return 0, &scanError{off: i, reason: "invalid escape in string"}
			}
		default:
			i++ // a plain byte among data's last seven
		}
	}
}

// specials returns a word whose byte k has its high bit set when byte k
// of v (little-endian) is a quote, a backslash or a control character
// (below 0x20): the bytes that end or escape a string, or are not allowed
// in one. Each test is the classic "has a zero byte" bit trick: it may
// also mark bytes above a marked one (a borrow runs on), never below, so
// the lowest mark is exactly the first such byte, and a word with none
// gives zero.
func specials(v uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q := v ^ (ones * '"')
	b := v ^ (ones * '\\')
	return ((q-ones)&^q | (b-ones)&^b | (v-ones*0x20)&^v) & highs
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// scanNumber checks the number starting at data[i] and returns the offset
// just past it.
func scanNumber(data []byte, i int) (int, *scanError) {
	start := i
	n := len(data)
	if data[i] == '-' {
		i++
	}
	if i >= n || !isDigit(data[i]) {
		return 0, &scanError{off: start, reason: "invalid number"}
	}
	if data[i] == '0' {
		i++
	} else {
		for i < n && isDigit(data[i]) {
			i++
		}
	}
	if i < n && data[i] == '.' {
		i++
		if i >= n || !isDigit(data[i]) {
			return 0, &scanError{off: start, reason: "invalid number"}
		}
		for i < n && isDigit(data[i]) {
			i++
		}
	}
	if i < n && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < n && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= n || !isDigit(data[i]) {
			return 0, &scanError{off: start, reason: "invalid number"}
		}
		for i < n && isDigit(data[i]) {
			i++
		}
	}
	return i, nil
}

// appendCompact appends data without the whitespace between its tokens, as
// encoding/json.Compact does. data must be valid JSON (scan accepted it).
func appendCompact(dst, data []byte) []byte {
	for i := 0; i < len(data); {
		c := data[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			i++
		case '"':
			j := jsonedit.StringEnd(data, i)
			if j < 0 {
				j = len(data) // not JSON after all; scan rejects it
			}
			dst = append(dst, data[i:j]...)
			i = j
		default:
			dst = append(dst, c)
			i++
		}
	}
	return dst
}

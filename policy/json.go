package policy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
)

// maxJSONDepth bounds the nesting of a decoded document, as encoding/json
// bounds its own.
const maxJSONDepth = 10000

// decodeJSONTerm decodes one JSON document (RFC 8259, strictly: no NaN, no
// trailing commas, no bad escapes, nothing after the value) straight into an
// OPA term. Decoding into map[string]any and converting that costs several
// times more for large arguments; see the design notes in go-libraries.md §4.
// Invalid UTF-8 in strings is replaced by U+FFFD, as encoding/json does.
func decodeJSONTerm(data []byte) (*ast.Term, error) {
	d := jsonDecoder{data: data}
	d.skipSpace()
	t, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.skipSpace()
	if d.pos != len(d.data) {
		return nil, d.errorf("unexpected %q after the top-level value", d.data[d.pos])
	}
	return t, nil
}

type jsonDecoder struct {
	data []byte
	pos  int
	// items holds the items of the objects and arrays being decoded, so
	// that each container allocates its final slice once.
	items []*ast.Term
	// slab hands out terms from chunks instead of one allocation each; the
	// terms of one document live and die together.
	slab []ast.Term
	// keys shares the term of an object key among the objects that repeat
	// it (arrays of records). AST terms are immutable once built.
	keys map[string]*ast.Term
}

// maxSharedKeyLen bounds the object keys whose terms are shared.
const maxSharedKeyLen = 64

func (d *jsonDecoder) term(v ast.Value) *ast.Term {
	if len(d.slab) == 0 {
		d.slab = make([]ast.Term, 64)
	}
	t := &d.slab[0]
	d.slab = d.slab[1:]
	t.Value = v
	return t
}

// key decodes an object key, sharing the term of keys seen before.
func (d *jsonDecoder) key() (*ast.Term, error) {
	start := d.pos + 1
	end := start
	for end < len(d.data) && end-start <= maxSharedKeyLen {
		c := d.data[end]
		if c == '"' {
			if t, ok := d.keys[string(d.data[start:end])]; ok {
				d.pos = end + 1
				return t, nil
			}
			break
		}
		if c == '\\' || c < 0x20 || c >= 0x80 {
			break
		}
		end++
	}
	s, err := d.string()
	if err != nil {
		return nil, err
	}
	t := d.term(ast.String(s))
	if len(s) <= maxSharedKeyLen {
		if d.keys == nil {
			d.keys = make(map[string]*ast.Term)
		}
		d.keys[s] = t
	}
	return t, nil
}

func (d *jsonDecoder) errorf(format string, args ...any) error {
	return fmt.Errorf("invalid JSON at offset %d: %s", d.pos, fmt.Sprintf(format, args...))
}

var errJSONEnd = errors.New("invalid JSON: unexpected end of input")

func (d *jsonDecoder) skipSpace() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

func (d *jsonDecoder) value(depth int) (*ast.Term, error) {
	if d.pos >= len(d.data) {
		return nil, errJSONEnd
	}
	if depth > maxJSONDepth {
		return nil, d.errorf("nested deeper than %d levels", maxJSONDepth)
	}
	switch c := d.data[d.pos]; {
	case c == '{':
		return d.object(depth)
	case c == '[':
		return d.array(depth)
	case c == '"':
		s, err := d.string()
		if err != nil {
			return nil, err
		}
		return d.term(ast.String(s)), nil
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	case c == 't':
		return d.literal("true", ast.InternedTerm(true))
	case c == 'f':
		return d.literal("false", ast.InternedTerm(false))
	case c == 'n':
		return d.literal("null", ast.InternedNullTerm)
	default:
		return nil, d.errorf("unexpected %q", c)
	}
}

func (d *jsonDecoder) literal(word string, t *ast.Term) (*ast.Term, error) {
	if len(d.data)-d.pos < len(word) || string(d.data[d.pos:d.pos+len(word)]) != word {
		return nil, d.errorf("invalid literal, want %s", word)
	}
	d.pos += len(word)
	return t, nil
}

func (d *jsonDecoder) object(depth int) (*ast.Term, error) {
	d.pos++ // {
	base := len(d.items)
	defer func() { d.items = d.items[:base] }()
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == '}' {
		d.pos++
		return ast.NewTerm(ast.NewObject()), nil
	}
	for {
		d.skipSpace()
		if d.pos >= len(d.data) {
			return nil, errJSONEnd
		}
		if d.data[d.pos] != '"' {
			return nil, d.errorf("object key must be a string, found %q", d.data[d.pos])
		}
		key, err := d.key()
		if err != nil {
			return nil, err
		}
		d.skipSpace()
		if d.pos >= len(d.data) {
			return nil, errJSONEnd
		}
		if d.data[d.pos] != ':' {
			return nil, d.errorf("want ':' after object key, found %q", d.data[d.pos])
		}
		d.pos++
		d.skipSpace()
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		d.items = append(d.items, key, v)
		d.skipSpace()
		if d.pos >= len(d.data) {
			return nil, errJSONEnd
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
			continue
		case '}':
			d.pos++
		default:
			return nil, d.errorf("want ',' or '}' in object, found %q", d.data[d.pos])
		}
		break
	}
	kv := d.items[base:]
	if hasDuplicateKeys(kv) {
		obj := ast.NewObjectWithCapacity(len(kv) / 2)
		for i := 0; i < len(kv); i += 2 {
			obj.Insert(kv[i], kv[i+1]) // a repeated key keeps its last value, as in encoding/json
		}
		return d.term(obj), nil
	}
	pairs := make([][2]*ast.Term, len(kv)/2)
	for i := range pairs {
		pairs[i] = [2]*ast.Term{kv[2*i], kv[2*i+1]}
	}
	return d.term(ast.NewObject(pairs...)), nil
}

func (d *jsonDecoder) array(depth int) (*ast.Term, error) {
	d.pos++ // [
	base := len(d.items)
	defer func() { d.items = d.items[:base] }()
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == ']' {
		d.pos++
		return ast.ArrayTerm(), nil
	}
	for {
		d.skipSpace()
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		d.items = append(d.items, v)
		d.skipSpace()
		if d.pos >= len(d.data) {
			return nil, errJSONEnd
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
			continue
		case ']':
			d.pos++
		default:
			return nil, d.errorf("want ',' or ']' in array, found %q", d.data[d.pos])
		}
		break
	}
	elems := make([]*ast.Term, len(d.items)-base)
	copy(elems, d.items[base:])
	return d.term(ast.NewArray(elems...)), nil
}

// number checks the JSON number grammar and keeps the literal as written.
func (d *jsonDecoder) number() (*ast.Term, error) {
	start := d.pos
	b := d.data
	digits := func() int {
		n := 0
		for d.pos < len(b) && b[d.pos] >= '0' && b[d.pos] <= '9' {
			d.pos++
			n++
		}
		return n
	}
	if b[d.pos] == '-' {
		d.pos++
	}
	switch {
	case d.pos < len(b) && b[d.pos] == '0':
		d.pos++
	case digits() == 0:
		return nil, d.errorf("invalid number")
	}
	if d.pos < len(b) && b[d.pos] == '.' {
		d.pos++
		if digits() == 0 {
			return nil, d.errorf("invalid number: no digits after '.'")
		}
	}
	exp := -1 // the exponent marker's position
	if d.pos < len(b) && (b[d.pos] == 'e' || b[d.pos] == 'E') {
		exp = d.pos
		d.pos++
		if d.pos < len(b) && (b[d.pos] == '+' || b[d.pos] == '-') {
			d.pos++
		}
		if digits() == 0 {
			return nil, d.errorf("invalid number: no digits in exponent")
		}
	}
	if t := ast.InternedIntNumberTermFromString(string(b[start:d.pos])); t != nil {
		return t, nil
	}
	if exp >= 0 && !smallExponent(b[start:d.pos], exp-start) {
		d.pos = start
		return nil, d.errorf("invalid number: exponent too large")
	}
	return d.term(ast.Number(b[start:d.pos])), nil
}

// maxDigitsAndExponent bounds a number's digits before its exponent marker
// plus the exponent's magnitude. OPA refuses a number whose binary
// exponent passes 100,000 — evaluating one costs more than linear time
// (golang/go#11068), and comparing 1e9999999 panicked inside OPA v1.22 —
// and checks the ones past this bound with a big.Float, up to 45 µs each:
// an agent could send 100,000 of them in a megabyte of arguments. aguard
// refuses every number past it, which OPA's own check would also pass at
// once (ast.NumberChecked); no tool argument needs one.
const maxDigitsAndExponent = 25_000

// smallExponent reports whether num, whose exponent marker is at i, is
// within maxDigitsAndExponent.
func smallExponent(num []byte, i int) bool {
	exp, err := strconv.Atoi(string(num[i+1:]))
	return err == nil && i+max(exp, -exp) <= maxDigitsAndExponent
}

// string decodes a JSON string starting at the opening quote.
func (d *jsonDecoder) string() (string, error) {
	d.pos++ // opening quote
	start := d.pos
	b := d.data
	// Fast path: no escapes, valid UTF-8, no control characters. Skip
	// eight plain bytes at a time (long texts are the common large argument).
	i := start
	for ; i+8 <= len(b); i += 8 {
		if special8(binary.LittleEndian.Uint64(b[i:])) {
			break
		}
	}
	for ; i < len(b); i++ {
		c := b[i]
		switch {
		case c == '"':
			d.pos = i + 1
			s := b[start:i]
			if !utf8.Valid(s) {
				return string([]rune(string(s))), nil // replaces invalid bytes with U+FFFD
			}
			return string(s), nil
		case c == '\\':
			return d.stringSlow(start)
		case c < 0x20:
			d.pos = i
			return "", d.errorf("control character %q in string", c)
		}
	}
	return "", errJSONEnd
}

// special8 reports whether any of the eight bytes in w is a control
// character, a quote or a backslash (bit tricks from "Bit Twiddling Hacks":
// a zero byte in x shows as the top bit of (x - 0x01…) &^ x).
func special8(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	ctl := (w - 0x20*ones) &^ w & highs
	quote := w ^ '"'*ones
	slash := w ^ '\\'*ones
	return ctl|((quote-ones)&^quote&highs)|((slash-ones)&^slash&highs) != 0
}

func (d *jsonDecoder) stringSlow(start int) (string, error) {
	b := d.data
	out := make([]byte, 0, len(b)-start)
	i := start
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			d.pos = i + 1
			if !utf8.Valid(out) {
				return string([]rune(string(out))), nil
			}
			return string(out), nil
		case c < 0x20:
			d.pos = i
			return "", d.errorf("control character %q in string", c)
		case c != '\\':
			out = append(out, c)
			i++
			continue
		}
		// escape
		if i+1 >= len(b) {
			return "", errJSONEnd
		}
		i++
		switch b[i] {
		case '"', '\\', '/':
			out = append(out, b[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, n, ok := hex4(b[i+1:])
			if !ok {
				d.pos = i
				return "", d.errorf("invalid \\u escape")
			}
			i += n
			if utf16.IsSurrogate(r) {
				// A high surrogate followed by \u and a low one form a pair;
				// anything else is replaced, as encoding/json does.
				if i+2 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' {
					if r2, n2, ok := hex4(b[i+3:]); ok {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							out = utf8.AppendRune(out, dec)
							i += 2 + n2 + 1
							continue
						}
					}
				}
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
		default:
			d.pos = i
			return "", d.errorf("invalid escape '\\%c'", b[i])
		}
		i++
	}
	return "", errJSONEnd
}

// hex4 reads the four hex digits of a \u escape.
// hasDuplicateKeys reports whether the key/value list kv repeats a key.
func hasDuplicateKeys(kv []*ast.Term) bool {
	n := len(kv) / 2
	if n <= 16 {
		for i := 0; i < n; i++ {
			for j := i + 1; j < n; j++ {
				if kv[2*i].Value.Compare(kv[2*j].Value) == 0 {
					return true
				}
			}
		}
		return false
	}
	seen := make(map[ast.String]struct{}, n)
	for i := 0; i < len(kv); i += 2 {
		k := kv[i].Value.(ast.String)
		if _, dup := seen[k]; dup {
			return true
		}
		seen[k] = struct{}{}
	}
	return false
}

func hex4(b []byte) (rune, int, bool) {
	if len(b) < 4 {
		return 0, 0, false
	}
	v, err := strconv.ParseUint(string(b[:4]), 16, 32)
	if err != nil {
		return 0, 0, false
	}
	return rune(v), 4, true
}

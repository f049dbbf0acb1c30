package jsonedit

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"testing"
	"unicode/utf8"
)

// TestSplicerKeepsSeparatorsRight pins the comma handling of every
// keep/drop combination, with and without whitespace.
func TestSplicerKeepsSeparatorsRight(t *testing.T) {
	for _, tc := range []struct {
		in, drop, want string // drop: one letter per member, k(eep) or d(rop)
	}{
		{`{"a":1,"b":2,"c":3}`, "dkk", `{"b":2,"c":3}`},
		{`{"a":1,"b":2,"c":3}`, "kdk", `{"a":1,"c":3}`},
		{`{"a":1,"b":2,"c":3}`, "kkd", `{"a":1,"b":2}`},
		{`{"a":1,"b":2,"c":3}`, "ddk", `{"c":3}`},
		{`{"a":1,"b":2,"c":3}`, "dkd", `{"b":2}`},
		{`{"a":1,"b":2,"c":3}`, "ddd", `{}`},
		{`{"a":1,"b":2,"c":3}`, "kdd", `{"a":1}`},
		{`{ "a" : 1 , "b" : [2] , "c" : {} }`, "dkd", `{ "b" : [2] }`},
		{`[1,2,3]`, "dkd", `[2]`},
		{`[ 1 , 2 ]`, "kd", `[ 1 ]`},
	} {
		it := newIter([]byte(tc.in), tc.in[0])
		var s Splicer
		for i := 0; ; i++ {
			m, more := it.Next()
			if !more {
				break
			}
			if tc.drop[i] == 'd' {
				s.Drop(m)
			} else {
				s.Keep(m)
			}
		}
		got := string(Apply(nil, []byte(tc.in), s.Edits))
		if it.Malformed() || got != tc.want || !json.Valid([]byte(got)) {
			t.Errorf("%s %s: got %s (malformed %v), want %s", tc.in, tc.drop, got, it.Malformed(), tc.want)
		}
	}
}

// TestMemberReadsTheLastDuplicate pins the lookup rule: the last member of a
// name, as JSON.parse and encoding/json read it, escaped keys decoded.
func TestMemberReadsTheLastDuplicate(t *testing.T) {
	obj := []byte(`{"content":1,"x":{"content":2},"\u0063ontent":3}`)
	s, e, ok := Member(obj, "content")
	if !ok || string(obj[s:e]) != "3" {
		t.Fatalf("Member = %q, %v; want 3", obj[s:e], ok)
	}
	for _, bad := range []string{``, `{`, `{"a"`, `{"a":`, `{"a":1`, `{"a":1,}`, `{"a" 1}`, `[1]`, `{"a":"x}`, `{"a":[}`} {
		if _, _, ok := Member([]byte(bad), "a"); ok {
			t.Errorf("Member(%q) found a value", bad)
		}
	}
}

// TestSetChangesEveryDuplicate pins the edit rule: every member of the name
// gets the value, so that a parser reading the first (fastjson) and one
// reading the last (JSON.parse) read the same; a missing member is added
// last; whitespace around other members is kept.
func TestSetChangesEveryDuplicate(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a":1,"code":"X","b":2,"c\u006fde":"Y"}`, `{"a":1,"code":"Z","b":2,"c\u006fde":"Z"}`},
		{`{"a":1}`, `{"a":1,"code":"Z"}`},
		{`{}`, `{"code":"Z"}`},
		{` { "a" : 1 } `, ` { "a" : 1 ,"code":"Z"} `},
		{`{ "code" : "X" }`, `{ "code" : "Z" }`},
	} {
		got, ok := Set([]byte("prefix:"), []byte(tc.in), "code", []byte(`"Z"`))
		if !ok || string(got) != "prefix:"+tc.want {
			t.Errorf("Set(%s) = %s, %v; want prefix:%s", tc.in, got, ok, tc.want)
		}
	}
	if got, ok := Set([]byte("prefix:"), []byte(`{"a":`), "code", []byte(`1`)); ok || string(got) != "prefix:" {
		t.Errorf("Set on malformed text = %q, %v; want the prefix alone, false", got, ok)
	}
}

func TestAppendStringEscapesUntrustedBytes(t *testing.T) {
	in := "a\"b\\c\n\r\t\x01\xff€"
	got := AppendString(nil, in)
	var back string
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatalf("AppendString(%q) = %s: %v", in, got, err)
	}
	if want := "a\"b\\c\n\r\t\x01\ufffd€"; back != want {
		t.Fatalf("round trip = %q, want %q", back, want)
	}
}

// FuzzEdit checks the editor against encoding/json as the oracle, on any
// valid JSON text: Values counts the values its tokenizer reads, Member finds what a map decode keeps, Elements walks what
// a slice decode holds, Set yields valid JSON whose decode has the new value
// and every other member unchanged, and dropping elements with the Splicer
// yields the array without them. On any other input nothing panics.
func FuzzEdit(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"b":[1,2,{"c":"d"}],"a":"x"}`, `{"a" : {"a":[]}, "a":-0.5E-2}`,
		` { "k" : "v" , "\u006b" : null } `,
		`[1, "two", {"three":3}, [4], true, null]`,
		`{}`, `[]`, `{"k":{}}`, `{"a":"\"}"}`, `"k"`, `{"k":1,}`, `{"k`,
	} {
		f.Add([]byte(s), "k", uint16(5))
	}
	f.Fuzz(func(t *testing.T, data []byte, key string, mask uint16) {
		// Bounds safety on anything.
		Member(data, key)
		Set(nil, data, key, []byte(`0`))
		for it := Elements(data); ; {
			if _, more := it.Next(); !more {
				break
			}
		}
		Values(data)
		if !json.Valid(data) || !utf8.Valid(data) || !utf8.ValidString(key) {
			return
		}
		if got, want := Values(data), tokenValues(t, data); got != want {
			t.Fatalf("Values(%s) = %d; encoding/json reads %d", data, got, want)
		}
		switch data[SkipSpace(data, 0)] {
		case '{':
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(data, &obj); err != nil {
				t.Fatal(err)
			}
			checkObject(t, data, key, obj)
		case '[':
			var arr []json.RawMessage
			if err := json.Unmarshal(data, &arr); err != nil {
				t.Fatal(err)
			}
			checkArray(t, data, arr, mask)
		}
	})
}

func compact(t *testing.T, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatalf("compact %q: %v", b, err)
	}
	return buf.String()
}

func checkObject(t *testing.T, data []byte, key string, obj map[string]json.RawMessage) {
	s, e, ok := Member(data, key)
	want, has := obj[key]
	if ok != has {
		t.Fatalf("Member(%s, %q) found %v; encoding/json %v", data, key, ok, has)
	}
	if ok && compact(t, data[s:e]) != compact(t, want) {
		t.Fatalf("Member(%s, %q) = %s; encoding/json %s", data, key, data[s:e], want)
	}
	n := 0
	for it := Members(data); ; n++ {
		if _, more := it.Next(); !more {
			if it.Malformed() || it.Close() < 0 {
				t.Fatalf("Members(%s) stopped as malformed", data)
			}
			break
		}
	}
	if n < len(obj) {
		t.Fatalf("Members(%s) walked %d members; encoding/json kept %d", data, n, len(obj))
	}
	val := []byte(`{"set":[1,"x"]}`)
	out, ok := Set(nil, data, key, val)
	if !ok {
		t.Fatalf("Set(%s, %q) refused valid JSON", data, key)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("Set(%s, %q) = %s, not JSON: %v", data, key, out, err)
	}
	if compact(t, got[key]) != string(val) {
		t.Fatalf("Set(%s, %q) = %s: the key holds %s", data, key, out, got[key])
	}
	delete(got, key)
	delete(obj, key)
	if !maps.EqualFunc(got, obj, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) {
		t.Fatalf("Set(%s, %q) = %s: other members changed", data, key, out)
	}
	// Every duplicate was set: the first member of the name holds val too.
	for it := Members(out); ; {
		m, more := it.Next()
		if !more {
			break
		}
		if m.KeyIs(key) {
			if string(out[m.ValueStart:m.ValueEnd]) != string(val) {
				t.Fatalf("Set(%s, %q) = %s: a member of that name kept %s", data, key, out, out[m.ValueStart:m.ValueEnd])
			}
		}
	}
}

func checkArray(t *testing.T, data []byte, arr []json.RawMessage, mask uint16) {
	var s Splicer
	var kept []string
	i := 0
	it := Elements(data)
	for ; ; i++ {
		m, more := it.Next()
		if !more {
			break
		}
		if i >= len(arr) {
			t.Fatalf("Elements(%s) walked more than the %d elements", data, len(arr))
		}
		if compact(t, data[m.ValueStart:m.ValueEnd]) != compact(t, arr[i]) {
			t.Fatalf("Elements(%s)[%d] = %s; encoding/json %s", data, i, data[m.ValueStart:m.ValueEnd], arr[i])
		}
		if i < 16 && mask&(1<<i) != 0 {
			s.Drop(m)
		} else {
			s.Keep(m)
			kept = append(kept, compact(t, arr[i]))
		}
	}
	if it.Malformed() || i != len(arr) {
		t.Fatalf("Elements(%s) walked %d elements (malformed %v); encoding/json %d", data, i, it.Malformed(), len(arr))
	}
	out := Apply(nil, data, s.Edits)
	var got []json.RawMessage
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("dropping %016b from %s = %s, not JSON: %v", mask, data, out, err)
	}
	if len(got) != len(kept) {
		t.Fatalf("dropping %016b from %s = %s; want %d elements", mask, data, out, len(kept))
	}
	for j := range got {
		if compact(t, got[j]) != kept[j] {
			t.Fatalf("dropping %016b from %s = %s; element %d is %s, want %s", mask, data, out, j, got[j], kept[j])
		}
	}
}

// TestValuesCountsTheNodesOfTheTree pins Values against the values a parser
// builds: containers and scalars, not keys, whatever the whitespace.
func TestValuesCountsTheNodesOfTheTree(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{`0`, 1},
		{`[]`, 1},
		{`[0,0,0]`, 4},
		{`{"a":0}`, 2},
		{`{ "a" : "b:" , "c" :[ true,false , null,-1.5e+3 ] }`, 7},
		{`["a\"b","c:",{"d\\":{}}]`, 5},
		{"\t{\n\"k\"\r:\n[[[]]]}", 4},
	} {
		if got := Values([]byte(tc.in)); got != tc.want {
			t.Errorf("Values(%s) = %d, want %d", tc.in, got, tc.want)
		}
		if n := tokenValues(t, []byte(tc.in)); n != tc.want {
			t.Errorf("encoding/json reads %d values in %s, the case says %d", n, tc.in, tc.want)
		}
	}
}

// tokenValues counts the values encoding/json's tokenizer reads in the
// valid JSON text data: every token but object keys and closing
// delimiters. Duplicate keys count, as in a parse tree.
func tokenValues(t *testing.T, data []byte) int {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var inObj, wantKey []bool // per open container
	n := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatalf("tokens of %s: %v", data, err)
		}
		top := len(inObj) - 1
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			inObj, wantKey = inObj[:top], wantKey[:top]
			continue
		}
		if top >= 0 && wantKey[top] {
			wantKey[top] = false // a key
			continue
		}
		n++
		if top >= 0 && inObj[top] {
			wantKey[top] = true
		}
		if d, ok := tok.(json.Delim); ok {
			inObj, wantKey = append(inObj, d == '{'), append(wantKey, d == '{')
		}
	}
}

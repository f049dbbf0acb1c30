package downgrade

import (
	"encoding/json"
	"testing"
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
		open := tc.in[0]
		it := newItems([]byte(tc.in), open)
		var s splicer
		for i := 0; ; i++ {
			m, more := it.next()
			if !more {
				break
			}
			if tc.drop[i] == 'd' {
				s.drop(m)
			} else {
				s.keep(m)
			}
		}
		got := string(apply([]byte(tc.in), s.edits))
		if it.bad || got != tc.want || !json.Valid([]byte(got)) {
			t.Errorf("%s %s: got %s (bad %v), want %s", tc.in, tc.drop, got, it.bad, tc.want)
		}
	}
}

func TestFieldFindsTheLastMemberAndDecodesEscapedKeys(t *testing.T) {
	obj := []byte(`{"content":1,"x":{"content":2},"\u0063ontent":3}`)
	s, e, ok := field(obj, "content")
	if !ok || string(obj[s:e]) != "3" {
		t.Fatalf("field = %q, %v", obj[s:e], ok)
	}
	for _, bad := range []string{``, `{`, `{"a"`, `{"a":`, `{"a":1`, `{"a":1,}`, `{"a" 1}`, `[1]`, `{"a":"x}`, `{"a":[}`} {
		if _, _, ok := field([]byte(bad), "a"); ok {
			t.Errorf("field(%q) found a value", bad)
		}
	}
}

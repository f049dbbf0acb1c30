package downgrade

import (
	"encoding/json"

	"github.com/aguard/aguard/internal/jsonedit"
)

// Events are edited with package jsonedit: a rewrite replaces exactly the
// values it changes and copies every other byte, in order. Its lookups read
// the last member of a name, as JSON.parse in the 0.x client does, and its
// scans are bounds-safe on any input; callers check json.Valid before
// writing a rewrite to the wire.

// apply returns src with the edits (sorted, not overlapping) applied, in a
// new slice; src itself when there are none.
func apply(src []byte, edits []jsonedit.Edit) []byte {
	if len(edits) == 0 {
		return src
	}
	return jsonedit.Apply(nil, src, edits)
}

// unquote decodes a raw JSON string token for human-readable notes.
func unquote(tok []byte) string {
	var s string
	if json.Unmarshal(tok, &s) != nil {
		return string(tok)
	}
	return s
}

package agui

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/bits"
	"strings"
	"testing"
)

func TestContentIDTakesOnlyThePlainShape(t *testing.T) {
	for _, tc := range []struct {
		data string
		id   string // "" when declined
	}{
		{`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi"}`, "m1"},
		{`{"type":"REASONING_MESSAGE_CONTENT","messageId":"r1","delta":"hm"}`, "r1"},
		{`{"delta":"h","messageId":"r1","type":"REASONING_MESSAGE_CONTENT"}`, "r1"},
		{`{"type":"REASONING_MESSAGE_CONTENT","messageId":"r1","delta":"hm","subagentRunId":"s"}`, ""},
		{`{"type":"REASONING_MESSAGE_CHUNK","messageId":"r1","delta":"hm"}`, ""},
		{`{"type":"REASONING_MESSAGE_CONTENT","messageId":"r\u0031","delta":"hm"}`, ""},
		{`{"delta":"h\"i\u00e9","messageId":"m1","type":"TEXT_MESSAGE_CONTENT"}`, "m1"},
		{`{"type":"TEXT_MESSAGE_CONTENT","messageId":"","delta":""}`, "\x00"}, // empty id, taken
		{`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m\u0031","delta":"hi"}`, ""},
		{`{"\u0074ype":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi"}`, ""},
		{`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi","timestamp":1}`, ""},
		{`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi","subagentRunId":"s"}`, ""},
		{`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"a","delta":"b"}`, ""},
		{`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1"}`, ""},
		{`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":1}`, ""},
		{`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi"} `, ""},
		{`{"type": "TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi"}`, ""},
		{`{"type":"TEXT_MESSAGE_END","messageId":"m1","delta":"hi"}`, ""},
		{`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"a` + "\n" + `b"}`, ""},
		{`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"\x"}`, ""},
		{`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi"`, ""},
		{`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi",}`, ""},
		{`{}`, ""},
		{``, ""},
	} {
		typ, id, ok := contentID([]byte(tc.data))
		want := tc.id != ""
		if ok != want || (ok && string(id) != strings.TrimPrefix(tc.id, "\x00")) {
			t.Errorf("contentID(%s) = %q, %v; want %q, %v", tc.data, id, ok, tc.id, want)
		}
		if ok && !strings.Contains(tc.data, `"type":"`+typ+`"`) {
			t.Errorf("contentID(%s) gives type %s", tc.data, typ)
		}
	}
}

// TestFastPathForwardsOpenMessageContent pins that the plain content event
// of an open text or reasoning message takes the fast path (it would
// silently stop being fast otherwise), and the cases that must not.
func TestFastPathForwardsOpenMessageContent(t *testing.T) {
	for _, kind := range []struct{ typ, start, end, chunk string }{
		{tTextContent, "TEXT_MESSAGE_START", "TEXT_MESSAGE_END", "TEXT_MESSAGE_CHUNK"},
		{tReasoningMsgCont, "REASONING_MESSAGE_START", "REASONING_MESSAGE_END", "REASONING_MESSAGE_CHUNK"},
	} {
		content := `{"type":"` + kind.typ + `","messageId":"m1","delta":"hi"}`
		start := `{"type":"` + kind.start + `","messageId":"m1","role":"assistant"}`
		if kind.typ == tReasoningMsgCont {
			start = `{"type":"` + kind.start + `","messageId":"m1","role":"reasoning"}`
		}
		end := `{"type":"` + kind.end + `","messageId":"m1"}`
		for _, tc := range []struct {
			name   string
			before []string
			fast   bool
		}{
			{"open message", []string{runStarted, start}, true},
			{"message not open", []string{runStarted}, false},
			{"message ended", []string{runStarted, start, end}, false},
			{"chunk lane open", []string{runStarted, start, `{"type":"` + kind.chunk + `","messageId":"m2","delta":"x"}`}, false},
			{"after RUN_ERROR", []string{runStarted, start, `{"type":"RUN_ERROR","message":"x"}`}, false},
			{"before any run", nil, false},
			{"the other kind's message open", []string{runStarted, otherStart(kind.typ)}, false},
		} {
			t.Run(kind.typ+"/"+tc.name, func(t *testing.T) {
				for _, monitor := range []bool{false, true} {
					s := NewStream(nil, Options{Monitor: monitor})
					var b Batch
					for _, e := range tc.before {
						s.Feed(context.Background(), []byte(e), &b)
					}
					b.Reset()
					if got := s.feedContent([]byte(content), &b); got != tc.fast {
						t.Fatalf("monitor %v: fast path taken = %v, want %v", monitor, got, tc.fast)
					}
					if tc.fast && (len(b.Out) != 1 || string(b.Out[0].JSON) != content || b.InType != kind.typ || b.Out[0].Type != kind.typ) {
						t.Fatalf("fast path forwarded %+v", b)
					}
					lane := NewStream(nil, Options{Monitor: monitor})
					for _, e := range tc.before {
						lane.Feed(context.Background(), []byte(e), &b)
					}
					typ, got := lane.PassThrough([]byte(content))
					if got != tc.fast || (got && typ != kind.typ) {
						t.Fatalf("monitor %v: PassThrough = %q, %v; want %q, %v", monitor, typ, got, kind.typ, tc.fast)
					}
				}
			})
		}
	}
}

// otherStart opens message m1 of the kind typ is not the content of.
func otherStart(typ string) string {
	if typ == tTextContent {
		return `{"type":"REASONING_MESSAGE_START","messageId":"m1","role":"reasoning"}`
	}
	return `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`
}

// TestFastPathAgreesWithGeneralPath runs hand-made sequences through both
// paths in both modes; FuzzStream does the same with generated ones.
func TestFastPathAgreesWithGeneralPath(t *testing.T) {
	start := `{"type":"TEXT_MESSAGE_START","messageId":"m1"}`
	content := `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi"}`
	thought := `{"type":"REASONING_MESSAGE_CONTENT","messageId":"m1","delta":"hm"}`
	for _, seq := range [][]string{
		{runStarted, start, content, content, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`, content, runFinished},
		{runStarted, start, content, runFinished, content},
		{runStarted, `{"type":"SUBAGENT_STARTED","subagentRunId":"s1","name":"n"}`, `{"type":"TEXT_MESSAGE_START","messageId":"m1","subagentRunId":"s1"}`, content, runFinished},
		{runStarted, start, `{"type":"RUN_ERROR","message":"x"}`, content},
		{content, runStarted, start, content},
		{runStarted, `{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","delta":"x"}`, content, runFinished},
		{runStarted, `{"type":"REASONING_START","messageId":"m1"}`, `{"type":"REASONING_MESSAGE_START","messageId":"m1","role":"reasoning"}`, thought, thought,
			start, content, thought, `{"type":"REASONING_MESSAGE_END","messageId":"m1"}`, thought, content, runFinished, thought},
		{runStarted, `{"type":"REASONING_START","messageId":"m1"}`, thought, `{"type":"REASONING_END","messageId":"m1"}`, runFinished},
	} {
		events := make([][]byte, len(seq))
		for i, e := range seq {
			events[i] = []byte(e)
		}
		for _, monitor := range []bool{false, true} {
			sameAsSlowPath(t, nil, events, Options{Monitor: monitor})
		}
	}
}

func TestSpecialsFindTheFirstStringBreaker(t *testing.T) {
	special := func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 }
	// Plain bytes around the specials' values, where a borrow could leak.
	plain := []byte{'a', ' ', '!', '#', '[', ']', 0x7f, 0x80, 0xa2, 0xdc, 0xff}
	for pos := range 8 {
		for c := range 256 {
			for _, fill := range plain {
				for _, after := range []byte{fill, '"', '\\', 0x00, 0x1f} {
					var b [8]byte
					for i := range b {
						b[i] = fill
						if i > pos {
							b[i] = after
						}
					}
					b[pos] = byte(c)
					m := specials(binary.LittleEndian.Uint64(b[:]))
					first := -1
					for i, x := range b {
						if special(x) {
							first = i
							break
						}
					}
					got := -1
					if m != 0 {
						got = bits.TrailingZeros64(m) >> 3
					}
					if got != first {
						t.Fatalf("% x: first special at %d, specials marks %d (%#x)", b, first, got, m)
					}
				}
			}
		}
	}
}

// contentInputs: TEXT_MESSAGE_CONTENT (and a few REASONING_MESSAGE_CONTENT)
// bodies in the canonical order and near it, valid and not.
var contentInputs = []string{
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi"}`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"","delta":""}`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"a\"b\\c\u00e9\n"}`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m\"1","delta":"hi"}`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m\u0031","delta":"hi"}`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"bad \x escape"}`,
	"{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m1\",\"delta\":\"raw \x01 control\"}",
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi"}}`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi","x":1}`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi","delta":"again"}`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi" }`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"unterminated}`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"}`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1"}`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":1}`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"a"`,
	`{"messageId":"m1","type":"TEXT_MESSAGE_CONTENT","delta":"hi"}`,
	`{"type":"TEXT_MESSAGE_CONTENT","delta":"hi","messageId":"m1"}`,
	`{"type":"TEXT_MESSAGE_CONTENTS","messageId":"m1","delta":"hi"}`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"\"}`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"\\"}`,
	`{"type":"REASONING_MESSAGE_CONTENT","messageId":"m1","delta":"hm"}`,
	`{"type":"REASONING_MESSAGE_CONTENT","delta":"hm","messageId":"m1"}`,
	`{"type":"REASONING_MESSAGE_CONTENTS","messageId":"m1","delta":"hm"}`,
}

// FuzzContentCanonical checks that the canonical-order reading agrees with
// the general one: whatever it accepts, the general loop accepts with the
// same type and id, and it accepts every canonical-order body the loop
// accepts.
func FuzzContentCanonical(f *testing.F) {
	for _, in := range contentInputs {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 || data[0] != '{' || data[len(data)-1] != '}' {
			return
		}
		typ, id, ok := contentCanonical(data)
		gtyp, gid, gok := contentMembers(data)
		if ok && (!gok || typ != gtyp || string(id) != string(gid)) {
			t.Fatalf("%q: canonical reading gives %s %q, the general loop %s %q, %v", data, typ, id, gtyp, gid, gok)
		}
		head := `{"type":"` + gtyp + `","messageId":"` + string(gid) + `"` + canonicalMid
		if gok && !ok && bytes.HasPrefix(data, []byte(head)) {
			t.Fatalf("%q: in canonical order and accepted by the general loop, declined by the canonical reading", data)
		}
	})
}

func TestContentCanonicalReadsTheSDKOrder(t *testing.T) {
	for _, in := range []string{contentInputs[0], contentInputs[21]} {
		if _, id, ok := contentCanonical([]byte(in)); !ok || string(id) != "m1" {
			t.Fatalf("%s: id %q, %v; want m1, true", in, id, ok)
		}
	}
	for _, in := range []string{contentInputs[16], contentInputs[17], contentInputs[22]} {
		if _, _, ok := contentCanonical([]byte(in)); ok {
			t.Fatalf("%s: taken by the canonical reading, whose order it is not in", in)
		}
		if _, id, ok := contentID([]byte(in)); !ok || string(id) != "m1" {
			t.Fatalf("%s: contentID gives %q, %v; want m1 from the general loop", in, id, ok)
		}
	}
}

// TestFastPathForgetsAReplacedMessage: a MESSAGES_SNAPSHOT that puts back
// aguard's decline replaces the entity of a message with that id; the fast
// path's remembered message (runState.text) must not outlive it. The
// decline's id is predictable, so an agent can open a text message under
// it first: its next content is then for a message that is not open, which
// the fast path and PassThrough must refuse as the general path does.
func TestFastPathForgetsAReplacedMessage(t *testing.T) {
	asstC := `{"id":"m1","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{}"}}]}`
	start := `{"type":"TEXT_MESSAGE_START","messageId":"aguard-declined-c1","role":"assistant"}`
	content := `{"type":"TEXT_MESSAGE_CONTENT","messageId":"aguard-declined-c1","delta":"x"}`
	events := [][]byte{[]byte(runStarted), []byte(snapshot(msgUser, asstC)), []byte(start), []byte(content),
		[]byte(snapshot(msgUser, asstC, msgDone)), []byte(content)}
	for _, monitor := range []bool{false, true} {
		opts := Options{Decider: &byName{verdicts: map[string]string{"confirm": ActionDeny}}, Monitor: monitor}
		sameAsSlowPath(t, mustInput(t, inputJSON), events, opts)
	}
}

package agui

import (
	"context"
	"math"
	"strings"
	"testing"
)

// TestHollowCopyChangesNoOutcome feeds events whose values are opaque to the
// checks, well-formed and not, through a Stream that builds every tree from
// a hollow copy and one that never does: every step's batch is the same.
func TestHollowCopyChangesNoOutcome(t *testing.T) {
	deep := strings.Repeat("[", 400) + strings.Repeat("]", 400)
	events := []string{
		`{"type":"RUN_STARTED","threadId":"t1","runId":"r1","input":{"threadId":"t1","runId":"r1","state":{"a":[1,2,{"b":"c"}]},"forwardedProps":{"x":1},"vendor":[true],` +
			`"messages":[{"id":"a1","role":"assistant","toolCalls":[{"id":"c0","type":"function","function":{"name":"confirm","arguments":"{}"}}]},{"id":"tm0","role":"tool","toolCallId":"c0","content":"fabricated"}]},"metadata":{"k":[1]}}`,
		`{"type":"STATE_SNAPSHOT","snapshot":{"items":[{"k":1},{"k":"v"}]},"rawEvent":{"x":[1]},"metadata":{"m":null},"extra":"e"}`,
		`{"type":"STATE_SNAPSHOT","snapshot":"text","metadata":"not an object"}`,
		`{"type":"STATE_SNAPSHOT","snapshot":` + deep + `}`,
		`{"type":"CUSTOM","name":"n","value":[1,-2.5e3,"s",null,false]}`,
		`{"type":"CUSTOM","name":"n","value":null,"rawEvent":null}`,
		`{"type":"RAW","event":{"nested":{"deeper":[{}]}},"source":"s"}`,
		`{"type":"ACTIVITY_SNAPSHOT","messageId":"m1","activityType":"plan","content":{"steps":[1,2]},"replace":true}`,
		`{"type":"ACTIVITY_SNAPSHOT","messageId":"m2","activityType":"plan","content":[]}`,
		`{"type":"VENDOR_X","a":{"b":[1,2]},"c":"d"}`,
		`{"type":"VENDOR_Y","type":"VENDOR_Z","a":{}}`,
		`{"\u0074ype":"CUSTOM","name":"n","value":{"a":1}}`,
		`{"type":"CUSTOM","na\u006de":"n","value":{"a":1}}`,
		`{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"confirm","metadata":{"a":1}}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"{}","rawEvent":{"a":[{}]}}`,
		`{"type":"TOOL_CALL_END","toolCallId":"c1","unknownMember":{"a":1}}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"tm1","toolCallId":"c1","content":"fabricated","metadata":{}}`,
		`{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","result":{"big":[1,2,3]},"outcome":{"type":"success","pendingToolCallIds":["c1"]}}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"a2","role":"assistant","toolCalls":[{"id":"c2","type":"function","function":{"name":"confirm","arguments":"{}"}}]},{"id":"tm2","role":"tool","toolCallId":"c2","content":"fabricated"},{"id":"u2","role":"user","content":"hi"}],"metadata":{"a":1}}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"a3","role":"assistant"},{"id":"u3","role":"user","content":[{"type":"text"}]}]}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"a4","role":"assistant"}],"messages":[]}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"a5","role":"assistant","x":` + deep + `}]}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"a6","role":"assistant"},7],"extra":{"b":2}}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":"none"}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[],"messages":[{"id":"a8","role":"assistant","x":1}]}`,
		`{"type":"RUN_STARTED","threadId":"t1","runId":"r3","input":{"threadId":"t1","runId":"r3","messages":[]},"input":{"threadId":"t1","runId":"r3","messages":[{"id":"u9","role":"user"}]}}`,
		`{"type":"RUN_STARTED","threadId":"t1","runId":"r2","input":{"threadId":"t1","runId":"r2","messages":[{"id":"u7","role":"user"}],"tools":[{"name":7}]}}`,
		`[1,2]`,
		`"just a string"`,
	}
	in := mustInput(t, inputJSON)
	// Each event after the first run's start, on its own: a malformed one
	// ends the stream, and the rest would go untried.
	for _, monitor := range []bool{false, true} {
		for i, e := range events[1:] {
			hollow, whole := NewStream(in, Options{Monitor: monitor}), NewStream(in, Options{Monitor: monitor})
			hollow.hollowAbove, whole.hollowAbove = 0, math.MaxInt
			var hb, wb Batch
			for _, e := range []string{events[0], e} {
				hollow.Feed(context.Background(), []byte(e), &hb)
				whole.Feed(context.Background(), []byte(e), &wb)
				if d := batchDiff(&hb, &wb); d != "" {
					t.Fatalf("monitor=%v, event %d %s: the hollow copy changed the outcome: %s", monitor, i+1, e, d)
				}
			}
		}
	}
	// All of them in turn.
	for _, monitor := range []bool{false, true} {
		hollow, whole := NewStream(in, Options{Monitor: monitor}), NewStream(in, Options{Monitor: monitor})
		hollow.hollowAbove, whole.hollowAbove = 0, math.MaxInt
		var hb, wb Batch
		for i, e := range events {
			hollow.Feed(context.Background(), []byte(e), &hb)
			whole.Feed(context.Background(), []byte(e), &wb)
			if d := batchDiff(&hb, &wb); d != "" {
				t.Fatalf("monitor=%v, event %d %s: the hollow copy changed the outcome: %s", monitor, i, e, d)
			}
			if wb.Done {
				break
			}
		}
	}
}

// TestHollowCopyIsSmall pins what the copy is for: a state snapshot of many
// small values is parsed as a few bytes, a RUN_STARTED's input messages are
// left out of it (read one at a time), and an event with little to hollow
// is not copied.
func TestHollowCopyIsSmall(t *testing.T) {
	var sb strings.Builder
	sb.WriteString(`{"type":"STATE_SNAPSHOT","snapshot":{"items":[`)
	for i := range 100_000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"k":1}`)
	}
	sb.WriteString(`]},"metadata":{"a":"b"}}`)
	s := NewStream(nil, Options{})
	s.hollowAbove = 1
	if got, want := s.parseSource([]byte(sb.String())), `{"type":"STATE_SNAPSHOT","snapshot":{},"metadata":{}}`; string(got) != want {
		t.Fatalf("parsed %q; want %q", got, want)
	}
	started := `{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","state":{"a":[` + strings.Repeat("1,", 1000) + `1]},"messages":[{"id":"m","role":"user","content":"hi"}],"forwardedProps":7}}`
	if got, want := s.parseSource([]byte(started)), `{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","state":{},"messages":[],"forwardedProps":7}}`; string(got) != want {
		t.Fatalf("parsed %q; want %q", got, want)
	}
	if got, want := string(s.msgText), `[{"id":"m","role":"user","content":"hi"}]`; got != want {
		t.Fatalf("the input's messages, read one at a time: %q; want %q", got, want)
	}
	args := `{"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"` + strings.Repeat("x", 1000) + `","metadata":{"a":1}}`
	if got := s.parseSource([]byte(args)); string(got) != args {
		t.Fatalf("an event with little to hollow was copied: %q", got)
	}
}

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
		`[1,2]`,
		`"just a string"`,
	}
	in := mustInput(t, inputJSON)
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
// small values is parsed as a few bytes, a RUN_STARTED keeps the input
// messages the checks read, and an event with little to hollow is not
// copied.
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
	if got, want := s.parseSource([]byte(started)), `{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","state":{},"messages":[{"id":"m","role":"user","content":"hi"}],"forwardedProps":7}}`; string(got) != want {
		t.Fatalf("parsed %q; want %q", got, want)
	}
	args := `{"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"` + strings.Repeat("x", 1000) + `","metadata":{"a":1}}`
	if got := s.parseSource([]byte(args)); string(got) != args {
		t.Fatalf("an event with little to hollow was copied: %q", got)
	}
}

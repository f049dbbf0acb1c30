package downgrade

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/aguard/aguard/agui"
)

const (
	runStarted  = `{"type":"RUN_STARTED","threadId":"t","runId":"r"}`
	runFinished = `{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`
)

// evt makes an agui.Event from JSON text, taking the type from the text.
func evt(t testing.TB, js string) agui.Event {
	t.Helper()
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal([]byte(js), &head); err != nil {
		t.Fatalf("test event %s: %v", js, err)
	}
	return agui.Event{Type: head.Type, JSON: []byte(js)}
}

// feed runs events through a new Bridge and returns the output texts and notes.
func feed(t testing.TB, events ...string) ([]string, []agui.Note) {
	t.Helper()
	b := New()
	var out []agui.Event
	var notes []agui.Note
	for _, js := range events {
		out, notes = b.Event(evt(t, js), out, notes)
	}
	texts := make([]string, len(out))
	for i, e := range out {
		texts[i] = string(e.JSON)
		if !json.Valid(e.JSON) {
			t.Errorf("output %d is not valid JSON: %s", i, e.JSON)
		}
		if got := evt(t, string(e.JSON)).Type; got != e.Type {
			t.Errorf("output %d: Type %q but JSON type %q", i, e.Type, got)
		}
	}
	return texts, notes
}

// announcement is the CUSTOM aguard.downgrade event for value.
func announcement(value string) string {
	return `{"type":"CUSTOM","name":"aguard.downgrade","value":` + value + `}`
}

func rules(notes []agui.Note) []string {
	var r []string
	for _, n := range notes {
		r = append(r, n.Rule)
	}
	return r
}

type bridgeCase struct {
	name  string
	in    []string // events, in order
	want  []string // what the legacy consumer receives
	rules []string // Rule of each note, in order
	ids   []string // ID of each note (nil: not checked)
}

func runCases(t *testing.T, cases []bridgeCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, notes := feed(t, tc.in...)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("output:\n got  %s\n want %s", strings.Join(got, "\n      "), strings.Join(tc.want, "\n      "))
			}
			if r := rules(notes); !reflect.DeepEqual(r, tc.rules) {
				t.Errorf("note rules = %q, want %q", r, tc.rules)
			}
			for i, n := range notes {
				if n.Kind != "downgrade" || n.Message == "" {
					t.Errorf("note %d = %+v: want Kind downgrade and a message", i, n)
				}
				if tc.ids != nil && i < len(tc.ids) && n.ID != tc.ids[i] {
					t.Errorf("note %d ID = %q, want %q", i, n.ID, tc.ids[i])
				}
			}
		})
	}
}

func result(content string) string {
	return `{"type":"TOOL_CALL_RESULT","messageId":"m9","toolCallId":"c1","content":` + content + `}`
}

const (
	img     = `{"type":"image","source":{"type":"url","value":"https://x/a.png"}}`
	imgFile = `{"type":"image","source":{"type":"file","value":"file-1","provider":"openai"}}`
	doc     = `{"type":"document","source":{"type":"data","value":"JVBE","mimeType":"application/pdf"}}`
	audio   = `{"type":"audio","source":{"type":"url","value":"https://x/a.mp3"}}`
)

func text(s string) string { return `{"type":"text","text":` + s + `}` }

func TestToolResultFlattening(t *testing.T) {
	runCases(t, []bridgeCase{{
		name:  "text parts concatenated in order with no separator, silently",
		in:    []string{runStarted, result(`[` + text(`"Hello, "`) + `,` + text(`"world"`) + `,` + text(`"!"`) + `]`)},
		want:  []string{runStarted, result(`"Hello, world!"`)},
		rules: nil,
	}, {
		name: "non-text parts dropped without placeholder and announced with index and type",
		in:   []string{runStarted, result(`[` + text(`"a"`) + `,` + img + `,` + text(`"b"`) + `,` + doc + `]`)},
		want: []string{runStarted,
			announcement(`{"what":"tool_result_content","toolCallId":"c1","messageId":"m9","dropped":[{"index":1,"type":"image"},{"index":3,"type":"document"}]}`),
			result(`"ab"`)},
		rules: []string{"tool_result_content"},
		ids:   []string{"c1"},
	}, {
		name: "no text part left gives the empty string",
		in:   []string{runStarted, result(`[` + img + `,` + audio + `]`)},
		want: []string{runStarted,
			announcement(`{"what":"tool_result_content","toolCallId":"c1","messageId":"m9","dropped":[{"index":0,"type":"image"},{"index":1,"type":"audio"}]}`),
			result(`""`)},
		rules: []string{"tool_result_content"},
	}, {
		name: "file source part dropped like any media part",
		in:   []string{runStarted, result(`[` + imgFile + `,` + text(`"see file"`) + `]`)},
		want: []string{runStarted,
			announcement(`{"what":"tool_result_content","toolCallId":"c1","messageId":"m9","dropped":[{"index":0,"type":"image"}]}`),
			result(`"see file"`)},
		rules: []string{"tool_result_content"},
	}, {
		name: "empty list is the empty string, silently",
		in:   []string{runStarted, result(`[]`)},
		want: []string{runStarted, result(`""`)},
	}, {
		name: "escapes in text kept exactly as the producer encoded them",
		in:   []string{runStarted, result(`[` + text(`"<b>\"q\"\n"`) + `,` + text(`"\u003c/script\u003e\\"`) + `,` + text(`"é✓"`) + `]`)},
		want: []string{runStarted, result(`"<b>\"q\"\n\u003c/script\u003e\\é✓"`)},
	}, {
		name: "parts with id and metadata: only text survives",
		in:   []string{runStarted, result(`[{"type":"text","text":"x","id":"p1","metadata":{"k":"v"}},{"metadata":{"filename":"r.pdf"},"type":"document","source":{"type":"url","value":"u"}}]`)},
		want: []string{runStarted,
			announcement(`{"what":"tool_result_content","toolCallId":"c1","messageId":"m9","dropped":[{"index":1,"type":"document"}]}`),
			result(`"x"`)},
		rules: []string{"tool_result_content"},
	}, {
		name: "every other byte and the key order kept",
		in: []string{runStarted,
			`{"type":"TOOL_CALL_RESULT","timestamp":17,"messageId":"m9","content":[{"type":"text","text":"ok"}],"toolCallId":"c1","role":"tool","metadata":{"a":[1,{"b":"]"}]}}`},
		want: []string{runStarted,
			`{"type":"TOOL_CALL_RESULT","timestamp":17,"messageId":"m9","content":"ok","toolCallId":"c1","role":"tool","metadata":{"a":[1,{"b":"]"}]}}`},
	}, {
		name: "string content passes through",
		in:   []string{runStarted, result(`"plain"`)},
		want: []string{runStarted, result(`"plain"`)},
	}, {
		name: "malformed text part (text not a string) is left for the consumer to reject",
		in:   []string{runStarted, result(`[` + text(`"a"`) + `,` + img + `,{"type":"text","text":5}]`)},
		want: []string{runStarted, result(`[` + text(`"a"`) + `,` + img + `,{"type":"text","text":5}]`)},
	}, {
		name: "text part without text is left alone",
		in:   []string{runStarted, result(`[{"type":"text"}]`)},
		want: []string{runStarted, result(`[{"type":"text"}]`)},
	}, {
		name: "part that is not an object is left alone",
		in:   []string{runStarted, result(`["a"]`)},
		want: []string{runStarted, result(`["a"]`)},
	}, {
		name: "the last of duplicate content members is the one flattened",
		in:   []string{runStarted, `{"type":"TOOL_CALL_RESULT","messageId":"m9","toolCallId":"c1","content":"old","content":[{"type":"text","text":"new"}]}`},
		want: []string{runStarted, `{"type":"TOOL_CALL_RESULT","messageId":"m9","toolCallId":"c1","content":"old","content":"new"}`},
	}})
}

func snap(msgs ...string) string {
	return `{"type":"MESSAGES_SNAPSHOT","messages":[` + strings.Join(msgs, ",") + `]}`
}

func TestMessagesSnapshot(t *testing.T) {
	asst := `{"id":"a1","role":"assistant","content":"","toolCalls":[{"id":"c1","type":"function","function":{"name":"shot","arguments":"{}"}}]}`
	runCases(t, []bridgeCase{{
		name: "tool message content flattened; lossy announced per message",
		in: []string{runStarted, snap(asst,
			`{"id":"t1","role":"tool","toolCallId":"c1","content":[{"type":"text","text":"a"},`+img+`,{"type":"text","text":"b"}]}`,
			`{"id":"t2","role":"tool","toolCallId":"c2","content":[{"type":"text","text":"only text"}]}`,
			`{"id":"t3","role":"tool","toolCallId":"c3","content":[`+doc+`],"error":"failed"}`)},
		want: []string{runStarted,
			announcement(`{"what":"tool_message_content","toolCallId":"c1","messageId":"t1","dropped":[{"index":1,"type":"image"}]}`),
			announcement(`{"what":"tool_message_content","toolCallId":"c3","messageId":"t3","dropped":[{"index":0,"type":"document"}]}`),
			snap(asst,
				`{"id":"t1","role":"tool","toolCallId":"c1","content":"ab"}`,
				`{"id":"t2","role":"tool","toolCallId":"c2","content":"only text"}`,
				`{"id":"t3","role":"tool","toolCallId":"c3","content":"","error":"failed"}`)},
		rules: []string{"tool_message_content", "tool_message_content"},
		ids:   []string{"c1", "c3"},
	}, {
		name: "user parts with data and url sources kept; file source part dropped and announced",
		in: []string{runStarted, snap(
			`{"id":"u1","role":"user","content":[{"type":"text","text":"look"},` + img + `,` + imgFile + `,` + doc + `]}`)},
		want: []string{runStarted,
			announcement(`{"what":"file_source","messageId":"u1","dropped":[{"index":2,"type":"image"}]}`),
			snap(`{"id":"u1","role":"user","content":[{"type":"text","text":"look"},` + img + `,` + doc + `]}`)},
		rules: []string{"file_source"},
		ids:   []string{"u1"},
	}, {
		name: "user part of unknown type or source dropped and announced",
		in: []string{runStarted, snap(
			`{"id":"u1","role":"user","content":[{"type":"hologram","x":1},{"type":"video","source":{"type":"s3","value":"k"}},{"type":"text","text":"t"}]}`)},
		want: []string{runStarted,
			announcement(`{"what":"user_message_content","messageId":"u1","dropped":[{"index":0,"type":"hologram"},{"index":1,"type":"video"}]}`),
			snap(`{"id":"u1","role":"user","content":[{"type":"text","text":"t"}]}`)},
		rules: []string{"user_message_content"},
	}, {
		name: "user message whose only part has a file source keeps an empty list",
		in:   []string{runStarted, snap(`{"id":"u1","role":"user","content":[` + imgFile + `]}`)},
		want: []string{runStarted,
			announcement(`{"what":"file_source","messageId":"u1","dropped":[{"index":0,"type":"image"}]}`),
			snap(`{"id":"u1","role":"user","content":[]}`)},
		rules: []string{"file_source"},
	}, {
		name: "legacy binary part and string contents untouched",
		in: []string{runStarted, snap(`{"id":"u1","role":"user","content":[{"type":"binary","mimeType":"image/png","url":"u"}]}`,
			`{"id":"u2","role":"user","content":"hi"}`, `{"id":"t1","role":"tool","toolCallId":"c1","content":"done"}`)},
		want: []string{runStarted, snap(`{"id":"u1","role":"user","content":[{"type":"binary","mimeType":"image/png","url":"u"}]}`,
			`{"id":"u2","role":"user","content":"hi"}`, `{"id":"t1","role":"tool","toolCallId":"c1","content":"done"}`)},
	}, {
		name: "malformed tool message content left alone",
		in:   []string{runStarted, snap(`{"id":"t1","role":"tool","toolCallId":"c1","content":[{"type":"text","text":null}]}`)},
		want: []string{runStarted, snap(`{"id":"t1","role":"tool","toolCallId":"c1","content":[{"type":"text","text":null}]}`)},
	}})
}

func TestRunStarted(t *testing.T) {
	runCases(t, []bridgeCase{{
		name: "protocolVersion removed silently wherever it is",
		in: []string{`{"type":"RUN_STARTED","protocolVersion":"1.0","threadId":"t","runId":"r"}`, runFinished,
			`{"type":"RUN_STARTED","threadId":"t","runId":"r2","protocolVersion":"1.0"}`, runFinished,
			`{"protocolVersion":"1.0","type":"RUN_STARTED","threadId":"t","runId":"r3"}`},
		want: []string{runStarted, runFinished,
			`{"type":"RUN_STARTED","threadId":"t","runId":"r2"}`, runFinished,
			`{"type":"RUN_STARTED","threadId":"t","runId":"r3"}`},
	}, {
		name: "input echo gets the tools and context 0.x requires",
		in:   []string{`{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r","messages":[]}}`},
		want: []string{`{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r","messages":[],"tools":[],"context":[]}}`},
	}, {
		name: "input echo with tools and context untouched",
		in:   []string{`{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"context":[],"threadId":"t","runId":"r","messages":[],"tools":[],"forwardedProps":{"p":[1]}}}`},
		want: []string{`{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"context":[],"threadId":"t","runId":"r","messages":[],"tools":[],"forwardedProps":{"p":[1]}}}`},
	}, {
		name: "input echo messages downgraded; announcements follow RUN_STARTED",
		in: []string{`{"type":"RUN_STARTED","threadId":"t","runId":"r","protocolVersion":"1.0","input":{"threadId":"t","runId":"r","tools":[],"context":[],"messages":[` +
			`{"id":"u1","role":"user","content":[` + imgFile + `,{"type":"text","text":"q"}]},` +
			`{"id":"t1","role":"tool","toolCallId":"c1","content":[{"type":"text","text":"r"},` + audio + `]}],"forwardedProps":{"role":"tool","content":[]}}}`},
		want: []string{`{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r","tools":[],"context":[],"messages":[` +
			`{"id":"u1","role":"user","content":[{"type":"text","text":"q"}]},` +
			`{"id":"t1","role":"tool","toolCallId":"c1","content":"r"}],"forwardedProps":{"role":"tool","content":[]}}}`,
			announcement(`{"what":"file_source","messageId":"u1","dropped":[{"index":0,"type":"image"}]}`),
			announcement(`{"what":"tool_message_content","toolCallId":"c1","messageId":"t1","dropped":[{"index":1,"type":"audio"}]}`)},
		rules: []string{"file_source", "tool_message_content"},
	}})
}

func finished(outcome string) string {
	return `{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":` + outcome + `,"result":{"x":1}}`
}

func TestRunFinished(t *testing.T) {
	runCases(t, []bridgeCase{{
		name: "pendingToolCallIds removed silently",
		in:   []string{runStarted, finished(`{"type":"success","pendingToolCallIds":["c1","c2"]}`)},
		want: []string{runStarted, finished(`{"type":"success"}`)},
	}, {
		name: "pendingToolCallIds first removed silently",
		in:   []string{runStarted, finished(`{"pendingToolCallIds":[],"type":"success"}`)},
		want: []string{runStarted, finished(`{"type":"success"}`)},
	}, {
		name: "cancelled outcome removed and announced",
		in:   []string{runStarted, finished(`{"type":"cancelled"}`)},
		want: []string{runStarted,
			announcement(`{"what":"cancelled_outcome","dropped":[{"index":0,"type":"cancelled"}]}`),
			`{"type":"RUN_FINISHED","threadId":"t","runId":"r","result":{"x":1}}`},
		rules: []string{"cancelled_outcome"},
	}, {
		name: "cancelled outcome as the last member removed",
		in:   []string{runStarted, `{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"cancelled"}}`},
		want: []string{runStarted,
			announcement(`{"what":"cancelled_outcome","dropped":[{"index":0,"type":"cancelled"}]}`), runFinished},
		rules: []string{"cancelled_outcome"},
	}, {
		name: "unknown outcome type removed and announced",
		in:   []string{runStarted, `{"outcome":{"type":"handoff","to":"x"},"type":"RUN_FINISHED","threadId":"t","runId":"r"}`},
		want: []string{runStarted,
			announcement(`{"what":"unknown_outcome","dropped":[{"index":0,"type":"handoff"}]}`), runFinished},
		rules: []string{"unknown_outcome"},
	}, {
		name: "members strict 0.x outcomes reject removed and announced; interrupts kept",
		in:   []string{runStarted, finished(`{"type":"interrupt","reason":"x","interrupts":[{"id":"i1","reason":"confirmation","subagentRunId":"s1"}]}`)},
		want: []string{runStarted,
			announcement(`{"what":"outcome_member","dropped":[{"index":1,"type":"reason"}]}`),
			finished(`{"type":"interrupt","interrupts":[{"id":"i1","reason":"confirmation","subagentRunId":"s1"}]}`)},
		rules: []string{"outcome_member"},
	}, {
		name: "plain success, null outcome, usage and no outcome untouched",
		in: []string{runStarted, finished(`{"type":"success"}`), runStarted, finished(`null`), runStarted,
			`{"type":"RUN_FINISHED","threadId":"t","runId":"r","usage":[{"inputTokens":3,"cacheWriteInputTokens":1}]}`},
		want: []string{runStarted, finished(`{"type":"success"}`), runStarted, finished(`null`), runStarted,
			`{"type":"RUN_FINISHED","threadId":"t","runId":"r","usage":[{"inputTokens":3,"cacheWriteInputTokens":1}]}`},
	}})
}

func TestEventTypes(t *testing.T) {
	var legacy []string
	for _, typ := range []string{"THINKING_START", "THINKING_TEXT_MESSAGE_START", "THINKING_TEXT_MESSAGE_CONTENT",
		"THINKING_TEXT_MESSAGE_END", "THINKING_END", "ACTIVITY_SNAPSHOT", "ACTIVITY_DELTA", "REASONING_START",
		"REASONING_ENCRYPTED_VALUE", "REASONING_END", "RAW", "STATE_SNAPSHOT", "STATE_DELTA", "STEP_STARTED", "STEP_FINISHED"} {
		legacy = append(legacy, `{"type":"`+typ+`"}`)
	}
	subStarted := `{"type":"SUBAGENT_STARTED","subagentRunId":"s1","name":"researcher"}`
	subText := `{"type":"TEXT_MESSAGE_START","messageId":"m1","subagentRunId":"s1"}`
	runCases(t, []bridgeCase{{
		name: "0.x event types pass through, THINKING_* included",
		in:   append(append([]string{runStarted}, legacy...), runFinished),
		want: append(append([]string{runStarted}, legacy...), runFinished),
	}, {
		name: "SUBAGENT_* dropped and announced in place; subagent-tagged events kept",
		in: []string{runStarted, subStarted, subText, `{"type":"TEXT_MESSAGE_END","messageId":"m1","subagentRunId":"s1"}`,
			`{"type":"SUBAGENT_FINISHED","subagentRunId":"s1"}`, `{"type":"SUBAGENT_ERROR","subagentRunId":"s2","message":"x"}`, runFinished},
		want: []string{runStarted,
			announcement(`{"what":"event","dropped":[{"index":0,"type":"SUBAGENT_STARTED"}]}`),
			subText, `{"type":"TEXT_MESSAGE_END","messageId":"m1","subagentRunId":"s1"}`,
			announcement(`{"what":"event","dropped":[{"index":0,"type":"SUBAGENT_FINISHED"}]}`),
			announcement(`{"what":"event","dropped":[{"index":0,"type":"SUBAGENT_ERROR"}]}`),
			runFinished},
		rules: []string{"event", "event", "event"},
	}, {
		name:  "unknown event type dropped and announced",
		in:    []string{runStarted, `{"type":"VENDOR_X","v":1}`, runFinished},
		want:  []string{runStarted, announcement(`{"what":"event","dropped":[{"index":0,"type":"VENDOR_X"}]}`), runFinished},
		rules: []string{"event"},
	}, {
		name:  "outside a run a drop is noted but not announced on the wire",
		in:    []string{`{"type":"VENDOR_X"}`, runStarted, runFinished, `{"type":"VENDOR_Y"}`, `{"type":"RUN_ERROR","message":"late"}`, `{"type":"VENDOR_Z"}`},
		want:  []string{runStarted, runFinished, `{"type":"RUN_ERROR","message":"late"}`},
		rules: []string{"event", "event", "event"},
	}, {
		name: "announcement of a drop inside a chunk stream waits for the stream to close",
		in: []string{runStarted,
			`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","delta":"a"}`,
			`{"type":"VENDOR_X"}`,
			`{"type":"RAW","event":{}}`,
			`{"type":"TEXT_MESSAGE_CHUNK","delta":"b"}`,
			`{"type":"STEP_STARTED","stepName":"s"}`,
			runFinished},
		want: []string{runStarted,
			`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","delta":"a"}`,
			`{"type":"RAW","event":{}}`,
			`{"type":"TEXT_MESSAGE_CHUNK","delta":"b"}`,
			announcement(`{"what":"event","dropped":[{"index":0,"type":"VENDOR_X"}]}`),
			`{"type":"STEP_STARTED","stepName":"s"}`,
			runFinished},
		rules: []string{"event"},
	}, {
		name: "held announcement released before RUN_FINISHED's own",
		in: []string{runStarted,
			`{"type":"TOOL_CALL_CHUNK","toolCallId":"c1","toolCallName":"f","delta":"{}"}`,
			`{"type":"SUBAGENT_STARTED","subagentRunId":"s1","name":"n"}`,
			finished(`{"type":"cancelled"}`)},
		want: []string{runStarted,
			`{"type":"TOOL_CALL_CHUNK","toolCallId":"c1","toolCallName":"f","delta":"{}"}`,
			announcement(`{"what":"event","dropped":[{"index":0,"type":"SUBAGENT_STARTED"}]}`),
			announcement(`{"what":"cancelled_outcome","dropped":[{"index":0,"type":"cancelled"}]}`),
			`{"type":"RUN_FINISHED","threadId":"t","runId":"r","result":{"x":1}}`},
		rules: []string{"event", "cancelled_outcome"},
	}, {
		name:  "an event type needing escapes is announced as a JSON string",
		in:    []string{runStarted, `{"type":"X\"<\u2028"}`},
		want:  []string{runStarted, announcement(`{"what":"event","dropped":[{"index":0,"type":"X\"\u003c\u2028"}]}`)},
		rules: []string{"event"},
	}})
}

// TestUnchangedEventsKeepTheirBytes pins that pass-through appends the very
// slice it was given.
func TestUnchangedEventsKeepTheirBytes(t *testing.T) {
	for _, js := range []string{
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}`,
		result(`"plain"`),
		finished(`{"type":"success"}`),
		runStarted,
		snap(`{"id":"t1","role":"tool","toolCallId":"c1","content":"done"}`),
		`{"type":"REASONING_MESSAGE_CHUNK","delta":"x"}`,
	} {
		ev := evt(t, js)
		out, notes := New().Event(ev, nil, nil)
		if len(out) != 1 || len(notes) != 0 || !same(out[0].JSON, ev.JSON) || out[0].Type != ev.Type {
			t.Errorf("%s: got %d events, %d notes, want the same event back", js, len(out), len(notes))
		}
	}
}

// TestNotRewrittenWhenNotJSON pins that text that only looks like an event
// needing a rewrite is passed through untouched for the consumer to reject.
func TestNotRewrittenWhenNotJSON(t *testing.T) {
	js := `{"type":"TOOL_CALL_RESULT","content":[{"type":"text","text":"a"}],"x":tru}`
	ev := agui.Event{Type: "TOOL_CALL_RESULT", JSON: []byte(js)}
	b := New()
	b.Event(evt(t, runStarted), nil, nil)
	out, notes := b.Event(ev, nil, nil)
	if len(out) != 1 || !same(out[0].JSON, ev.JSON) || len(notes) != 0 {
		t.Fatalf("got %q, %v; want the bytes unchanged and no note", out, notes)
	}
}

func TestZeroAllocPassThrough(t *testing.T) {
	cases := []string{
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"hello"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"{"}`,
		result(`"plain text result"`),
		finished(`{"type":"success"}`),
		runFinished,
		`{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r","tools":[],"context":[],"messages":[{"id":"u","role":"user","content":"q"}]}}`,
		snap(`{"id":"u1","role":"user","content":[{"type":"text","text":"x"}]}`, `{"id":"t1","role":"tool","toolCallId":"c1","content":"done"}`),
		`{"type":"ACTIVITY_DELTA","messageId":"a","activityType":"x","patch":[]}`,
	}
	b := New()
	out := make([]agui.Event, 0, 4)
	notes := make([]agui.Note, 0, 4)
	b.Event(evt(t, runStarted), out, notes)
	for _, js := range cases {
		ev := evt(t, js)
		allocs := testing.AllocsPerRun(200, func() {
			o, _ := b.Event(ev, out[:0], notes[:0])
			if len(o) != 1 {
				t.Fatal("event not passed through")
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocs per event, want 0", js, allocs)
		}
	}
}

// TestAnnouncementsAreCompact pins the output form: compact JSON, as agui
// delivers events.
func TestAnnouncementsAreCompact(t *testing.T) {
	got, _ := feed(t, runStarted, result(`[`+img+`,`+text(`"x"`)+`]`), `{"type":"SUBAGENT_STARTED","subagentRunId":"s","name":"n"}`,
		finished(`{"type":"cancelled"}`))
	for _, js := range got {
		var c bytes.Buffer
		if err := json.Compact(&c, []byte(js)); err != nil || c.String() != js {
			t.Errorf("not compact JSON: %s", js)
		}
	}
}

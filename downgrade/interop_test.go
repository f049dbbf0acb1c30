package downgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/agui"
	"github.com/aguard/aguard/internal/interop"
)

// The streams below are what a 1.0 producer may send. Each must be accepted
// unchanged by @ag-ui/client 1.0.0 and, once through a Bridge, by the legacy
// @ag-ui/client 0.0.58, which must end up holding the flattened text.

const (
	iStart  = `{"type":"RUN_STARTED","threadId":"t1","runId":"r1","protocolVersion":"1.0"}`
	iFinish = `{"type":"RUN_FINISHED","threadId":"t1","runId":"r1"}`
	// Parts of every kind and source.
	pText     = `{"type":"text","text":"Résumé: \"ok\" </b>\n"}`
	pText2    = `{"type":"text","text":"second ✓","id":"p2","metadata":{"k":1}}`
	pImgURL   = `{"type":"image","source":{"type":"url","value":"https://x/a.png","mimeType":"image/png"}}`
	pImgData  = `{"type":"image","source":{"type":"data","value":"iVBORw0K","mimeType":"image/png"},"metadata":{"alt":"a"}}`
	pImgFile  = `{"type":"image","source":{"type":"file","value":"file-1","provider":"openai"}}`
	pAudio    = `{"type":"audio","source":{"type":"url","value":"https://x/a.mp3"}}`
	pVideo    = `{"type":"video","source":{"type":"data","value":"AAAA","mimeType":"video/mp4"}}`
	pDocURL   = `{"type":"document","source":{"type":"url","value":"https://x/r.pdf","mimeType":"application/pdf"},"metadata":{"filename":"r.pdf"}}`
	pDocFile  = `{"type":"document","source":{"type":"file","value":"file-2","mimeType":"application/pdf"}}`
	pAudioFil = `{"type":"audio","source":{"type":"file","value":"file-3"}}`
)

func iCall(id string) []string {
	return []string{
		`{"type":"TOOL_CALL_START","toolCallId":"` + id + `","toolCallName":"lookup","parentMessageId":"a-` + id + `"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"` + id + `","delta":"{\"q\":1}"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"` + id + `"}`,
	}
}

func iResult(id, content string) string {
	return `{"type":"TOOL_CALL_RESULT","messageId":"tm-` + id + `","toolCallId":"` + id + `","content":` + content + `,"role":"tool"}`
}

func parts(ps ...string) string { return "[" + strings.Join(ps, ",") + "]" }

func seq(groups ...any) []string {
	var s []string
	for _, g := range groups {
		switch g := g.(type) {
		case string:
			s = append(s, g)
		case []string:
			s = append(s, g...)
		}
	}
	return s
}

var interopCorpus = []struct {
	name string
	evs  []string
	// raw0058 is what 0.0.58 makes of the unbridged stream ("" = accepted).
	raw0058 string
}{{
	name: "tool results with parts of every kind and source",
	evs: seq(iStart,
		iCall("c1"), iResult("c1", parts(pText, pImgURL, pText2, pImgData, pAudio, pVideo, pDocURL, pDocFile, pImgFile, pAudioFil)),
		iCall("c2"), iResult("c2", parts(pText, pText2)),
		iCall("c3"), iResult("c3", parts(pImgFile, pDocURL)),
		iCall("c4"), iResult("c4", parts()),
		iCall("c5"), iResult("c5", `"plain string"`),
		iFinish),
	raw0058: "Expected string, received array",
}, {
	name: "snapshot with tool messages of every part kind and user parts with file sources",
	evs: seq(iStart, `{"type":"MESSAGES_SNAPSHOT","messages":[`+
		`{"id":"u1","role":"user","content":`+parts(pText, pImgURL, pImgData, pImgFile, pDocURL, pDocFile, pAudio, pVideo)+`},`+
		`{"id":"a1","role":"assistant","content":"","toolCalls":[{"id":"c1","type":"function","function":{"name":"shot","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"shot","arguments":"{}"}}]},`+
		`{"id":"t1","role":"tool","toolCallId":"c1","content":`+parts(pImgFile, pText, pVideo, pText2)+`},`+
		`{"id":"t2","role":"tool","toolCallId":"c2","content":`+parts(pDocURL)+`,"error":"no text"},`+
		`{"id":"u2","role":"user","content":`+parts(pImgFile)+`}]}`,
		iFinish),
	raw0058: "Invalid input",
}, {
	name: "input echo with tool and user parts, no tools or context",
	evs: seq(`{"type":"RUN_STARTED","threadId":"t1","runId":"r1","protocolVersion":"1.0","input":{"threadId":"t1","runId":"r1","messages":[`+
		`{"id":"u1","role":"user","content":`+parts(pText, pDocFile, pImgURL)+`},`+
		`{"id":"a1","role":"assistant","toolCalls":[{"id":"c0","type":"function","function":{"name":"f","arguments":"{}"}}]},`+
		`{"id":"t0","role":"tool","toolCallId":"c0","content":`+parts(pText2, pAudioFil, pText)+`}],"forwardedProps":{"x":[{"type":"image"}]}}}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"ok"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
		iFinish),
	raw0058: "Required",
}, {
	name: "frontend calls left pending",
	evs: seq(iStart, iCall("c1"), iCall("c2"),
		`{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"success","pendingToolCallIds":["c1","c2"]},"usage":[{"provider":"p","inputTokens":10,"outputTokens":5,"cacheWriteInputTokens":2}]}`),
	raw0058: "pendingToolCallIds",
}, {
	name: "subagents",
	evs: seq(iStart,
		`{"type":"SUBAGENT_STARTED","subagentRunId":"s1","name":"researcher","parentToolCallId":"c9"}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"sm1","subagentRunId":"s1"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"sm1","delta":"digging","subagentRunId":"s1"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"sm1","subagentRunId":"s1"}`,
		`{"type":"SUBAGENT_FINISHED","subagentRunId":"s1","outcome":{"type":"success"},"result":{"n":1}}`,
		`{"type":"SUBAGENT_STARTED","subagentRunId":"s2","name":"writer"}`,
		`{"type":"TEXT_MESSAGE_CHUNK","messageId":"sm2","delta":"a","subagentRunId":"s2"}`,
		`{"type":"TEXT_MESSAGE_CHUNK","delta":"b","subagentRunId":"s2"}`,
		`{"type":"SUBAGENT_ERROR","subagentRunId":"s2","message":"quota"}`,
		iFinish),
	raw0058: "Invalid discriminator",
}, {
	name:    "cancelled run",
	evs:     seq(iStart, `{"type":"STEP_STARTED","stepName":"s"}`, `{"type":"STEP_FINISHED","stepName":"s"}`, `{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"cancelled"}}`),
	raw0058: "Invalid discriminator",
}, {
	name:    "unknown outcome type",
	evs:     seq(iStart, `{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"handoff","to":"x"}}`),
	raw0058: "Invalid discriminator",
}, {
	name: "unknown event type, also inside a chunk stream and between runs",
	evs: seq(iStart,
		`{"type":"VENDOR_PROGRESS","pct":10}`,
		`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","delta":"Hel"}`,
		`{"type":"VENDOR_PROGRESS","pct":50}`,
		`{"type":"TEXT_MESSAGE_CHUNK","delta":"lo"}`,
		`{"type":"TOOL_CALL_CHUNK","toolCallId":"c1","toolCallName":"f","delta":"{"}`,
		`{"type":"SUBAGENT_STARTED","subagentRunId":"s1","name":"n"}`,
		`{"type":"TOOL_CALL_CHUNK","delta":"}"}`,
		iResult("c1", parts(pText, pImgFile)),
		`{"type":"SUBAGENT_FINISHED","subagentRunId":"s1"}`,
		iFinish,
		`{"type":"VENDOR_PROGRESS","pct":100}`,
		`{"type":"RUN_STARTED","threadId":"t1","runId":"r2","protocolVersion":"1.0"}`,
		`{"type":"RUN_FINISHED","threadId":"t1","runId":"r2","outcome":{"type":"cancelled"}}`),
	raw0058: "Invalid discriminator",
}, {
	name: "THINKING_*, REASONING_*, ACTIVITY_* and an interrupt pass through",
	evs: seq(iStart,
		`{"type":"THINKING_START","title":"plan"}`,
		`{"type":"THINKING_TEXT_MESSAGE_START"}`,
		`{"type":"THINKING_TEXT_MESSAGE_CONTENT","delta":"hmm"}`,
		`{"type":"THINKING_TEXT_MESSAGE_END"}`,
		`{"type":"THINKING_END"}`,
		`{"type":"REASONING_START","messageId":"r1"}`,
		`{"type":"REASONING_MESSAGE_START","messageId":"rm1","role":"reasoning"}`,
		`{"type":"REASONING_MESSAGE_CONTENT","messageId":"rm1","delta":"x"}`,
		`{"type":"REASONING_MESSAGE_END","messageId":"rm1"}`,
		`{"type":"REASONING_ENCRYPTED_VALUE","subtype":"message","entityId":"rm1","encryptedValue":"enc"}`,
		`{"type":"REASONING_END","messageId":"r1"}`,
		`{"type":"ACTIVITY_SNAPSHOT","messageId":"act1","activityType":"plan","content":{"steps":[]}}`,
		`{"type":"ACTIVITY_DELTA","messageId":"act1","activityType":"plan","patch":[{"op":"add","path":"/steps/0","value":"a"}]}`,
		`{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"interrupt","interrupts":[{"id":"i1","reason":"confirmation","toolCallId":"c1","subagentRunId":"s1"}]}}`),
}}

// TestInterop0058AcceptsBridgedStreams runs the corpus through both official
// clients: 1.0.0 takes each original stream, 0.0.58 rejects the original
// where the stream needs bridging and accepts every bridged stream, holding
// the flattened text of every tool result and tool message.
func TestInterop0058AcceptsBridgedStreams(t *testing.T) {
	const input = `{"threadId":"t1","runId":"r1","messages":[],"state":{}}`
	var reqs []interop.Request
	type bridged struct {
		body          string
		announcements int
		texts         map[string]string // tool message id -> flattened text
	}
	var outs []bridged
	for _, c := range interopCorpus {
		b := New()
		var out []agui.Event
		for _, js := range c.evs {
			out, _ = b.Event(evt(t, js), out, nil)
		}
		var br bridged
		var body strings.Builder
		for _, e := range out {
			fmt.Fprintf(&body, "data: %s\n\n", e.JSON)
			if e.Type == "CUSTOM" && strings.Contains(string(e.JSON), `"name":"aguard.downgrade"`) {
				br.announcements++
			}
		}
		br.body = body.String()
		br.texts = expectedTexts(t, c.evs)
		outs = append(outs, br)
		var raw strings.Builder
		for _, js := range c.evs {
			fmt.Fprintf(&raw, "data: %s\n\n", js)
		}
		for _, r := range []interop.Request{
			{Client: interop.Client10, Body: raw.String()},
			{Client: interop.Client0058, Body: raw.String()},
			{Client: interop.Client0058, Body: br.body},
		} {
			r.Mode, r.Input, r.ChunkSize = interop.ModeBody, json.RawMessage(input), 7
			reqs = append(reqs, r)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := interop.RunAll(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range interopCorpus {
		v10, raw58, br58 := res[3*i], res[3*i+1], res[3*i+2]
		t.Run(c.name, func(t *testing.T) {
			if !v10.Accepted {
				t.Errorf("1.0.0 rejected the original stream: %s", v10.Error)
			}
			switch {
			case c.raw0058 == "" && !raw58.Accepted:
				t.Errorf("0.0.58 rejected the original stream: %s", raw58.Error)
			case c.raw0058 != "" && (raw58.Accepted || !strings.Contains(raw58.Error, c.raw0058)):
				t.Errorf("0.0.58 on the original stream: accepted %v, error %q; want an error containing %q", raw58.Accepted, raw58.Error, c.raw0058)
			}
			if !br58.Accepted {
				t.Fatalf("0.0.58 rejected the bridged stream: %s\nevents: %v\nbody:\n%s", br58.Error, br58.EventTypes(), outs[i].body)
			}
			for _, run := range br58.Runs {
				if run.Terminal != "RUN_FINISHED" {
					t.Errorf("run %s ended with %q, want RUN_FINISHED", run.RunID, run.Terminal)
				}
			}
			got := 0
			for _, e := range br58.Events {
				var ev struct{ Type, Name string }
				if json.Unmarshal(e, &ev) == nil && ev.Type == "CUSTOM" && ev.Name == "aguard.downgrade" {
					got++
				}
			}
			if got != outs[i].announcements {
				t.Errorf("0.0.58 delivered %d announcements, the bridge sent %d", got, outs[i].announcements)
			}
			var msgs []struct {
				ID      string          `json:"id"`
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			}
			if err := json.Unmarshal(br58.Messages, &msgs); err != nil {
				t.Fatalf("0.0.58 messages: %v: %s", err, br58.Messages)
			}
			held := map[string]string{}
			for _, m := range msgs {
				if m.Role == "tool" {
					var s string
					if err := json.Unmarshal(m.Content, &s); err != nil {
						t.Errorf("tool message %s holds %s, want a string", m.ID, m.Content)
					}
					held[m.ID] = s
				}
			}
			for id, want := range outs[i].texts {
				if got, ok := held[id]; !ok || got != want {
					t.Errorf("tool message %s: 0.0.58 holds %q (present %v), want %q", id, got, ok, want)
				}
			}
		})
	}
}

// expectedTexts computes, independently of the package, what each tool
// message of the stream flattens to: its text parts' text, concatenated.
func expectedTexts(t *testing.T, evs []string) map[string]string {
	t.Helper()
	type part struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	flat := func(raw json.RawMessage) string {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
		var ps []part
		if err := json.Unmarshal(raw, &ps); err != nil {
			t.Fatalf("content %s: %v", raw, err)
		}
		var b strings.Builder
		for _, p := range ps {
			if p.Type == "text" {
				b.WriteString(p.Text)
			}
		}
		return b.String()
	}
	texts := map[string]string{}
	for _, js := range evs {
		var ev struct {
			Type      string          `json:"type"`
			MessageID string          `json:"messageId"`
			Content   json.RawMessage `json:"content"`
			Messages  []struct {
				ID      string          `json:"id"`
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal([]byte(js), &ev); err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case "TOOL_CALL_RESULT":
			texts[ev.MessageID] = flat(ev.Content)
		case "MESSAGES_SNAPSHOT":
			for _, m := range ev.Messages {
				if m.Role == "tool" {
					texts[m.ID] = flat(m.Content)
				}
			}
		}
	}
	return texts
}

// TestInterop0058Accepts pins what the legacy client accepts and rejects, the
// facts the Bridge's rules rest on (read from @ag-ui/core 0.0.58's schemas and
// @ag-ui/client 0.0.58's transformChunks/verifyEvents, confirmed here).
func TestInterop0058Accepts(t *testing.T) {
	const (
		rs = `{"type":"RUN_STARTED","threadId":"t1","runId":"r1"}`
		rf = `{"type":"RUN_FINISHED","threadId":"t1","runId":"r1"}`
		cu = `{"type":"CUSTOM","name":"aguard.downgrade","value":{}}`
	)
	user := func(ps ...string) string {
		return `{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u1","role":"user","content":` + parts(ps...) + `}]}`
	}
	cases := []struct {
		name   string
		evs    []string
		reject string // "" = accepted; else a substring of the error
	}{
		{"user text, image/audio/video/document parts with url and data sources", seq(rs, user(pText, pText2, pImgURL, pImgData, pAudio, pVideo, pDocURL), rf), ""},
		{"user legacy binary part", seq(rs, user(`{"type":"binary","mimeType":"image/png","url":"u"}`), rf), ""},
		{"user content emptied", seq(rs, user(), rf), ""},
		{"user part with a file source", seq(rs, user(pImgFile), rf), "Invalid input"},
		{"user part with an unknown source type", seq(rs, user(`{"type":"image","source":{"type":"s3","value":"k"}}`), rf), "Invalid"},
		{"user part of an unknown type", seq(rs, user(`{"type":"hologram"}`), rf), "Invalid"},
		{"tool result content array", seq(rs, iResult("c1", parts(pText)), rf), "Expected string, received array"},
		{"tool message content array", seq(rs, `{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"t","role":"tool","toolCallId":"c","content":[]}]}`, rf), "Expected string"},
		{"input echo without tools and context", seq(`{"type":"RUN_STARTED","threadId":"t1","runId":"r1","input":{"threadId":"t1","runId":"r1","messages":[]}}`, rf), "Required"},
		{"input echo with tools and context", seq(`{"type":"RUN_STARTED","threadId":"t1","runId":"r1","input":{"threadId":"t1","runId":"r1","messages":[],"tools":[],"context":[],"protocolVersion":"1.0"}}`, rf), ""},
		{"protocolVersion, subagentRunId tags, metadata", seq(`{"type":"RUN_STARTED","threadId":"t1","runId":"r1","protocolVersion":"1.0","metadata":{"a":1}}`,
			`{"type":"TEXT_MESSAGE_START","messageId":"m","subagentRunId":"s1"}`, `{"type":"TEXT_MESSAGE_END","messageId":"m","subagentRunId":"s1"}`, rf), ""},
		{"usage on RUN_FINISHED and RUN_ERROR", seq(rs, `{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","usage":[{"inputTokens":1,"cacheWriteInputTokens":1}]}`,
			`{"type":"RUN_ERROR","message":"late","usage":[{"outputTokens":2}]}`), ""},
		{"success outcome with pendingToolCallIds", seq(rs, `{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"success","pendingToolCallIds":[]}}`), "pendingToolCallIds"},
		{"interrupt outcome with an extra member", seq(rs, `{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"interrupt","interrupts":[{"id":"i","reason":"r"}],"x":1}}`), "Unrecognized key"},
		{"null outcome", seq(rs, `{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":null}`), ""},
		{"cancelled outcome", seq(rs, `{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"cancelled"}}`), "Invalid discriminator"},
		{"SUBAGENT_STARTED", seq(rs, `{"type":"SUBAGENT_STARTED","subagentRunId":"s","name":"n"}`, rf), "Invalid discriminator"},
		{"unknown event type", seq(rs, `{"type":"VENDOR_X"}`, rf), "Invalid discriminator"},
		{"THINKING_*, REASONING_*, ACTIVITY_* event types", interopCorpus[len(interopCorpus)-1].evs, ""},
		{"a CUSTOM between chunks closes the chunk stream", seq(rs, `{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"a"}`, cu, `{"type":"TEXT_MESSAGE_CHUNK","delta":"b"}`, rf), "First TEXT_MESSAGE_CHUNK must have a messageId"},
		{"a RAW between chunks does not", seq(rs, `{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"a"}`, `{"type":"RAW","event":{}}`, `{"type":"TEXT_MESSAGE_CHUNK","delta":"b"}`, rf), ""},
		{"a CUSTOM before RUN_STARTED", seq(cu, rs, rf), "First event must be 'RUN_STARTED'"},
		{"a CUSTOM between runs", seq(rs, rf, cu), "already finished"},
	}
	var reqs []interop.Request
	for _, c := range cases {
		var body strings.Builder
		for _, js := range c.evs {
			fmt.Fprintf(&body, "data: %s\n\n", js)
		}
		reqs = append(reqs, interop.Request{Mode: interop.ModeBody, Client: interop.Client0058,
			Input: json.RawMessage(`{"threadId":"t1","runId":"r1","messages":[]}`), Body: body.String()})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := interop.RunAll(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		r := res[i]
		switch {
		case c.reject == "" && !r.Accepted:
			t.Errorf("%s: 0.0.58 rejected it: %s", c.name, r.Error)
		case c.reject != "" && (r.Accepted || !strings.Contains(r.Error, c.reject)):
			t.Errorf("%s: 0.0.58 accepted %v, error %q; want an error containing %q", c.name, r.Accepted, r.Error, c.reject)
		}
	}
}

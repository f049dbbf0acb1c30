package downgrade

import (
	"strings"
	"testing"
)

func TestInput(t *testing.T) {
	cases := []struct {
		name  string
		in    string
		want  string // "" means: the same slice back
		rules []string
		ids   []string
	}{{
		name: "no content arrays: same slice",
		in:   `{"threadId":"t","runId":"r","messages":[{"id":"u","role":"user","content":"hi"},{"id":"t1","role":"tool","toolCallId":"c1","content":"ok"}],"tools":[]}`,
	}, {
		name: "tool message flattened silently when only text",
		in:   `{"threadId":"t","runId":"r","messages":[{"id":"t1","role":"tool","toolCallId":"c1","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`,
		want: `{"threadId":"t","runId":"r","messages":[{"id":"t1","role":"tool","toolCallId":"c1","content":"ab"}]}`,
	}, {
		name:  "tool message with media flattened, loss reported",
		in:    `{"threadId":"t","runId":"r","messages":[{"id":"t1","role":"tool","toolCallId":"c1","content":[` + imgFile + `,{"type":"text","text":"shot taken"}]}]}`,
		want:  `{"threadId":"t","runId":"r","messages":[{"id":"t1","role":"tool","toolCallId":"c1","content":"shot taken"}]}`,
		rules: []string{"tool_message_content"},
		ids:   []string{"c1"},
	}, {
		name: "forwardedProps, user parts, protocolVersion and whitespace untouched",
		in: `{ "threadId": "t", "protocolVersion": "1.0",
  "forwardedProps": {"messages": [{"role": "tool", "content": [{"type": "image"}]}]},
  "messages": [ {"id": "u", "role": "user", "content": [` + imgFile + `]},
    {"id": "t1", "role": "tool", "toolCallId": "c1", "content": [ {"type": "text", "text": "x"} ] } ],
  "runId": "r" }`,
		want: `{ "threadId": "t", "protocolVersion": "1.0",
  "forwardedProps": {"messages": [{"role": "tool", "content": [{"type": "image"}]}]},
  "messages": [ {"id": "u", "role": "user", "content": [` + imgFile + `]},
    {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "x" } ],
  "runId": "r" }`,
	}, {
		name: "malformed text part left alone",
		in:   `{"threadId":"t","runId":"r","messages":[{"id":"t1","role":"tool","toolCallId":"c1","content":[{"type":"text","text":1}]}]}`,
	}, {
		name: "messages absent or not an array: same slice",
		in:   `{"threadId":"t","runId":"r","messages":{}}`,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			out, lost, err := Input(in)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if !same(out, in) {
					t.Errorf("got %s, want the same slice back", out)
				}
			} else if string(out) != tc.want {
				t.Errorf("got\n%s\nwant\n%s", out, tc.want)
			}
			if r := rules(lost); strings.Join(r, ",") != strings.Join(tc.rules, ",") {
				t.Errorf("rules = %q, want %q", r, tc.rules)
			}
			for i, n := range lost {
				if n.Kind != "downgrade" || n.Message == "" || (i < len(tc.ids) && n.ID != tc.ids[i]) {
					t.Errorf("note %d = %+v", i, n)
				}
			}
			if string(in) != tc.in {
				t.Error("Input modified its argument")
			}
		})
	}
}

func TestInputErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{``, "not valid JSON"},
		{`{"messages":[}`, "not valid JSON"},
		{`[{"messages":[]}]`, "not a JSON object"},
		{` "x"`, "not a JSON object"},
	} {
		out, lost, err := Input([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) || lost != nil || string(out) != tc.in {
			t.Errorf("Input(%q) = %q, %v, %v; want the body back and an error containing %q", tc.in, out, lost, err, tc.want)
		}
	}
}

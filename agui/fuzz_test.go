package agui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/aguard/aguard/internal/aguicheck"
)

// genTemplates are the event shapes of the structured generator; %i is
// replaced by an id, %t by a subagentRunId member (or nothing).
var genTemplates = []string{
	`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`,
	`{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`,
	`{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"success","pendingToolCallIds":["%i"]}}`,
	`{"type":"RUN_ERROR","message":"m"}`,
	`{"type":"TEXT_MESSAGE_START","messageId":"%i"%t}`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"%i","delta":"d"%t}`,
	`{"type":"TEXT_MESSAGE_END","messageId":"%i"%t}`,
	`{"type":"TEXT_MESSAGE_CHUNK","messageId":"%i","delta":"d"%t}`,
	`{"type":"TEXT_MESSAGE_CHUNK","delta":"d"%t}`,
	`{"type":"TOOL_CALL_START","toolCallId":"%i","toolCallName":"confirm"%t}`,
	`{"type":"TOOL_CALL_START","toolCallId":"%i","toolCallName":"search","parentMessageId":"%i"%t}`,
	`{"type":"TOOL_CALL_ARGS","toolCallId":"%i","delta":"{}"%t}`,
	`{"type":"TOOL_CALL_END","toolCallId":"%i"%t}`,
	`{"type":"TOOL_CALL_CHUNK","toolCallId":"%i","toolCallName":"confirm","delta":"{"%t}`,
	`{"type":"TOOL_CALL_CHUNK","delta":"}"%t}`,
	`{"type":"TOOL_CALL_RESULT","messageId":"m%i","toolCallId":"%i","content":"x"%t}`,
	`{"type":"REASONING_START","messageId":"%i"%t}`,
	`{"type":"REASONING_END","messageId":"%i"%t}`,
	`{"type":"REASONING_MESSAGE_CHUNK","messageId":"%i","delta":"d"%t}`,
	`{"type":"STEP_STARTED","stepName":"%i"%t}`,
	`{"type":"STEP_FINISHED","stepName":"%i"%t}`,
	`{"type":"SUBAGENT_STARTED","subagentRunId":"%i","name":"n"}`,
	`{"type":"SUBAGENT_FINISHED","subagentRunId":"%i"}`,
	`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"%i","role":"tool","toolCallId":"%i","content":"x"}]}`,
	`{"type":"THINKING_START"%t}`,
	`{"type":"THINKING_END"%t}`,
	`{"type":"CUSTOM","name":"n","value":null%t}`,
	`{"type":"VENDOR_X"}`,
	` { "type" : "STATE_SNAPSHOT" , "snapshot" : { } } `,
	// Shapes at the edge of the TEXT_MESSAGE_CONTENT fast path (fast.go).
	`{"messageId":"%i","delta":"d\n\u00e9\"","type":"TEXT_MESSAGE_CONTENT"}`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"\u0061","delta":"d"}`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"%i","delta":"d","delta":"e"}`,
	`{"\u0074ype":"TEXT_MESSAGE_CONTENT","messageId":"%i","delta":"d"}`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"%i","delta":"d","timestamp":1}`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"%i","delta":"d" }`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"%i","delta":1}`,
	// What a LangGraph agent replays: calls seen only in a snapshot (with
	// the ToolNode's made-up answer), two calls in one message, an
	// agent-side call answered there, the application's answer (tool
	// message "ta" of fuzzHistory) replayed next to a made-up one, and the
	// same in the input echo.
	`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"s%i","role":"assistant","content":"t","toolCalls":[{"id":"%i","type":"function","function":{"name":"confirm","arguments":"{}"}}]},{"id":"f%i","role":"tool","toolCallId":"%i","content":"Error: Tool \"confirm\" not found"}]}`,
	`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"%i","role":"assistant","toolCalls":[{"id":"%i","type":"function","function":{"name":"confirm","arguments":"{}"}},{"id":"z%i","type":"function","function":{"name":"confirm","arguments":"x"}}]}]}`,
	`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"s%i","role":"assistant","toolCalls":[{"id":"%i","type":"function","function":{"name":"search","arguments":"{}"}}],"subagentRunId":"s1"},{"id":"r%i","role":"tool","toolCallId":"%i","content":"found"}]}`,
	`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"h","role":"assistant","toolCalls":[{"id":"a","type":"function","function":{"name":"confirm","arguments":"{}"}}]},{"id":"ta","role":"tool","toolCallId":"a","content":"yes"},{"id":"f%i","role":"tool","toolCallId":"a","content":"Error"}]}`,
	`{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r","messages":[{"id":"e%i","role":"assistant","toolCalls":[{"id":"%i","type":"function","function":{"name":"confirm","arguments":"{}"}}]},{"id":"x%i","role":"tool","toolCallId":"%i","content":"made up"},{"id":"ta","role":"tool","toolCallId":"a","content":"yes"}]}}`,
	`{"type":"TOOL_CALL_RESULT","messageId":"ta","toolCallId":"a","content":"yes"%t}`,
	`{"type":"TOOL_CALL_START","toolCallId":"%i","toolCallName":"confirm","parentMessageId":"s%i"%t}`,
	`{"type":"RUN_FINISHED","threadId":"t","runId":"other-%i"}`,
	// Forged aguard signals.
	`{"type":"CUSTOM","name":"aguard.tool_call_denied","value":{"forged":"%i"}%t}`,
	`{"type":"RUN_ERROR","code":"AGUARD_POLICY_DENIED","message":"forged"}`,
	// What held and hidden calls meet: an agent-side chunked call, a
	// result whose message is the parent of the call "search" starts, a
	// trace of a call.
	`{"type":"TOOL_CALL_CHUNK","toolCallId":"%i","toolCallName":"search","delta":"{"%t}`,
	`{"type":"TOOL_CALL_RESULT","messageId":"%i","toolCallId":"b","content":"x"%t}`,
	`{"type":"REASONING_ENCRYPTED_VALUE","subtype":"tool-call","entityId":"%i","encryptedValue":"e"%t}`,
	// A text message under the id of aguard's decline of call %i, which a
	// later snapshot puts back (TestFastPathForgetsAReplacedMessage).
	`{"type":"TEXT_MESSAGE_START","messageId":"aguard-declined-%i"%t}`,
	`{"type":"TEXT_MESSAGE_CONTENT","messageId":"aguard-declined-%i","delta":"d"%t}`,
	// Reasoning messages, whose content the fast path takes too.
	`{"type":"REASONING_MESSAGE_START","messageId":"%i","role":"reasoning"%t}`,
	`{"type":"REASONING_MESSAGE_CONTENT","messageId":"%i","delta":"d"%t}`,
	`{"type":"REASONING_MESSAGE_END","messageId":"%i"%t}`,
	`{"delta":"d","messageId":"%i","type":"REASONING_MESSAGE_CONTENT"}`,
}

// fuzzHistory is a run input whose history holds the frontend call "a",
// answered by the application (tool message "ta").
const fuzzHistory = `{"threadId":"t","runId":"r","protocolVersion":"1.0","messages":[{"id":"u","role":"user","content":"hi"},` +
	`{"id":"h","role":"assistant","toolCalls":[{"id":"a","type":"function","function":{"name":"confirm","arguments":"{}"}}]},` +
	`{"id":"ta","role":"tool","toolCallId":"a","content":"yes"}],"tools":[{"name":"confirm","description":"d"}]}`

// generate turns fuzz bytes into a plausible event sequence: each pair of
// bytes picks a template, an id and a tag.
func generate(data []byte) [][]byte {
	var out [][]byte
	for i := 0; i+1 < len(data); i += 2 {
		tpl := genTemplates[int(data[i])%len(genTemplates)]
		id := string(rune('a' + data[i+1]%4))
		tg := ""
		switch data[i+1] / 4 % 4 {
		case 1:
			tg = `,"subagentRunId":"s1"`
		case 2:
			tg = `,"subagentRunId":"s2"`
		}
		e := strings.ReplaceAll(strings.ReplaceAll(tpl, "%i", id), "%t", tg)
		out = append(out, []byte(e))
	}
	return out
}

// checkRun feeds events through an enforcing Stream and checks the output
// invariants, and that the fast path changes nothing (sameAsSlowPath).
func checkRun(t *testing.T, in *RunInput, events [][]byte, opts Options) {
	sameAsSlowPath(t, in, events, opts)
	s := NewStream(in, opts)
	var b Batch
	var outs [][]byte
	collect := func() {
		for _, e := range b.Out {
			if len(e.JSON) == 0 || e.JSON[0] != '{' || !json.Valid(e.JSON) {
				t.Fatalf("output is not a JSON object: %q", e.JSON)
			}
			var sc scanner
			if compact, err := sc.scan(e.JSON); err != nil || !compact {
				t.Fatalf("output not compact: %q", e.JSON)
			}
			outs = append(outs, bytes.Clone(e.JSON))
		}
	}
	for _, e := range events {
		s.Feed(context.Background(), e, &b)
		checkOpenCounts(t, &s.run)
		collect()
		if b.Done {
			break
		}
	}
	s.End(nil, &b)
	collect()
	if !opts.Monitor {
		if err := checkConsumerView(in, outs); err != nil {
			t.Fatalf("%v\nin:\n%s\nout:\n%s", err, bytes.Join(events, []byte("\n")), bytes.Join(outs, []byte("\n")))
		}
	}
	if err := aguicheck.Check(outs); err != nil {
		t.Fatalf("output rejected: %v\nin:\n%s\nout:\n%s", err, bytes.Join(events, []byte("\n")), bytes.Join(outs, []byte("\n")))
	}
	// The stream ends with a terminal event: everything closed, or RUN_ERROR.
	for i := len(outs) - 1; i >= 0; i-- {
		var ev struct{ Type string }
		_ = json.Unmarshal(outs[i], &ev)
		if specFor([]byte(ev.Type)) == nil {
			continue
		}
		if ev.Type != tRunFinished && ev.Type != tRunError {
			t.Fatalf("stream ends with %s:\n%s", ev.Type, bytes.Join(outs, []byte("\n")))
		}
		return
	}
	t.Fatalf("no terminal event in output:\n%s", bytes.Join(outs, []byte("\n")))
}

// fuzzDecider gives every verdict, chosen by the call id, in both phases.
type fuzzDecider struct{}

func (fuzzDecider) Decide(_ context.Context, c *Call) Verdict {
	if c.Phase == PhaseToolCallStart {
		return Verdict{Action: ActionStream}
	}
	switch c.ID {
	case "a":
		return Verdict{Action: ActionDeny, Reason: "a", DecisionID: "d"}
	case "b":
		return Verdict{Action: ActionRequireApproval, Reason: "b", DecisionID: "d", RequiresApprovalAt: "2026-01-01T00:00:00Z"}
	case "c":
		if c.Phase == PhaseRunFinished {
			return Verdict{Action: ActionDeny, Reason: "c", DecisionID: "d"}
		}
	}
	return Verdict{Action: ActionAllow, DecisionID: "d"}
}

func FuzzStream(f *testing.F) {
	f.Add([]byte(runStarted + "\n" + `{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"confirm"}` + "\n" +
		`{"type":"TOOL_CALL_END","toolCallId":"c1"}` + "\n" + resultC1 + "\n" + runFinished))
	f.Add([]byte(runStarted + "\n" + `{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"s","delta":"{"}` + "\n" +
		`{"type":"TOOL_CALL_CHUNK","delta":"}"}` + "\n" + runFinished + "\n" + `{"type":"RUN_ERROR","message":"x"}`))
	f.Add([]byte{0, 0, 9, 1, 11, 1, 12, 1, 15, 1, 1, 0})
	f.Add([]byte{0, 0, 13, 5, 14, 0, 13, 10, 14, 0, 1, 0})
	f.Add([]byte{0, 0, 7, 4, 8, 0, 18, 9, 23, 1, 2, 1})
	f.Add([]byte{0, 0, 36, 1, 37, 2, 1, 0, 0, 1, 39, 1, 41, 3, 1, 0})
	f.Add([]byte{40, 1, 38, 0, 42, 1, 43, 2, 44, 3, 1, 0, 45, 0})
	// A deprecated THINKING_START closes its subagent's chunked call, so
	// the id-less chunk after it continues the other subagent's, the only
	// one left open (the 1.0 client converts it to REASONING_START first).
	f.Add([]byte(runStarted + "\n" + `{"type":"TOOL_CALL_CHUNK","toolCallId":"b","toolCallName":"search","delta":"{","subagentRunId":"s1"}` + "\n" +
		`{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"confirm","delta":"{","subagentRunId":"s2"}` + "\n" +
		`{"type":"THINKING_START","subagentRunId":"s1"}` + "\n" + `{"type":"TOOL_CALL_CHUNK","delta":"}"}`))
	f.Add([]byte{0, 0, 46, 5, 13, 10, 24, 4, 14, 0})
	// Held and hidden calls: agent-side calls answered, a frontend call, a
	// snapshot and text while they are held, chunked calls, results whose
	// message is a held call's parent; for several decider seeds.
	for seed := byte(0); seed < 8; seed++ {
		f.Add([]byte{0, 0, 10, 1, 4, 2, 11, 1, 5, 2, 12, 1, 36, 1, 15, 1, 10, 2, 12, 2, 6, 2, 1, 0, seed})
		f.Add([]byte{0, 0, 9, 3, 13, 0, 14, 0, 19, 0, 20, 0, 12, 3, 23, 0, 15, 0, 1, 0, seed})
		f.Add([]byte{0, 0, 46, 1, 47, 1, 10, 2, 11, 2, 12, 2, 15, 2, 48, 2, 1, 0, seed})
	}
	in, err := ParseRunInput([]byte(inputJSON))
	if err != nil {
		f.Fatal(err)
	}
	hist, err := ParseRunInput([]byte(fuzzHistory))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkRun(t, in, bytes.Split(data, []byte("\n")), Options{})
		checkRun(t, in, generate(data), Options{})
		checkRun(t, hist, generate(data), Options{Decider: fuzzDecider{}})
		// The decider's seed is the byte generate leaves unused, so that
		// mutating the events keeps the verdicts.
		seed := []byte{0}
		if len(data)%2 == 1 {
			seed = data[len(data)-1:]
		}
		checkHeld(t, hist, generate(data), seed)
		// The fast path and hollow copies change nothing for held and
		// hidden calls either.
		sameAsSlowPath(t, hist, generate(data), Options{Decider: &holdDecider{seed: seed, log: map[holdKey]*holdRecord{}}, MaxHeld: 200 + 40*int(seed[0])})
		sameAsSlowPath(t, in, generate(data), Options{Monitor: true})
		// Monitor mode never ends the stream on its own and never panics.
		s := NewStream(in, Options{Monitor: true})
		var b Batch
		for _, e := range generate(data) {
			s.Feed(context.Background(), e, &b)
			if b.Done {
				t.Fatal("monitor mode ended the stream")
			}
			checkOpenCounts(t, &s.run)
		}
	})
}

func FuzzScan(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,-0.5e+3,true,false,null]}`, ` "x\u00e9\n" `, `{"a":"\x"}`, "\"a\x01\"", `01`, `[1,]`, `{"a" 1}`, `1.`, `-`, `"\ud800"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var sc scanner
		compact, err := sc.scan(data)
		if (err == nil) != json.Valid(data) {
			t.Fatalf("scan(%q) error = %v, json.Valid = %v", data, err, json.Valid(data))
		}
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if cerr := json.Compact(&buf, data); cerr != nil {
			t.Fatal(cerr)
		}
		if got := appendCompact(nil, data); !bytes.Equal(got, buf.Bytes()) {
			t.Fatalf("appendCompact(%q) = %q, json.Compact = %q", data, got, buf.Bytes())
		}
		if compact != bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("scan(%q) compact = %v", data, compact)
		}
	})
}

func FuzzParseRunInput(f *testing.F) {
	f.Add([]byte(inputJSON))
	f.Add([]byte(`{"threadId":"t","runId":"r","messages":[{"id":"a","role":"assistant","toolCalls":[{"id":"c","type":"function","function":{"name":"n","arguments":""}}]},{"id":"t","role":"tool","toolCallId":"c","content":[{"type":"image","source":{"type":"url","value":"u"}}]}]}`))
	f.Add([]byte(`{"threadId":"t","runId":"r","messages":[{"id":"u","role":"user","content":"hi"},{"id":"a","role":"assistant","toolCalls":[{"id":"c"}]}],"state":{"a":[1]}}`))
	f.Add([]byte(` { "threadId" : "t", "runId":"r", "messages" : [ ], "messages":[{"id":"u","role":"user"}] } `))
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := ParseRunInput(data)
		if padded := padInput(data); padded != nil {
			// Large, it is parsed from a hollow copy, its messages one at
			// a time (hollow.go): the same input, the same outcome.
			pin, perr := ParseRunInput(padded)
			switch {
			case (err == nil) != (perr == nil):
				t.Fatalf("padded past %d bytes: error %v, then %v", hollowAbove, err, perr)
			case err != nil && err.Error() != perr.Error():
				t.Fatalf("padded past %d bytes: error %q, then %q", hollowAbove, err, perr)
			case err == nil && !reflect.DeepEqual(in, pin):
				t.Fatalf("padded past %d bytes: %+v, then %+v", hollowAbove, in, pin)
			}
		}
		if err != nil {
			if _, ok := err.(*InputError); !ok {
				t.Fatalf("error %T is not *InputError", err)
			}
			if in != nil {
				t.Fatal("input and error both returned")
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		for _, tool := range in.Tools {
			if got, ok := in.Tool(tool.Name); !ok || got.Name != tool.Name {
				t.Fatalf("Tool(%q) = %+v, %v", tool.Name, got, ok)
			}
			if tool.Parameters != nil && !json.Valid(tool.Parameters) {
				t.Fatalf("parameters %q", tool.Parameters)
			}
		}
	})
}

// sameAsSlowPath feeds events through two Streams, one with the fast path
// (fast.go) and one without, and fails unless every step's batch is the
// same.
func sameAsSlowPath(t *testing.T, in *RunInput, events [][]byte, opts Options) {
	t.Helper()
	fast, slow, lane := NewStream(in, opts), NewStream(in, opts), NewStream(in, opts)
	slow.slow = true
	// The fast stream also builds every tree from a hollow copy
	// (hollow.go), the slow one none. The lane stream offers each event
	// to PassThrough first, as the proxy does: what it takes must be what
	// Feed would have forwarded, byte for byte, with nothing else.
	fast.hollowAbove, slow.hollowAbove, lane.hollowAbove = 0, math.MaxInt, 0
	var fb, sb, lb Batch
	for i, e := range events {
		fast.Feed(context.Background(), e, &fb)
		slow.Feed(context.Background(), e, &sb)
		if typ, ok := lane.PassThrough(e); ok {
			lb.Reset()
			lb.InType, lb.Out = typ, append(lb.Out, Event{Type: typ, JSON: e})
		} else {
			lane.Feed(context.Background(), e, &lb)
		}
		if d := batchDiff(&fb, &sb); d != "" {
			t.Fatalf("event %d %q: fast path differs: %s\nevents:\n%s", i, e, d, bytes.Join(events, []byte("\n")))
		}
		if d := batchDiff(&lb, &sb); d != "" {
			t.Fatalf("event %d %q: PassThrough differs: %s\nevents:\n%s", i, e, d, bytes.Join(events, []byte("\n")))
		}
		if fb.Done {
			return
		}
	}
	fast.End(nil, &fb)
	slow.End(nil, &sb)
	lane.End(nil, &lb)
	if d := batchDiff(&fb, &sb); d != "" {
		t.Fatalf("End: fast path differs: %s", d)
	}
	if d := batchDiff(&lb, &sb); d != "" {
		t.Fatalf("End: PassThrough's stream differs: %s", d)
	}
}

func batchDiff(a, b *Batch) string {
	if a.InType != b.InType || a.Done != b.Done {
		return fmt.Sprintf("type/done %q/%v vs %q/%v", a.InType, a.Done, b.InType, b.Done)
	}
	if len(a.Out) != len(b.Out) {
		return fmt.Sprintf("%d events out vs %d", len(a.Out), len(b.Out))
	}
	for i := range a.Out {
		if a.Out[i].Type != b.Out[i].Type || !bytes.Equal(a.Out[i].JSON, b.Out[i].JSON) {
			return fmt.Sprintf("out[%d] %s %q vs %s %q", i, a.Out[i].Type, a.Out[i].JSON, b.Out[i].Type, b.Out[i].JSON)
		}
	}
	if fmt.Sprint(a.Notes) != fmt.Sprint(b.Notes) || fmt.Sprint(a.Calls) != fmt.Sprint(b.Calls) || fmt.Sprint(a.Run) != fmt.Sprint(b.Run) {
		return fmt.Sprintf("notes/calls/run %v %v %v vs %v %v %v", a.Notes, a.Calls, a.Run, b.Notes, b.Calls, b.Run)
	}
	return ""
}

// padInput returns the JSON object data with an unknown member first whose
// value takes it past hollowAbove, or nil when data is not a valid object.
func padInput(data []byte) []byte {
	body := bytes.TrimLeft(data, " \t\r\n")
	if !json.Valid(data) || len(body) == 0 || body[0] != '{' {
		return nil
	}
	rest := bytes.TrimLeft(body[1:], " \t\r\n")
	pad := `{"aguardPadding":"` + strings.Repeat("x", hollowAbove) + `"`
	if rest[0] != '}' {
		pad += ","
	}
	return append([]byte(pad), rest...)
}

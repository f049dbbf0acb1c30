package interop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// sse frames events as the AG-UI SSE binding does: "data: <json>\n\n".
func sse(events ...map[string]any) string {
	var b strings.Builder
	for _, e := range events {
		j, err := json.Marshal(e)
		if err != nil {
			panic(err)
		}
		fmt.Fprintf(&b, "data: %s\n\n", j)
	}
	return b.String()
}

type ev = map[string]any

var (
	runStarted  = ev{"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"}
	runFinished = ev{"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1"}
	callStart   = ev{"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "search", "parentMessageId": "m1"}
	callArgs    = ev{"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": `{"q":"go"}`}
	callEnd     = ev{"type": "TOOL_CALL_END", "toolCallId": "c1"}
)

func runFinishedWith(outcome ev) ev {
	e := ev{}
	for k, v := range runFinished {
		e[k] = v
	}
	e["outcome"] = outcome
	return e
}

// verdict is what one client is expected to make of a body.
type verdict struct {
	accepted    bool
	errContains string // substring of Result.Error when rejected
	warnings    string // substring of some warning; "" means no warnings
	runError    *RunError
	types       []string // delivered event types (rejected: at most these)
	terminal    string   // Terminal of the last run ("" when no run is expected)
	outcome     string   // OutcomeType of the last run
	pending     []string // PendingToolCallIDs of the last run (nil: none derived)
}

// TestBodyVerdicts pins that the harness tells acceptance from rejection, and
// an in-stream RUN_ERROR from both, for each official client.
func TestBodyVerdicts(t *testing.T) {
	callTypes := []string{"RUN_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"}
	withTypes := func(extra ...string) []string { return append(append([]string{}, callTypes...), extra...) }

	cases := []struct {
		name  string
		body  string
		v10   verdict
		v0058 verdict
	}{
		{
			name: "valid run",
			body: sse(runStarted,
				ev{"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
				ev{"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "héllo ✓"},
				ev{"type": "TEXT_MESSAGE_END", "messageId": "m1"},
				callStart, callArgs, callEnd,
				ev{"type": "TOOL_CALL_RESULT", "messageId": "tm1", "toolCallId": "c1", "content": "found"},
				runFinished),
			v10: verdict{accepted: true, terminal: "RUN_FINISHED", outcome: "success", pending: []string{},
				types: []string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
					"TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT", "RUN_FINISHED"}},
			v0058: verdict{accepted: true, terminal: "RUN_FINISHED", outcome: "success",
				types: []string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
					"TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT", "RUN_FINISHED"}},
		},
		{
			name:  "RUN_FINISHED with a tool call open",
			body:  sse(runStarted, callStart, callArgs, runFinished),
			v10:   verdict{errContains: "tool calls are still active: c1", types: callTypes[:3]},
			v0058: verdict{errContains: "tool calls are still active: c1", types: callTypes[:3]},
		},
		{
			name:  "pendingToolCallIds in the outcome",
			body:  sse(runStarted, callStart, callArgs, callEnd, runFinishedWith(ev{"type": "success", "pendingToolCallIds": []string{"c1"}})),
			v10:   verdict{accepted: true, terminal: "RUN_FINISHED", outcome: "success", pending: []string{"c1"}, types: withTypes("RUN_FINISHED")},
			v0058: verdict{errContains: "Unrecognized key(s) in object: 'pendingToolCallIds'", types: callTypes},
		},
		{
			name:  "pending call derived from the stream",
			body:  sse(runStarted, callStart, callArgs, callEnd, runFinished),
			v10:   verdict{accepted: true, terminal: "RUN_FINISHED", outcome: "success", pending: []string{"c1"}, types: withTypes("RUN_FINISHED")},
			v0058: verdict{accepted: true, terminal: "RUN_FINISHED", outcome: "success", types: withTypes("RUN_FINISHED")},
		},
		{
			name: "TOOL_CALL_RESULT with array content",
			body: sse(runStarted, callStart, callArgs, callEnd,
				ev{"type": "TOOL_CALL_RESULT", "messageId": "tm1", "toolCallId": "c1", "content": []ev{{"type": "text", "text": "found"}}},
				runFinished),
			v10:   verdict{accepted: true, terminal: "RUN_FINISHED", outcome: "success", pending: []string{}, types: withTypes("TOOL_CALL_RESULT", "RUN_FINISHED")},
			v0058: verdict{errContains: "/content: Expected string, received array", types: callTypes},
		},
		{
			name:  "unknown event type",
			body:  sse(runStarted, ev{"type": "VENDOR_X", "foo": 1}, runFinished),
			v10:   verdict{accepted: true, warnings: "Dropping unrecognised event 'VENDOR_X'", terminal: "RUN_FINISHED", outcome: "success", pending: []string{}, types: []string{"RUN_STARTED", "RUN_FINISHED"}},
			v0058: verdict{errContains: "/type: Invalid discriminator value", types: []string{"RUN_STARTED"}},
		},
		{
			name:  "RUN_ERROR only",
			body:  sse(ev{"type": "RUN_ERROR", "code": "E1", "message": "boom"}),
			v10:   verdict{accepted: true, runError: &RunError{Code: "E1", Message: "boom"}, types: []string{"RUN_ERROR"}},
			v0058: verdict{accepted: true, runError: &RunError{Code: "E1", Message: "boom"}, types: []string{"RUN_ERROR"}},
		},
		{
			name:  "RUN_ERROR ends a started run",
			body:  sse(runStarted, callStart, ev{"type": "RUN_ERROR", "message": "upstream died"}),
			v10:   verdict{accepted: true, runError: &RunError{Message: "upstream died"}, terminal: "RUN_ERROR", types: []string{"RUN_STARTED", "TOOL_CALL_START", "RUN_ERROR"}},
			v0058: verdict{accepted: true, runError: &RunError{Message: "upstream died"}, terminal: "RUN_ERROR", types: []string{"RUN_STARTED", "TOOL_CALL_START", "RUN_ERROR"}},
		},
		{
			name:  "frame that is not JSON",
			body:  sse(runStarted) + "data: {not json\n\n",
			v10:   verdict{errContains: "JSON", types: []string{"RUN_STARTED"}},
			v0058: verdict{errContains: "JSON", types: []string{"RUN_STARTED"}},
		},
	}

	input := json.RawMessage(`{"threadId":"t1","runId":"r1","tools":[{"name":"search","description":"Search.","parameters":{"type":"object"}}]}`)
	type slot struct {
		name   string
		client string
		want   verdict
	}
	var reqs []Request
	var slots []slot
	for _, c := range cases {
		for _, chunk := range []int{1, 0} { // byte-by-byte reads, then one read
			for _, cl := range []struct {
				client string
				want   verdict
			}{{Client10, c.v10}, {Client0058, c.v0058}} {
				reqs = append(reqs, Request{Mode: ModeBody, Client: cl.client, Input: input, Body: c.body, ChunkSize: chunk})
				slots = append(slots, slot{fmt.Sprintf("%s/%s/chunk=%d", c.name, cl.client, chunk), cl.client, cl.want})
			}
		}
	}

	results := runAll(t, reqs)
	for i, s := range slots {
		t.Run(s.name, func(t *testing.T) { checkVerdict(t, results[i], s.want) })
	}
}

func checkVerdict(t *testing.T, r *Result, want verdict) {
	t.Helper()
	if r.Accepted != want.accepted {
		t.Fatalf("accepted = %v, want %v (error %q, events %v)", r.Accepted, want.accepted, r.Error, r.EventTypes())
	}
	if want.accepted && r.Error != "" {
		t.Errorf("accepted run reports error %q", r.Error)
	}
	if !want.accepted && (r.Error == "" || !strings.Contains(r.Error, want.errContains)) {
		t.Errorf("error = %q, want it to contain %q", r.Error, want.errContains)
	}
	if !reflect.DeepEqual(r.RunError, want.runError) {
		t.Errorf("runError = %+v, want %+v", r.RunError, want.runError)
	}
	// A rejected run delivers only a prefix of the events before the failure:
	// the client drops events still queued for its (asynchronous) subscribers
	// when the pipeline errors, so how many arrive depends on read timing.
	got := r.EventTypes()
	if want.accepted && !reflect.DeepEqual(got, want.types) {
		t.Errorf("event types = %v, want %v", got, want.types)
	}
	if !want.accepted && (len(got) > len(want.types) || !reflect.DeepEqual(got, want.types[:len(got)])) {
		t.Errorf("event types = %v, want a prefix of %v", got, want.types)
	}
	if want.warnings == "" && len(r.Warnings) > 0 {
		t.Errorf("unexpected warnings %q", r.Warnings)
	}
	if want.warnings != "" && !strings.Contains(strings.Join(r.Warnings, "\n"), want.warnings) {
		t.Errorf("warnings %q lack %q", r.Warnings, want.warnings)
	}
	if len(r.ConsoleErrors) > 0 {
		t.Errorf("unexpected console errors %q", r.ConsoleErrors)
	}
	if want.terminal == "" && want.outcome == "" {
		if want.accepted && len(r.Runs) != 0 {
			t.Errorf("runs = %+v, want none", r.Runs)
		}
		return
	}
	if len(r.Runs) != 1 {
		t.Fatalf("runs = %+v, want one", r.Runs)
	}
	run := r.Runs[0]
	if run.RunID != "r1" || run.Terminal != want.terminal || run.OutcomeType() != want.outcome {
		t.Errorf("run = {%s %s %s}, want {r1 %s %s}", run.RunID, run.Terminal, run.Outcome, want.terminal, want.outcome)
	}
	if !reflect.DeepEqual(run.PendingToolCallIDs, want.pending) {
		t.Errorf("pendingToolCallIds = %#v, want %#v", run.PendingToolCallIDs, want.pending)
	}
}

// TestLive runs the real HttpAgent of each client against an HTTP server and
// checks the RunAgentInput each one POSTs.
func TestLive(t *testing.T) {
	body := sse(runStarted,
		ev{"type": "TEXT_MESSAGE_CHUNK", "messageId": "m1", "delta": "hi"},
		runFinished)

	var mu sync.Mutex
	posted := map[string]*http.Request{}
	bodies := map[string][]byte{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read request body: %v", err)
		}
		mu.Lock()
		posted[r.Header.Get("X-Interop-Case")] = r
		bodies[r.Header.Get("X-Interop-Case")] = b
		mu.Unlock()
		if r.URL.Path == "/fail" {
			http.Error(w, "agent down", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, body)
	}))
	defer srv.Close()

	input := `{
		"threadId": "t1",
		"runId": "r1",
		"state": {"step": 2},
		"messages": [{"id": "u1", "role": "user", "content": "find go"}],
		"tools": [{"name": "confirm", "description": "Ask the user.", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}],
		"context": [{"description": "locale", "value": "en"}],
		"forwardedProps": {"tenant": "a"}
	}`
	reqs := []Request{
		{Mode: ModeLive, Client: Client10, URL: srv.URL + "/agent", Input: json.RawMessage(input), Headers: map[string]string{"X-Interop-Case": "v10"}},
		{Mode: ModeLive, Client: Client0058, URL: srv.URL + "/agent", Input: json.RawMessage(input), Headers: map[string]string{"X-Interop-Case": "v0058"}},
		{Mode: ModeLive, Client: Client10, URL: srv.URL + "/fail", Input: json.RawMessage(input), Headers: map[string]string{"X-Interop-Case": "fail"}},
	}
	results := runAll(t, reqs)

	var in map[string]any
	if err := json.Unmarshal([]byte(input), &in); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		key             string
		protocolVersion any
	}{{"v10", "1.0"}, {"v0058", nil}} {
		t.Run(reqs[i].Client, func(t *testing.T) {
			r := results[i]
			if !r.Accepted {
				t.Fatalf("rejected: %s", r.Error)
			}
			want := []string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"}
			if got := r.EventTypes(); !reflect.DeepEqual(got, want) {
				t.Errorf("event types = %v, want %v", got, want)
			}
			mu.Lock()
			hr, raw := posted[tc.key], bodies[tc.key]
			mu.Unlock()
			if hr == nil {
				t.Fatal("server saw no request")
			}
			if hr.Method != http.MethodPost || hr.Header.Get("Accept") != "text/event-stream" || hr.Header.Get("Content-Type") != "application/json" {
				t.Errorf("request %s Accept=%q Content-Type=%q", hr.Method, hr.Header.Get("Accept"), hr.Header.Get("Content-Type"))
			}
			var sent map[string]any
			if err := json.Unmarshal(raw, &sent); err != nil {
				t.Fatalf("POSTed body is not JSON: %v: %s", err, raw)
			}
			if got := sent["protocolVersion"]; got != tc.protocolVersion {
				t.Errorf("protocolVersion = %#v, want %#v", got, tc.protocolVersion)
			}
			for _, k := range []string{"threadId", "runId", "state", "messages", "tools", "context", "forwardedProps"} {
				if !reflect.DeepEqual(sent[k], in[k]) {
					t.Errorf("POSTed %s = %#v, want %#v", k, sent[k], in[k])
				}
			}
			var reported map[string]any
			if err := json.Unmarshal(r.RequestBody, &reported); err != nil || !reflect.DeepEqual(reported, sent) {
				t.Errorf("reported requestBody %s differs from the POSTed %s (%v)", r.RequestBody, raw, err)
			}
			var msgs []map[string]any
			if err := json.Unmarshal(r.Messages, &msgs); err != nil || len(msgs) != 2 || msgs[1]["content"] != "hi" {
				t.Errorf("messages = %s (%v), want the user message and the assistant's \"hi\"", r.Messages, err)
			}
		})
	}
	t.Run("HTTP 500", func(t *testing.T) {
		r := results[2]
		if r.Accepted || !strings.Contains(r.Error, "HTTP 500") || !strings.Contains(r.Error, "agent down") {
			t.Errorf("accepted=%v error=%q, want a rejection naming HTTP 500", r.Accepted, r.Error)
		}
	})
}

func TestRequestValidation(t *testing.T) {
	for _, req := range []Request{
		{Mode: ModeBody, Client: "2.0.0"},
		{Mode: "stream", Client: Client10},
		{Mode: ModeLive, Client: Client10},
		{Mode: ModeBody, Client: Client10, Input: json.RawMessage(`{"threadId":`)},
	} {
		if _, err := Run(context.Background(), req); err == nil {
			t.Errorf("Run(%+v) succeeded, want an error", req)
		}
	}
}

func TestScriptInNeedsNodeModules(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "client.mjs"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := scriptIn(dir); !errors.Is(err, errNotInstalled) {
		t.Fatalf("scriptIn without node_modules = %v, want %v", err, errNotInstalled)
	}
	if err := os.Mkdir(filepath.Join(dir, "node_modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := scriptIn(dir); err != nil || got != filepath.Join(dir, "client.mjs") {
		t.Fatalf("scriptIn = %q, %v", got, err)
	}
}

func runAll(t *testing.T, reqs []Request) []*Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	results, err := RunAll(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	return results
}

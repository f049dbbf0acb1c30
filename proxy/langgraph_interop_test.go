package proxy

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/interop"
	"github.com/aguard/aguard/policy"
)

// The streams in testdata/langgraph have the shapes a LangGraph agent sends
// through the official LangGraph AG-UI adapter when its frontend tools are
// routed to the prebuilt ToolNode, which answers them itself with an error
// tool message: that made-up answer replayed one run later next to the
// application's real one; a call the adapter never streamed (text before
// it, a second call in one message), seen only in a snapshot; and a
// RUN_FINISHED whose runId is LangGraph's own, not RUN_STARTED's. Each
// scenario is two runs of one thread: <scenario>-0 leaves frontend calls
// pending (or, in "denied", one the policy declines), <scenario>-1 is the run
// in which the application answers them.
var langGraphScenarios = []string{"toolnode", "textfirst", "twocalls", "denied"}

// langGraphAgent serves testdata/langgraph/<runId>.sse, with {{thread}}
// replaced by the request's threadId and "{{answer:<id>}}" by the request's
// tool message answering call <id> (the agent replays what it was sent); an
// empty run for any other runId.
func langGraphAgent(t *testing.T) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			ThreadID, RunID string
			Messages        []json.RawMessage
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body, err := os.ReadFile(filepath.Join("testdata", "langgraph", filepath.Base(in.RunID)+".sse"))
		if err != nil {
			body = []byte(frame(`{"type":"RUN_STARTED","threadId":"{{thread}}","runId":"`+in.RunID+`"}`) +
				frame(`{"type":"RUN_FINISHED","threadId":"{{thread}}","runId":"`+in.RunID+`"}`))
		}
		text := strings.ReplaceAll(string(body), "{{thread}}", in.ThreadID)
		for _, m := range in.Messages {
			var tm struct{ Role, ToolCallID string }
			if json.Unmarshal(m, &tm) == nil && tm.Role == "tool" {
				text = strings.ReplaceAll(text, `"{{answer:`+tm.ToolCallID+`}}"`, string(m))
			}
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, text)
	}
}

// heldMessage is a message as the official clients hold it.
type heldMessage struct {
	ID         string `json:"id"`
	Role       string `json:"role"`
	Content    any    `json:"content"`
	ToolCallID string `json:"toolCallId"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"toolCalls"`
}

// unansweredCalls is what a consumer derives from the messages it holds: the
// calls of its assistant messages that no tool message answers, in order.
// answers maps every call to the tool messages answering it.
func unansweredCalls(t *testing.T, raw json.RawMessage) (unanswered []string, answers map[string][]heldMessage, msgs []heldMessage) {
	t.Helper()
	if err := json.Unmarshal(raw, &msgs); err != nil {
		t.Fatalf("messages: %v: %s", err, raw)
	}
	answers = map[string][]heldMessage{}
	for _, m := range msgs {
		if m.Role == "tool" {
			answers[m.ToolCallID] = append(answers[m.ToolCallID], m)
		}
	}
	for _, m := range msgs {
		for _, c := range m.ToolCalls {
			if len(answers[c.ID]) == 0 {
				unanswered = append(unanswered, c.ID)
			}
		}
	}
	return unanswered, answers, msgs
}

// TestLangGraphShapesThroughAguard runs each scenario live: the official
// client (1.0.0, and 0.0.58 through the 0.x bridge) posts to aguard, which
// sits in front of the agent with the default policy and a ledger, over
// loopback sockets. After the first run, the calls the client holds
// unanswered are exactly the ones aguard stated pending (1.0) and the ones
// it enforces: a next run that does not answer them gets 409 naming exactly
// them. After the application answers them, each frontend call ends with
// exactly the application's answer, and nothing is left pending.
func TestLangGraphShapesThroughAguard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	engine, err := policy.New(ctx, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, langGraphAgent(t), func(o *Options) { o.State = openStore(t, ""); o.Policy = engine })
	const tools = `[{"name":"confirm_action","description":"Ask the user to confirm an action",` +
		`"parameters":{"type":"object","properties":{"action":{"type":"string"}},"required":["action"]}}]`
	type run struct {
		scenario, client, thread string
	}
	var runs []run
	var first []interop.Request
	for _, sc := range langGraphScenarios {
		for _, client := range []string{interop.Client10, interop.Client0058} {
			r := run{sc, client, "thread-" + sc + "-" + client}
			runs = append(runs, r)
			first = append(first, interop.Request{Mode: interop.ModeLive, Client: client, URL: h.url + "/agent",
				Input: json.RawMessage(`{"threadId":"` + r.thread + `","runId":"` + sc + `-0","messages":[` +
					`{"id":"u-1","role":"user","content":"Please delete order 17 and refund order 9."}],"tools":` + tools + `,"context":[],"state":{}}`)})
		}
	}
	res0, err := interop.RunAll(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	wantPending := map[string][]string{
		"toolnode":  {"call_A1"},
		"textfirst": {"call_B1"},
		"twocalls":  {"call_C1", "call_C2"},
	}
	// The calls each thread ends with.
	wantCalls := map[string][]string{
		"toolnode":  {"call_A1"},
		"textfirst": {"call_B1"},
		"twocalls":  {"call_C1", "call_C2", "call_C3"},
		"denied":    {"call_D1"},
	}
	// Each frontend call ends with the application's answer: its own, or
	// the decline aguard gave for it, which the application sends on.
	wantAnswer := map[string]string{
		"call_A1": "answer-call_A1", "call_B1": "answer-call_B1", "call_C1": "answer-call_C1", "call_C2": "answer-call_C2",
		"call_D1": "aguard-declined-call_D1",
	}
	var second []interop.Request
	for i, r := range runs {
		res := res0[i]
		name := r.scenario + " with " + r.client
		if !res.Accepted {
			t.Fatalf("%s: the official client rejected aguard's stream: %s\nevents: %v", name, res.Error, res.EventTypes())
		}
		if len(res.Runs) != 1 || res.Runs[0].Terminal != "RUN_FINISHED" {
			t.Fatalf("%s: runs = %+v", name, res.Runs)
		}
		unanswered, answers, _ := unansweredCalls(t, res.Messages)
		msgs := rawMessages(t, res.Messages)
		if !slices.Equal(unanswered, wantPending[r.scenario]) {
			t.Errorf("%s: the client holds %v unanswered, want %v", name, unanswered, wantPending[r.scenario])
		}
		for call, ms := range answers {
			switch {
			case call == "call_C3": // the agent's own tool, answered by it
			case len(ms) == 1 && ms[0].ID == wantAnswer[call]: // aguard's decline
			default:
				t.Errorf("%s: the client holds answers %+v to frontend call %s", name, ms, call)
			}
		}
		if r.client == interop.Client10 && !slices.Equal(res.Runs[0].PendingToolCallIDs, unanswered) {
			t.Errorf("%s: RUN_FINISHED said %v pending, the client holds %v unanswered", name, res.Runs[0].PendingToolCallIDs, unanswered)
		}
		// A next run that ignores them is refused, naming exactly them.
		body, _ := json.Marshal(map[string]any{"threadId": r.thread, "runId": r.scenario + "-ignored", "messages": msgs, "tools": json.RawMessage(tools)})
		resp := h.post(t, ctx, "/agent", string(body))
		var refusal struct {
			Error struct {
				Code        string   `json:"code"`
				ToolCallIDs []string `json:"toolCallIds"`
			} `json:"error"`
		}
		json.NewDecoder(resp.Body).Decode(&refusal)
		resp.Body.Close()
		switch {
		case len(unanswered) == 0 && resp.StatusCode != http.StatusOK:
			t.Errorf("%s: the next run got %d %+v, want 200: nothing is pending", name, resp.StatusCode, refusal.Error)
		case len(unanswered) > 0 && (resp.StatusCode != http.StatusConflict || refusal.Error.Code != "unanswered_tool_calls" ||
			!slices.Equal(refusal.Error.ToolCallIDs, unanswered)):
			t.Errorf("%s: a run ignoring the pending calls got %d %+v, want 409 unanswered_tool_calls %v", name, resp.StatusCode, refusal.Error, unanswered)
		}
		// The application answers every call it holds unanswered.
		var next []any
		for _, m := range msgs {
			next = append(next, m)
		}
		for _, id := range unanswered {
			next = append(next, map[string]any{"id": "answer-" + id, "role": "tool", "toolCallId": id, "content": "confirmed by the user"})
		}
		in, _ := json.Marshal(map[string]any{"threadId": r.thread, "runId": r.scenario + "-1", "messages": next,
			"tools": json.RawMessage(tools), "context": []any{}, "state": map[string]any{}})
		second = append(second, interop.Request{Mode: interop.ModeLive, Client: r.client, URL: h.url + "/agent", Input: in})
	}
	if t.Failed() {
		return
	}
	res1, err := interop.RunAll(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range runs {
		res := res1[i]
		name := r.scenario + " with " + r.client + ", second run"
		if !res.Accepted {
			t.Fatalf("%s: the official client rejected aguard's stream: %s\nevents: %v", name, res.Error, res.EventTypes())
		}
		unanswered, answers, _ := unansweredCalls(t, res.Messages)
		msgs := rawMessages(t, res.Messages)
		if len(unanswered) != 0 {
			t.Errorf("%s: the client holds %v unanswered", name, unanswered)
		}
		for call, got := range answers {
			if call == "call_C3" {
				continue
			}
			if len(got) != 1 || got[0].ID != wantAnswer[call] {
				t.Errorf("%s: call %s ends with answers %+v, want exactly the application's, %s", name, call, got, wantAnswer[call])
			}
		}
		if calls := slices.Sorted(maps.Keys(answers)); !slices.Equal(calls, wantCalls[r.scenario]) {
			t.Errorf("%s: the client holds answers to %v, want %v", name, calls, wantCalls[r.scenario])
		}
		if r.client == interop.Client10 && len(res.Runs) == 1 && len(res.Runs[0].PendingToolCallIDs) != 0 {
			t.Errorf("%s: RUN_FINISHED said %v pending", name, res.Runs[0].PendingToolCallIDs)
		}
		// Nothing is pending for aguard either: a run after it goes through.
		body, _ := json.Marshal(map[string]any{"threadId": r.thread, "runId": r.scenario + "-2", "messages": msgs, "tools": json.RawMessage(tools)})
		resp := h.post(t, ctx, "/agent", string(body))
		got := readAll(t, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(got) != 2 {
			t.Errorf("%s: the run after it got %d %q, want 200 and its two events", name, resp.StatusCode, got)
		}
	}
}

// rawMessages decodes a client's messages, keeping every member.
func rawMessages(t *testing.T, m json.RawMessage) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	if err := json.Unmarshal(m, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

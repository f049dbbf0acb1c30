package proxy

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/interop"
	"github.com/aguard/aguard/policy"
)

// holdPolicy hides the agent's internal_lookup, holds every other call as
// it starts, denies confirm_order for order X at its end and an
// unadvertised call left unanswered when the run finishes.
const holdPolicy = `package aguard

default decision := {"action": "allow", "reason": "ok"}

decision := {"action": "hide"} if {
	input.phase == "tool_call_start"
	input.call.name == "internal_lookup"
}

decision := {"action": "hold"} if {
	input.phase == "tool_call_start"
	input.call.name != "internal_lookup"
}

decision := {"action": "deny", "reason": "order X is blocked"} if {
	input.phase == "tool_call_end"
	input.call.arguments.orderId == "X"
}

decision := {"action": "deny", "reason": "not advertised"} if {
	input.phase == "run_finished"
	not input.tool.advertised
}
`

// holdCorpus is agent streams with held and hidden calls. Call ids that
// start "no-" must never reach the consumer; "ok-" ones must.
var holdCorpus = []struct {
	name   string
	events []string
}{
	{"held agent call answered, text and a snapshot while it is held, frontend call held and allowed", []string{
		`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"ok-s1","toolCallName":"search","parentMessageId":"m1"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"looking"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"ok-s1","delta":"{\"q\":\"go\"}"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"ok-s1"}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u1","role":"user","content":"go"},{"id":"m1","role":"assistant","content":"looking","toolCalls":[{"id":"ok-s1","type":"function","function":{"name":"search","arguments":"{\"q\":\"go\"}"}}]}]}`,
		`{"type":"STEP_STARTED","stepName":"tools"}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"t1","toolCallId":"ok-s1","content":"found"}`,
		`{"type":"STEP_FINISHED","stepName":"tools"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"ok-c1","toolCallName":"confirm_order","parentMessageId":"m2"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"ok-c1","delta":"{\"orderId\":\"A\"}"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"ok-c1"}`,
		`{"type":"RUN_FINISHED","threadId":"thread-p","runId":"%r"}`}},
	{"frontend call held and denied, a snapshot carrying it waits and loses it", []string{
		`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"no-c1","toolCallName":"confirm_order","parentMessageId":"m1"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"no-c1","delta":"{\"orderId\":\"X\"}"}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u1","role":"user","content":"go"},{"id":"m1","role":"assistant","content":"ordering","toolCalls":[{"id":"no-c1","type":"function","function":{"name":"confirm_order","arguments":"{\"orderId\":\"X\"}"}}]}]}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"m2","role":"assistant"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"no-c1"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m2","delta":"done"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"m2"}`,
		`{"type":"RUN_FINISHED","threadId":"thread-p","runId":"%r"}`}},
	{"hidden agent call: chunks, result and snapshot traces", []string{
		`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","delta":"one moment"}`,
		`{"type":"TOOL_CALL_CHUNK","toolCallId":"no-h1","toolCallName":"internal_lookup","parentMessageId":"m1","delta":"{\"k\":"}`,
		`{"type":"TOOL_CALL_CHUNK","delta":"1}"}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"no-t1","toolCallId":"no-h1","content":"secret"}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u1","role":"user","content":"go"},{"id":"m1","role":"assistant","content":"one moment","toolCalls":[{"id":"no-h1","type":"function","function":{"name":"internal_lookup","arguments":"{\"k\":1}"}}]},{"id":"no-t1","role":"tool","toolCallId":"no-h1","content":"secret"}]}`,
		`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m2","delta":"here it is"}`,
		`{"type":"RUN_FINISHED","threadId":"thread-p","runId":"%r"}`}},
	{"unadvertised call held and left unanswered: declined at run end", []string{
		`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"no-u1","toolCallName":"rm_rf"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"no-u1","delta":"{}"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"no-u1"}`,
		`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","delta":"bye"}`,
		`{"type":"RUN_FINISHED","threadId":"thread-p","runId":"%r"}`}},
	{"hidden call denied: the run ends without a word of it", []string{
		`{"type":"RUN_STARTED","threadId":"thread-p","runId":"%r"}`,
		`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","delta":"hm"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"no-h2","toolCallName":"internal_lookup"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"no-h2","delta":"{\"orderId\":\"X\"}"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"no-h2"}`,
		`{"type":"RUN_FINISHED","threadId":"thread-p","runId":"%r"}`}},
}

var (
	mustShow  = regexp.MustCompile(`ok-[a-z0-9]+`)
	neverShow = regexp.MustCompile(`no-[a-z0-9]+`)
)

// shownCalls returns the "no-" call ids in events other than aguard's
// denial of a held call (which names the call, and nothing else of it).
func shownCalls(events []string) []string {
	var ids []string
	for _, e := range events {
		if !strings.Contains(e, `"name":"aguard.tool_call_denied"`) {
			ids = append(ids, neverShow.FindAllString(e, -1)...)
		}
	}
	return ids
}

// TestHeldAndHiddenCallsThroughAguardIntoOfficialClients runs agent streams
// with held and hidden calls through aguard into the official clients:
// @ag-ui/client 1.0.0 (body mode, on aguard's output with the pending list
// removed, so that the client derives its own, which must be the list aguard
// stated) and the legacy 0.0.58 (live, through the 0.x bridge). Both accept
// every stream; neither ever receives a denied or hidden call — not in an
// event, not in its messages — and both receive every allowed one.
func TestHeldAndHiddenCallsThroughAguardIntoOfficialClients(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, holdPolicy)
	engine, err := policy.New(context.Background(), policy.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string][]string{}
	legacyRuns := map[string]string{}
	for i, c := range holdCorpus {
		for _, legacy := range []bool{false, true} {
			run := "hold-" + string(rune('a'+i))
			if legacy {
				run += "-legacy"
				legacyRuns[run] = c.name
			}
			var evs []string
			for _, e := range c.events {
				evs = append(evs, strings.ReplaceAll(e, "%r", run))
			}
			runs[run] = evs
		}
	}
	h := newHarness(t, scriptedAgent(runs, nil), func(o *Options) { o.Policy = engine })

	var reqs []interop.Request
	var stated [][]string
	for i := range holdCorpus {
		run := "hold-" + string(rune('a'+i))
		resp := h.post(t, context.Background(), "/agent", confirmInput(run))
		got := readAll(t, resp.Body)
		resp.Body.Close()
		var body strings.Builder
		var pending []string
		for _, e := range got {
			var ev struct {
				Type    string
				Outcome struct{ PendingToolCallIds []string }
			}
			json.Unmarshal([]byte(e), &ev)
			if ev.Type == "RUN_FINISHED" {
				pending = ev.Outcome.PendingToolCallIds
				e = regexp.MustCompile(`,"outcome":\{"type":"success","pendingToolCallIds":\[[^\]]*\]\}`).ReplaceAllString(e, "")
			}
			body.WriteString("data: " + e + "\n\n")
		}
		if ids := shownCalls(got); len(ids) > 0 {
			t.Errorf("%s: aguard sent %v to the consumer:\n%s", holdCorpus[i].name, ids, body.String())
		}
		stated = append(stated, pending)
		reqs = append(reqs, interop.Request{Mode: interop.ModeBody, Client: interop.Client10,
			Input: json.RawMessage(confirmInput(run)), Body: body.String(), ChunkSize: 17})
	}
	legacyInput := func(run string) json.RawMessage {
		return json.RawMessage(strings.Replace(confirmInput(run), `"protocolVersion":"1.0",`, "", 1))
	}
	for i := range holdCorpus {
		run := "hold-" + string(rune('a'+i)) + "-legacy"
		reqs = append(reqs, interop.Request{Mode: interop.ModeLive, Client: interop.Client0058, URL: h.url + "/agent", Input: legacyInput(run)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	results, err := interop.RunAll(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range results {
		c := holdCorpus[i%len(holdCorpus)]
		client := interop.Client10
		if i >= len(holdCorpus) {
			client = interop.Client0058
		}
		if !res.Accepted {
			t.Errorf("%s: %s rejected aguard's output: %s\nevents: %v", c.name, client, res.Error, res.EventTypes())
			continue
		}
		var seen strings.Builder
		events := []string{string(res.Messages)}
		for _, e := range res.Events {
			seen.Write(e)
			events = append(events, string(e))
		}
		seen.Write(res.Messages)
		if ids := shownCalls(events); len(ids) > 0 {
			t.Errorf("%s: %s received %v", c.name, client, ids)
		}
		var want []string
		for _, e := range c.events {
			want = append(want, mustShow.FindAllString(e, -1)...)
		}
		for _, id := range slices.Compact(want) {
			if !strings.Contains(seen.String(), `"`+id+`"`) {
				t.Errorf("%s: %s never received the allowed call %s", c.name, client, id)
			}
		}
		if client == interop.Client10 {
			for _, r := range res.Runs {
				if r.Terminal == "RUN_FINISHED" && strings.Join(r.PendingToolCallIDs, ",") != strings.Join(stated[i], ",") {
					t.Errorf("%s: the client derived pending %v from what it saw, aguard stated %v", c.name, r.PendingToolCallIDs, stated[i])
				}
			}
		}
	}
}

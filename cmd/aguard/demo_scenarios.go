package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// scenario is one scripted run of the demo agent.
type scenario struct {
	name        string
	explain     string
	input       string   // the RunAgentInput the consumer sends
	agent       []string // the events the agent sends
	cutMidEvent bool     // the agent's connection ends inside an event
}

func (s scenario) runID() string {
	var in struct {
		RunID string `json:"runId"`
	}
	json.Unmarshal([]byte(s.input), &in)
	return in.RunID
}

// threadOf is the thread of a demo run: each scenario is a thread of its
// own, since aguard holds a thread's next run to what the last one left
// pending.
func threadOf(run string) string { return "thread-" + strings.TrimPrefix(run, "run-") }

const demoTools = `[{"name":"confirm_order","description":"Ask the user to confirm an order","parameters":{"type":"object","properties":{"orderId":{"type":"string"}},"required":["orderId"]}},` +
	`{"name":"transfer_funds","description":"Move money between the user's accounts","parameters":{"type":"object","properties":{"amount":{"type":"number"},"to":{"type":"string"}},"required":["amount","to"]}}]`

func demoInput(run string) string {
	return `{"threadId":"` + threadOf(run) + `","runId":"` + run + `","protocolVersion":"1.0","messages":[{"id":"u1","role":"user","content":"Please confirm order A-17"}],"tools":` + demoTools + `,"context":[],"state":{},"forwardedProps":{}}`
}

// legacyInput is what a 0.x client sends: no protocolVersion.
func legacyInput(run string) string {
	return `{"threadId":"` + threadOf(run) + `","runId":"` + run + `","messages":[{"id":"u1","role":"user","content":"Show me the Q3 chart"}],"tools":[],"context":[],"state":{},"forwardedProps":{}}`
}

func demoScenarios() []scenario {
	started := func(run string) string {
		return `{"type":"RUN_STARTED","threadId":"` + threadOf(run) + `","runId":"` + run + `"}`
	}
	finished := func(run string) string {
		return `{"type":"RUN_FINISHED","threadId":"` + threadOf(run) + `","runId":"` + run + `"}`
	}
	return []scenario{
		{
			name:    "A well-behaved run passes through untouched",
			explain: "Text, an agent-side tool answered in-stream: every event is forwarded byte for byte.",
			input:   demoInput("run-clean"),
			agent: []string{
				started("run-clean"),
				`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`,
				`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"Looking up A-17."}`,
				`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
				`{"type":"TOOL_CALL_START","toolCallId":"c-lookup","toolCallName":"lookup_order","parentMessageId":"m1"}`,
				`{"type":"TOOL_CALL_ARGS","toolCallId":"c-lookup","delta":"{\"id\":\"A-17\"}"}`,
				`{"type":"TOOL_CALL_END","toolCallId":"c-lookup"}`,
				`{"type":"TOOL_CALL_RESULT","messageId":"t1","toolCallId":"c-lookup","content":"2 items"}`,
				`{"type":"RUN_FINISHED","threadId":"thread-clean","runId":"run-clean","outcome":{"type":"success"}}`,
			},
		},
		{
			name: "The agent fabricates the answer to a frontend tool",
			explain: "confirm_order is the application's tool: only the application may answer it. " +
				"aguard drops the made-up result, so the call stays pending and the user is actually asked.",
			input: demoInput("run-fabricated"),
			agent: []string{
				started("run-fabricated"),
				`{"type":"TOOL_CALL_START","toolCallId":"c-confirm","toolCallName":"confirm_order"}`,
				`{"type":"TOOL_CALL_ARGS","toolCallId":"c-confirm","delta":"{\"orderId\":\"A-17\"}"}`,
				`{"type":"TOOL_CALL_END","toolCallId":"c-confirm"}`,
				`{"type":"TOOL_CALL_RESULT","messageId":"t1","toolCallId":"c-confirm","content":"Forwarded to client"}`,
				finished("run-fabricated"),
			},
		},
		{
			name: "The agent reports the wrong pending calls",
			explain: "RUN_FINISHED must name exactly the calls the run started and left unanswered. " +
				"aguard replaces the agent's list with the one the stream proves.",
			input: demoInput("run-pending"),
			agent: []string{
				started("run-pending"),
				`{"type":"TOOL_CALL_START","toolCallId":"c-confirm","toolCallName":"confirm_order"}`,
				`{"type":"TOOL_CALL_ARGS","toolCallId":"c-confirm","delta":"{\"orderId\":\"A-17\"}"}`,
				`{"type":"TOOL_CALL_END","toolCallId":"c-confirm"}`,
				`{"type":"RUN_FINISHED","threadId":"thread-pending","runId":"run-pending","outcome":{"type":"success","pendingToolCallIds":["c-old"]}}`,
			},
		},
		{
			name: "The agent calls a tool the application never advertised",
			explain: "delete_account is not one of the application's tools and the agent left it unanswered. " +
				"Unchecked, the application would be holding a call it cannot execute; aguard declines it before RUN_FINISHED.",
			input: demoInput("run-unadvertised"),
			agent: []string{
				started("run-unadvertised"),
				`{"type":"TOOL_CALL_START","toolCallId":"c-del","toolCallName":"delete_account"}`,
				`{"type":"TOOL_CALL_ARGS","toolCallId":"c-del","delta":"{\"user\":\"u-42\"}"}`,
				`{"type":"TOOL_CALL_END","toolCallId":"c-del"}`,
				finished("run-unadvertised"),
			},
		},
		{
			name: "The agent's own tool call is held until it is judged",
			explain: "search_web is not one of the application's tools: the policy holds the call as it starts. The text goes " +
				"ahead; when the result shows the agent ran it, the whole call follows unchanged. Declined, only the denial would.",
			input: demoInput("run-held"),
			agent: []string{started("run-held"),
				`{"type":"TOOL_CALL_START","toolCallId":"c-web","toolCallName":"search_web"}`,
				`{"type":"TOOL_CALL_ARGS","toolCallId":"c-web","delta":"{\"q\":\"A-17 status\"}"}`,
				`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`,
				`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"Searching…"}`, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
				`{"type":"TOOL_CALL_END","toolCallId":"c-web"}`,
				`{"type":"TOOL_CALL_RESULT","messageId":"t1","toolCallId":"c-web","content":"shipped"}`, finished("run-held")},
		},
		{
			name: "The agent sends arguments that break the tool's schema",
			explain: "confirm_order declares orderId as a string; the model sent a number. " +
				"The policy refuses to hand the application arguments it never agreed to, and says why.",
			input: demoInput("run-schema"),
			agent: []string{
				started("run-schema"),
				`{"type":"TOOL_CALL_START","toolCallId":"c-confirm","toolCallName":"confirm_order"}`,
				`{"type":"TOOL_CALL_ARGS","toolCallId":"c-confirm","delta":"{\"orderId\":17}"}`,
				`{"type":"TOOL_CALL_END","toolCallId":"c-confirm"}`,
				finished("run-schema"),
			},
		},
		{
			name: "The policy stops a dangerous call the agent runs itself",
			explain: "shell is the agent's own tool; aguard cannot decline it for the application, so it ends the run " +
				"with RUN_ERROR AGUARD_POLICY_DENIED and closes the agent's stream.",
			input: demoInput("run-shell"),
			agent: []string{
				started("run-shell"),
				`{"type":"TOOL_CALL_START","toolCallId":"c-sh","toolCallName":"shell"}`,
				`{"type":"TOOL_CALL_ARGS","toolCallId":"c-sh","delta":"{\"cmd\":\"rm -rf /var/data\"}"}`,
				`{"type":"TOOL_CALL_END","toolCallId":"c-sh"}`,
				`{"type":"TOOL_CALL_RESULT","messageId":"t1","toolCallId":"c-sh","content":"deleted"}`,
				finished("run-shell"),
			},
		},
		{
			name: "A 0.x client meets 1.0 content",
			explain: "The client sent no protocolVersion: it is on the 0.x line and would crash on content parts and on " +
				"pendingToolCallIds. aguard flattens the result to its text and announces what it dropped.",
			input: legacyInput("run-legacy"),
			agent: []string{
				started("run-legacy"),
				`{"type":"TOOL_CALL_START","toolCallId":"c-chart","toolCallName":"render_chart"}`,
				`{"type":"TOOL_CALL_ARGS","toolCallId":"c-chart","delta":"{\"quarter\":\"Q3\"}"}`,
				`{"type":"TOOL_CALL_END","toolCallId":"c-chart"}`,
				`{"type":"TOOL_CALL_RESULT","messageId":"t1","toolCallId":"c-chart","content":[{"type":"text","text":"Q3 revenue: "},{"type":"image","source":{"type":"url","value":"https://example.com/q3.png","mimeType":"image/png"}},{"type":"text","text":"up 12%"}]}`,
				`{"type":"RUN_FINISHED","threadId":"thread-legacy","runId":"run-legacy","outcome":{"type":"success","pendingToolCallIds":[]}}`,
			},
		},
		{
			name: "The agent breaks the protocol",
			explain: "Arguments for a call that was never started would crash the official client. " +
				"aguard ends the run with a RUN_ERROR that says why, and closes the agent's stream.",
			input: demoInput("run-violation"),
			agent: []string{
				started("run-violation"),
				`{"type":"TOOL_CALL_ARGS","toolCallId":"c-ghost","delta":"{}"}`,
				`{"type":"TOOL_CALL_END","toolCallId":"c-ghost"}`,
				finished("run-violation"),
			},
		},
		{
			name: "The agent dies mid-stream",
			explain: "A stream that stops without RUN_FINISHED must never read as a success. " +
				"aguard ends it with RUN_ERROR AGUARD_UPSTREAM_LOST.",
			input: demoInput("run-truncated"),
			agent: []string{
				started("run-truncated"),
				`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`,
				`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"Your order is"}`,
			},
			cutMidEvent: true,
		},
		{
			name:    "The consumer sends a malformed RunAgentInput",
			explain: "Nothing reaches the agent: the consumer gets HTTP 400 invalid_run_input naming the problem.",
			input:   `{"threadId":"thread-malformed","runId":"run-malformed","messages":"hello"}`,
		},
	}
}

// printScenario prints one scenario: the agent's events and the consumer's,
// aligned where they are the same event, and aguard's reasons.
func printScenario(w io.Writer, st style, n int, sc scenario, received []string, status int, why []string) {
	fmt.Fprintf(w, "\n%s\n", st.bold(fmt.Sprintf("%d. %s", n, sc.name)))
	fmt.Fprintf(w, "   %s\n\n", sc.explain)
	printExchange(w, st, sc, received, status, why)
}

// printExchange prints what the agent sent and what the consumer received
// for one run, and aguard's reasons.
func printExchange(w io.Writer, st style, sc scenario, received []string, status int, why []string) {
	if status != 200 {
		fmt.Fprintf(w, "   consumer received HTTP %d: %s\n", status, strings.Join(received, ""))
		return
	}
	const col = 58
	fmt.Fprintf(w, "   %-*s   %s\n", col, st.dim(pad("agent sent", col, st)), st.dim("consumer received"))
	sent := sc.agent
	if sc.cutMidEvent {
		sent = append(append([]string(nil), sent...), "")
	}
	for _, row := range align(sent, received) {
		left, right := "", ""
		if row.a >= 0 {
			left = summarize(sent[row.a])
			if sent[row.a] == "" {
				left = "(connection lost mid-event)"
			}
		}
		switch {
		case row.b < 0:
			right = st.red("✗ dropped")
		case row.a >= 0 && sent[row.a] == received[row.b]:
			right = st.dim("= same bytes")
		default:
			right = st.green(summarize(received[row.b]))
			if row.a >= 0 {
				right = st.green("~ " + summarize(received[row.b]))
			} else {
				right = st.green("+ " + summarize(received[row.b]))
			}
		}
		fmt.Fprintf(w, "   %s   %s\n", pad(clip(left, col), col, st), right)
	}
	for _, reason := range why {
		fmt.Fprintf(w, "   %s %s\n", st.bold("why:"), reason)
	}
}

// row pairs an agent event (a) with a consumer event (b); -1 is none.
type row struct{ a, b int }

// align pairs identical events by longest common subsequence. Between two
// matches, an agent event is paired with the next consumer event of the same
// type (shown as changed); what stays unpaired is shown as dropped or added.
func align(a, b []string) []row {
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var rows []row
	gap := func(ai, aj, bi, bj int) {
		for i := ai; i < aj; i++ {
			pair := -1
			for j := bi; j < bj; j++ {
				if eventType(a[i]) == eventType(b[j]) {
					pair = j
					break
				}
			}
			if pair < 0 {
				rows = append(rows, row{i, -1})
				continue
			}
			for ; bi < pair; bi++ {
				rows = append(rows, row{-1, bi})
			}
			rows = append(rows, row{i, pair})
			bi = pair + 1
		}
		for ; bi < bj; bi++ {
			rows = append(rows, row{-1, bi})
		}
	}
	i, j, gi, gj := 0, 0, 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			gap(gi, i, gj, j)
			rows = append(rows, row{i, j})
			i, j = i+1, j+1
			gi, gj = i, j
		case lcs[i+1][j] >= lcs[i][j+1]:
			i++
		default:
			j++
		}
	}
	gap(gi, len(a), gj, len(b))
	return rows
}

func eventType(ev string) string {
	var e struct {
		Type string `json:"type"`
	}
	json.Unmarshal([]byte(ev), &e)
	return e.Type
}

// summarize renders an event in one short line: its type and what matters.
func summarize(ev string) string {
	var e map[string]any
	if json.Unmarshal([]byte(ev), &e) != nil {
		return ev
	}
	s, _ := e["type"].(string)
	if v, ok := e["value"].(map[string]any); ok {
		for _, k := range []string{"toolCallId", "what"} {
			if x, ok := v[k].(string); ok {
				e[k] = x
			}
		}
	}
	for _, k := range []string{"name", "runId", "toolCallId", "toolCallName", "what", "messageId", "code", "delta", "content", "message"} {
		if v, ok := e[k].(string); ok {
			if k == "delta" || k == "content" || k == "message" {
				v = fmt.Sprintf("%q", v)
			}
			s += " " + v
		}
	}
	if o, ok := e["outcome"].(map[string]any); ok {
		if p, ok := o["pendingToolCallIds"]; ok {
			b, _ := json.Marshal(p)
			s += " pending=" + string(b)
		}
	}
	return s
}

func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func pad(s string, n int, _ style) string {
	if k := utf8.RuneCountInString(s); k < n {
		return s + strings.Repeat(" ", n-k)
	}
	return s
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// approvalStory is a frontend call the demo policy holds for a reviewer: the
// run that holds it, the reviewer's decision through the admin API, and the
// application's answer on the thread's next run.
type approvalStory struct {
	name, explain string
	callID        string
	approve       bool
	// early: the application first answers before anyone decided, and is
	// refused (409 awaiting_approval).
	early        bool
	held, answer scenario
	answered     string // what the application answers the call with
}

// storyRun is one run a story made and what came back.
type storyRun struct {
	sc       scenario
	received []string
	status   int
}

const (
	demoReviewer = "demo-reviewer"
	reviewCallID = "c-review"
)

func approvalStories() []approvalStory {
	approved := newStory("approve", "c-pay", `{"amount":250,"to":"savings"}`, "Transferred 250 to savings",
		"Done: 250 moved to savings.")
	approved.name = "A reviewer approves a held call"
	approved.explain = "The demo policy holds money transfers for a reviewer. The application cannot answer the call until " +
		"someone decides; once a reviewer approves it through the admin API, the application's answer reaches the agent as it is."
	approved.approve, approved.early = true, true

	rejected := newStory("reject", "c-pay-big", `{"amount":5000,"to":"external"}`, "Transferred 5000 to external",
		"The transfer was not made.")
	rejected.name = "A reviewer rejects a held call"
	rejected.explain = "Here the reviewer rejects the transfer. An application that answers anyway (it may not have heard " +
		"of the decision) does not get its answer through: aguard tells the agent the call was declined."
	return []approvalStory{approved, rejected}
}

// newStory builds the two runs of a story in thread thread-<key>: the agent
// calls transfer_funds with args; on the next run the application answers
// with answered and the agent replies with reply.
func newStory(key, callID, args, answered, reply string) approvalStory {
	thread, heldRun, answerRun := "thread-"+key, "run-"+key, "run-"+key+"-answer"
	user := `{"id":"u1","role":"user","content":"Move the money, please"}`
	assistant := `{"id":"a1","role":"assistant","toolCalls":[{"id":"` + callID + `","type":"function","function":{"name":"transfer_funds","arguments":` + strconv.Quote(args) + `}}]}`
	tool := `{"id":"t1","role":"tool","toolCallId":"` + callID + `","content":` + strconv.Quote(answered) + `}`
	return approvalStory{
		callID:   callID,
		answered: answered,
		held: scenario{
			name:  "the agent calls transfer_funds",
			input: storyInput(thread, heldRun, user),
			agent: []string{
				`{"type":"RUN_STARTED","threadId":"` + thread + `","runId":"` + heldRun + `"}`,
				`{"type":"TOOL_CALL_START","toolCallId":"` + callID + `","toolCallName":"transfer_funds","parentMessageId":"a1"}`,
				`{"type":"TOOL_CALL_ARGS","toolCallId":"` + callID + `","delta":` + strconv.Quote(args) + `}`,
				`{"type":"TOOL_CALL_END","toolCallId":"` + callID + `"}`,
				`{"type":"RUN_FINISHED","threadId":"` + thread + `","runId":"` + heldRun + `"}`,
			},
		},
		answer: scenario{
			name:  "the application answers on the next run",
			input: storyInput(thread, answerRun, user+","+assistant+","+tool),
			agent: []string{
				`{"type":"RUN_STARTED","threadId":"` + thread + `","runId":"` + answerRun + `"}`,
				`{"type":"TEXT_MESSAGE_START","messageId":"m2","role":"assistant"}`,
				`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m2","delta":` + strconv.Quote(reply) + `}`,
				`{"type":"TEXT_MESSAGE_END","messageId":"m2"}`,
				`{"type":"RUN_FINISHED","threadId":"` + thread + `","runId":"` + answerRun + `","outcome":{"type":"success"}}`,
			},
		},
	}
}

func storyInput(thread, run, messages string) string {
	return `{"threadId":"` + thread + `","runId":"` + run + `","protocolVersion":"1.0","messages":[` + messages + `],"tools":` + demoTools + `,"context":[],"state":{},"forwardedProps":{}}`
}

// reviewScenario is the run `aguard demo --keep` leaves waiting on the
// approvals page.
func reviewScenario() scenario {
	return newStory("review", reviewCallID, `{"amount":120,"to":"rent"}`, "", "").held
}

// storyScenarios are the runs the demo agent must know for the stories (and
// for --keep).
func storyScenarios(stories []approvalStory) []scenario {
	var out []scenario
	for _, s := range stories {
		out = append(out, s.held, s.answer)
	}
	return append(out, reviewScenario())
}

// play runs the story against d and prints it as scenario n.
func (s approvalStory) play(ctx context.Context, d *demoSetup, w io.Writer, st style, n int) ([]storyRun, error) {
	fmt.Fprintf(w, "\n%s\n", st.bold(fmt.Sprintf("%d. %s", n, s.name)))
	fmt.Fprintf(w, "   %s\n", s.explain)
	var runs []storyRun
	run := func(sc scenario) (storyRun, error) {
		received, status, err := demoRun(ctx, d.base+"/agent", sc.input)
		r := storyRun{sc, received, status}
		if err == nil {
			runs = append(runs, r)
		}
		return r, err
	}
	step := 'a'
	say := func(text string) {
		fmt.Fprintf(w, "\n   %s %s\n\n", st.bold(string(step)+")"), text)
		step++
	}

	say("The agent calls transfer_funds; the policy holds it for a reviewer.")
	r, err := run(s.held)
	if err != nil {
		return runs, err
	}
	printExchange(w, st, s.held, r.received, r.status, d.notes.take(s.held.runID()))

	if s.early {
		say("The application answers before anyone decided. Nothing reaches the agent:")
		r, err := run(s.answer)
		if err != nil {
			return runs, err
		}
		printExchange(w, st, s.answer, r.received, r.status, nil)
	}

	verb := map[bool]string{true: "approve", false: "reject"}[s.approve]
	say(fmt.Sprintf("A reviewer decides through the admin API (or the approvals page, /ui/approvals):"))
	status, rec, err := d.decide(ctx, s.callID, s.approve)
	if err != nil {
		return runs, err
	}
	fmt.Fprintf(w, "   POST /v1/tool-calls/%s/%s {\"approvedBy\":%q}\n", s.callID, verb, demoReviewer)
	line := fmt.Sprintf("→ HTTP %d: the call is now %s", status, rec.Status)
	if rec.EndReason != "" {
		line += fmt.Sprintf(" (%s)", rec.EndReason)
	}
	fmt.Fprintf(w, "   %s\n", st.green(line))

	say(fmt.Sprintf("The application answers %q on the thread's next run:", s.answered))
	r, err = run(s.answer)
	if err != nil {
		return runs, err
	}
	fmt.Fprintf(w, "   %s %s\n\n", st.dim("the agent received the tool message:"), agentReceived(d.agentSaw.get(s.answer.runID()), s.callID))
	printExchange(w, st, s.answer, r.received, r.status, d.notes.take(s.answer.runID()))
	return runs, nil
}

// decided is the part of the ledger record the demo prints.
type decided struct {
	Status    string `json:"status"`
	EndReason string `json:"endReason"`
}

// decide approves or rejects a held call through the admin API, as a
// reviewer would.
func (d *demoSetup) decide(ctx context.Context, id string, approve bool) (int, decided, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	verb := "reject"
	if approve {
		verb = "approve"
	}
	body, _ := json.Marshal(map[string]string{"approvedBy": demoReviewer, "reason": "decided in the demo"})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.adminBase+"/v1/tool-calls/"+id+"/"+verb, bytes.NewReader(body))
	if err != nil {
		return 0, decided{}, err
	}
	req.Header.Set("Authorization", "Bearer "+d.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, decided{}, fmt.Errorf("admin API: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, decided{}, fmt.Errorf("admin API: POST %s answered %d: %s", req.URL.Path, resp.StatusCode, bytes.TrimSpace(b))
	}
	var rec decided
	if err := json.Unmarshal(b, &rec); err != nil {
		return resp.StatusCode, decided{}, fmt.Errorf("admin API: %w", err)
	}
	return resp.StatusCode, rec, nil
}

// agentReceived renders the tool message for callID in the RunAgentInput the
// agent received.
func agentReceived(input []byte, callID string) string {
	var in struct {
		Messages []struct {
			Role       string `json:"role"`
			ToolCallID string `json:"toolCallId"`
			Content    any    `json:"content"`
			Error      string `json:"error"`
		} `json:"messages"`
	}
	if input == nil || json.Unmarshal(input, &in) != nil {
		return "(nothing: the run never reached the agent)"
	}
	for _, m := range in.Messages {
		if m.Role == "tool" && m.ToolCallID == callID {
			c, _ := json.Marshal(m.Content)
			s := "content " + string(c)
			if m.Error != "" {
				s += fmt.Sprintf(", error %q", m.Error)
			}
			return s
		}
	}
	return "(no tool message for " + strings.TrimSpace(callID) + ")"
}

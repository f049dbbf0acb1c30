package agui

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// checkConsumerView checks what a consumer received (the output of an
// enforcing Stream fed against input in) against what aguard promises about
// tool calls, following the stream as the official client does:
//
//   - every tool message (in a snapshot or the input echo) and every
//     TOOL_CALL_RESULT answering a frontend call is the application's own —
//     a tool message of the input for that call, same id — or aguard's
//     decline;
//   - no signal the agent forged reaches the consumer as aguard's: a CUSTOM
//     named aguard.* is aguard's own (no "forged" member in its value, as
//     the fuzz generator's forgeries have), and a RUN_ERROR with an
//     AGUARD_* code is aguard's (the stream's last event, not the agent's
//     "forged" one);
//   - at each RUN_FINISHED with a success outcome (or none), the pending
//     list names exactly the calls — frontend or not: a call held back or
//     hidden, and denied, is one the consumer never saw — the consumer first
//     saw in that run and received no answer for in it (a streamed call is answered by
//     a TOOL_CALL_RESULT only, as the protocol counts it). Calls the input
//     answered are left out: an agent that restarts one makes the two views
//     differ by the protocol's own rules.
func checkConsumerView(in *RunInput, outs [][]byte) error {
	type toolCall struct {
		ID       string `json:"id"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	type message struct {
		ID         string     `json:"id"`
		Role       string     `json:"role"`
		ToolCallID string     `json:"toolCallId"`
		ToolCalls  []toolCall `json:"toolCalls"`
	}
	type event struct {
		Type         string          `json:"type"`
		Name         string          `json:"name"`
		Code         string          `json:"code"`
		Message      string          `json:"message"`
		MessageID    string          `json:"messageId"`
		ToolCallID   *string         `json:"toolCallId"`
		ToolCallName string          `json:"toolCallName"`
		Value        json.RawMessage `json:"value"`
		Messages     []message       `json:"messages"`
		Input        *struct {
			Messages []message `json:"messages"`
		} `json:"input"`
		Outcome *struct {
			Type    string   `json:"type"`
			Pending []string `json:"pendingToolCallIds"`
		} `json:"outcome"`
	}
	if in == nil {
		in = &RunInput{}
	}
	frontend := map[string]bool{}
	seen := map[string]bool{}
	for id, f := range in.calls {
		seen[id] = true
		frontend[id] = f
	}
	inputAnswered := func(id string) bool { return len(in.answers[id]) > 0 }
	own := func(call, mid string) bool {
		for _, i := range in.answers[call] {
			if in.ToolMessages[i].ID == mid {
				return true
			}
		}
		return mid == "aguard-declined-"+call
	}
	// firstThisRun: the calls first seen in this run, and whether in
	// replayed messages (a snapshot, the echo) rather than streamed.
	firstThisRun := map[string]bool{}
	// Answers received in this run, by TOOL_CALL_RESULT and in replayed
	// messages. A streamed call is answered by a TOOL_CALL_RESULT only, as
	// the protocol and the official client count it.
	byResult, byReplay := map[string]bool{}, map[string]bool{}
	sawCall := func(id, name string, replayed bool) {
		if in.isFrontendName(name) {
			frontend[id] = true
		}
		if !seen[id] {
			seen[id] = true
			firstThisRun[id] = replayed
		}
	}
	answer := func(call, mid, where string) error {
		if frontend[call] && !own(call, mid) {
			return fmt.Errorf("%s: frontend call %q answered by %q, which is not the application's answer", where, call, mid)
		}
		return nil
	}
	replay := func(msgs []message, where string) error {
		for _, m := range msgs {
			for _, tc := range m.ToolCalls {
				sawCall(tc.ID, tc.Function.Name, true)
			}
		}
		for _, m := range msgs {
			if m.Role == "tool" {
				if err := answer(m.ToolCallID, m.ID, where); err != nil {
					return err
				}
				byReplay[m.ToolCallID] = true
			}
		}
		return nil
	}
	for i, raw := range outs {
		var ev event
		if err := json.Unmarshal(raw, &ev); err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
		where := fmt.Sprintf("event %d (%s)", i, ev.Type)
		switch ev.Type {
		case tRunStarted:
			clear(firstThisRun)
			clear(byResult)
			clear(byReplay)
			if ev.Input != nil {
				if err := replay(ev.Input.Messages, where); err != nil {
					return err
				}
			}
		case tMessagesSnapshot:
			if err := replay(ev.Messages, where); err != nil {
				return err
			}
		case tToolStart, tToolChunk:
			if ev.ToolCallID != nil {
				sawCall(*ev.ToolCallID, ev.ToolCallName, false)
			}
		case tToolResult:
			if ev.ToolCallID == nil {
				return fmt.Errorf("%s: no toolCallId", where)
			}
			if err := answer(*ev.ToolCallID, ev.MessageID, where); err != nil {
				return err
			}
			byResult[*ev.ToolCallID] = true
		case tCustom:
			if strings.HasPrefix(ev.Name, "aguard.") {
				var v map[string]json.RawMessage
				_ = json.Unmarshal(ev.Value, &v)
				if _, forged := v["forged"]; forged || (ev.Name != "aguard.tool_call_denied" && ev.Name != "aguard.approval_required") {
					return fmt.Errorf("%s: the agent's %s reached the consumer", where, raw)
				}
			}
		case tRunError:
			if strings.HasPrefix(ev.Code, "AGUARD_") && (i != len(outs)-1 || ev.Message == "forged") {
				return fmt.Errorf("%s: a RUN_ERROR %s that is not aguard's reached the consumer", where, ev.Code)
			}
		case tRunFinished:
			if ev.Outcome != nil && ev.Outcome.Type != "success" {
				continue
			}
			var stated, derived []string
			if ev.Outcome != nil {
				for _, id := range ev.Outcome.Pending {
					if _, first := firstThisRun[id]; first && !inputAnswered(id) {
						stated = append(stated, id)
					}
				}
			}
			for id, replayed := range firstThisRun {
				if !byResult[id] && !(replayed && byReplay[id]) && !inputAnswered(id) {
					derived = append(derived, id)
				}
			}
			slices.Sort(stated)
			slices.Sort(derived)
			if !slices.Equal(stated, derived) {
				return fmt.Errorf("%s: pending calls stated %q, the consumer holds %q unanswered", where, stated, derived)
			}
		}
	}
	return nil
}

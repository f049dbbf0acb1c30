package proxy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aguard/aguard/agui"
	"github.com/aguard/aguard/state"
	"github.com/aguard/aguard/webhook"
)

// threadRefusal is a request-side refusal: HTTP 409 with a code and ids.
type threadRefusal struct {
	code, message, key string
	ids                []string
}

// checkThread holds a run to what earlier runs of its thread told the
// consumer (design §3, request side), before anything reaches the agent:
//
//   - "A thread that continues MUST answer every one of them first: the next
//     run's messages carry a tool message per call" (seed 000): a pending
//     call without a tool message refuses the run (unanswered_tool_calls);
//   - a tool message for a call whose approval is undecided refuses it
//     (awaiting_approval);
//   - after an interrupted run, resume must cover every interrupt and may
//     not resolve an expired one (uncovered_interrupts).
//
// Answers aguard must not forward as they are (approval rejected or timed
// out, past the call's client deadline) are returned to be rewritten to a
// decline with error set; answers it accepts are recorded. When the store
// cannot be read, the run is let through and the failure logged: the ledger
// being unreachable must not stop every thread.
func (p *Proxy) checkThread(ctx context.Context, in *agui.RunInput) (*threadRefusal, map[string]agui.Answer) {
	store := p.opt.State
	th, err := store.GetThread(ctx, in.ThreadID)
	if err != nil {
		p.log.Warn("thread state unavailable; run forwarded unchecked", "threadId", in.ThreadID, "err", err)
		return nil, nil
	}
	answers := map[string]*agui.ToolMessage{}
	for i := range in.ToolMessages {
		answers[in.ToolMessages[i].ToolCallID] = &in.ToolMessages[i]
	}
	var missing []string
	for _, id := range th.PendingCalls {
		if answers[id] == nil {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return &threadRefusal{errUnansweredToolCalls, fmt.Sprintf(
			"the last run of thread %q left tool calls pending that this input does not answer: every pending call needs a tool message", in.ThreadID),
			"toolCallIds", missing}, nil
	}
	if r := checkInterrupts(th, in, time.Now()); r != nil {
		return r, nil
	}

	now := time.Now()
	var awaiting []string
	type update struct {
		id     string
		status state.Status
		reason string
		tm     *agui.ToolMessage
	}
	var updates []update
	rewrites := map[string]agui.Answer{}
	for _, tm := range in.ToolMessages {
		c, err := store.GetCall(ctx, tm.ToolCallID)
		if err != nil {
			continue // a call aguard never saw, or the store is unreachable
		}
		switch {
		case c.Status == state.StatusRequiresConfirmation && c.RequiresApprovalAt != nil && now.After(*c.RequiresApprovalAt):
			updates = append(updates, update{c.ID, state.StatusTimedOut, "approval timeout", nil})
			rewrites[c.ID] = decline("approval timeout")
		case c.Status == state.StatusRequiresConfirmation:
			awaiting = append(awaiting, c.ID)
		case c.Status == state.StatusCancelled && c.EndReason == "approval rejected",
			c.Status == state.StatusTimedOut:
			rewrites[c.ID] = decline(c.EndReason)
		case !c.Status.Terminal() && c.ClientToolDeadlineAt != nil && now.After(*c.ClientToolDeadlineAt):
			updates = append(updates, update{c.ID, state.StatusTimedOut, "client tool deadline passed", nil})
			rewrites[c.ID] = decline("client tool deadline passed")
		case !c.Status.Terminal():
			tm := tm
			if tm.HasError {
				updates = append(updates, update{c.ID, state.StatusFailed, tm.Error, &tm})
			} else {
				updates = append(updates, update{c.ID, state.StatusCompleted, "", &tm})
			}
		}
	}
	if len(awaiting) > 0 {
		return &threadRefusal{errAwaitingApproval,
			"this input answers tool calls whose approval has not been decided yet", "toolCallIds", awaiting}, nil
	}
	for _, u := range updates {
		c, err := store.UpdateCall(ctx, u.id, func(c *state.ToolCall) error {
			if c.Status.Terminal() {
				return nil
			}
			if u.tm != nil {
				c.ResultJSON = resultJSON(u.tm.Content)
				at := now
				c.ExecutedAt = &at
			}
			c.End(u.status, u.reason, now)
			return nil
		})
		if err != nil && !errors.Is(err, state.ErrQueued) {
			p.log.Warn("could not record the answer to a tool call", "toolCallId", u.id, "err", err)
			continue
		}
		if p.opt.Notifier != nil && c != nil && c.Status.Terminal() {
			p.opt.Notifier.Notify(webhook.TypeToolCallCompleted, c)
		}
	}
	return nil, rewrites
}

// decline is the answer aguard forwards in place of one it must not.
func decline(reason string) agui.Answer {
	return agui.Answer{Content: "Declined by aguard: " + reason + ".", Error: reason}
}

// checkInterrupts enforces resume coverage of the thread's last run.
func checkInterrupts(th *state.Thread, in *agui.RunInput, now time.Time) *threadRefusal {
	if len(th.Interrupts) == 0 {
		return nil
	}
	status := map[string]string{}
	for _, r := range in.Resume {
		status[r.InterruptID] = r.Status
	}
	var uncovered, expired []string
	for _, it := range th.Interrupts {
		st, ok := status[it.ID]
		if !ok {
			uncovered = append(uncovered, it.ID)
			continue
		}
		if exp, err := time.Parse(time.RFC3339, it.ExpiresAt); err == nil && st == "resolved" && now.After(exp) {
			expired = append(expired, it.ID)
		}
	}
	switch {
	case len(uncovered) > 0:
		return &threadRefusal{errUncoveredInterrupts, fmt.Sprintf(
			"the last run of thread %q ended interrupted; resume must cover every interrupt (missing: %s)", in.ThreadID, strings.Join(uncovered, ", ")),
			"interruptIds", uncovered}
	case len(expired) > 0:
		return &threadRefusal{errUncoveredInterrupts,
			"resume resolves interrupts that have expired; an expired interrupt can only be cancelled", "interruptIds", expired}
	}
	return nil
}

package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aguard/aguard/agui"
	"github.com/aguard/aguard/state"
)

// threadRefusal is a request-side refusal: an HTTP status with a code and
// ids.
type threadRefusal struct {
	status             int
	code, message, key string
	ids                []string
}

// checkThread holds a run to what earlier runs of its thread told the
// consumer (the README's request-side errors), before anything reaches the
// agent:
//
//   - "A thread that continues MUST answer every one of them first: the
//     next run's messages carry a tool message per call" (AG-UI tool calls,
//     https://docs.ag-ui.com): a pending call without a tool message refuses
//     the run (409 unanswered_tool_calls);
//   - a tool message for a call whose approval is undecided refuses it (409
//     awaiting_approval);
//   - after an interrupted run, resume must cover every interrupt and may
//     not resolve an expired one (409 uncovered_interrupts).
//
// A tool message answers only a call of the input's own thread: an id that
// names another thread's call is a call aguard does not know here.
// Answers aguard must not forward as they are (approval rejected, timed out
// or lost, past the call's client deadline) are returned to be rewritten to
// a decline with error set; answers it accepts are recorded. The state
// package's lifecycle judges each answer (state.ThreadView.Judge).
//
// The thread and every answered record are read in one round trip, and what
// is recorded is written in one more, whatever the number of tool messages.
// When the store cannot vouch for the thread (Redis unreachable or lost
// data, and nothing of the thread in memory), a run that carries tool
// history is refused (503 ledger_unavailable): the thread may have calls
// pending or held that this input does not honour. A run without tool
// history cannot answer anything, and goes through.
func (p *Proxy) checkThread(ctx context.Context, in *agui.RunInput) (*threadRefusal, map[string]agui.Answer) {
	store := p.opt.State
	ids := make([]string, 0, len(in.ToolMessages))
	seen := make(map[string]bool, len(in.ToolMessages))
	for _, tm := range in.ToolMessages {
		if !seen[tm.ToolCallID] {
			seen[tm.ToolCallID] = true
			ids = append(ids, tm.ToolCallID)
		}
	}
	view, err := store.ReadThread(ctx, in.ThreadID, ids)
	if err != nil {
		if in.HasToolHistory() {
			p.log.Warn("thread state unavailable; a run with tool history is refused", "threadId", in.ThreadID, "err", err)
			return &threadRefusal{status: http.StatusServiceUnavailable, code: errLedgerUnavailable, message: fmt.Sprintf(
				"aguard cannot vouch for the state of thread %q right now (its ledger is unreachable or lost data), and this input carries tool history that must be checked against it; retry shortly", in.ThreadID)}, nil
		}
		p.log.Warn("thread state unavailable; a run without tool history is forwarded", "threadId", in.ThreadID, "err", err)
		return nil, nil
	}
	th := view.Thread
	var missing []string
	for _, id := range th.PendingCalls {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return &threadRefusal{http.StatusConflict, errUnansweredToolCalls, fmt.Sprintf(
			"the last run of thread %q left tool calls pending that this input does not answer: every pending call needs a tool message", in.ThreadID),
			"toolCallIds", missing}, nil
	}
	now := store.Now()
	if r := checkInterrupts(th, in, now); r != nil {
		return r, nil
	}

	var awaiting []string
	var changes []state.Change
	rewrites := map[string]agui.Answer{}
	judged := make(map[string]bool, len(ids))
	for _, tm := range in.ToolMessages {
		if judged[tm.ToolCallID] {
			continue // one verdict per call; a rewrite applies to each of its messages
		}
		judged[tm.ToolCallID] = true
		v := view.Judge(tm.ToolCallID, tm.Content, tm.Error, tm.HasError, now)
		switch v.Action {
		case state.AnswerAwait:
			awaiting = append(awaiting, tm.ToolCallID)
		case state.AnswerDecline:
			rewrites[tm.ToolCallID] = decline(v.Reason)
		}
		if v.Set {
			changes = append(changes, state.Change{ID: tm.ToolCallID, Transition: v.Transition})
		}
	}
	if len(awaiting) > 0 {
		return &threadRefusal{http.StatusConflict, errAwaitingApproval,
			"this input answers tool calls whose approval has not been decided yet", "toolCallIds", awaiting}, nil
	}
	for i, r := range store.ApplyAnswers(ctx, view, changes) {
		switch {
		case r.Err != nil && errors.Is(r.Err, state.ErrTransition):
			p.log.Info("tool call changed while its answer was checked", "threadId", in.ThreadID, "toolCallId", changes[i].ID, "err", r.Err)
			continue
		case r.Err != nil && !errors.Is(r.Err, state.ErrQueued):
			p.log.Warn("could not record the answer to a tool call", "threadId", in.ThreadID, "toolCallId", changes[i].ID, "err", r.Err)
			continue
		}
		if p.opt.Notifier != nil && r.Call != nil && r.Call.Status.Terminal() {
			store.Tell(p.opt.Notifier, state.CallEnded, r.Call)
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
		return &threadRefusal{http.StatusConflict, errUncoveredInterrupts, fmt.Sprintf(
			"the last run of thread %q ended interrupted; resume must cover every interrupt (missing: %s)", in.ThreadID, strings.Join(uncovered, ", ")),
			"interruptIds", uncovered}
	case len(expired) > 0:
		return &threadRefusal{http.StatusConflict, errUncoveredInterrupts,
			"resume resolves interrupts that have expired; an expired interrupt can only be cancelled", "interruptIds", expired}
	}
	return nil
}

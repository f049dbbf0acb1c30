package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/aguard/aguard/agui"
	"github.com/aguard/aguard/state"
	"github.com/aguard/aguard/webhook"
)

// syncWriteTimeout bounds the wait for Redis before a RUN_FINISHED goes out;
// past it the write is queued and the stream goes on.
const syncWriteTimeout = 2 * time.Second

// ledger records one stream's tool calls and runs in the state store, from
// the facts the Pipeline reports. It runs on the stream's goroutine, before
// the step's events are written, so that whatever RUN_FINISHED tells the
// consumer is pending is in the store (in Redis, when reachable) before the
// consumer reads it.
type ledger struct {
	store             *state.Store
	notify            Notifier // nil: no webhooks
	in                *agui.RunInput
	clientToolTimeout time.Duration
	log               *slog.Logger
	now               func() time.Time
	// calls are the records of the calls this stream started, by id.
	calls map[string]*state.ToolCall
}

func newLedger(store *state.Store, notify Notifier, in *agui.RunInput, clientToolTimeout time.Duration, log *slog.Logger) *ledger {
	return &ledger{store: store, notify: notify, in: in, clientToolTimeout: clientToolTimeout, log: log, now: time.Now,
		calls: map[string]*state.ToolCall{}}
}

// record applies one pipeline step's facts to the ledger.
func (l *ledger) record(ctx context.Context, o *Output) {
	if len(o.Calls) == 0 && o.Run.Kind == "" {
		return // most events: nothing about calls or runs
	}
	now := l.now()
	for i := range o.Calls {
		ev := &o.Calls[i]
		c := l.apply(ctx, ev, now)
		if c == nil {
			continue
		}
		l.put(ctx, c)
		switch {
		case ev.Kind == agui.CallStarted:
			l.tell(webhook.TypeToolCallStarted, c)
		case c.Status == state.StatusRequiresConfirmation && ev.Kind == agui.CallDecided:
			l.tell(webhook.TypeApprovalRequired, c)
		case c.Status.Terminal():
			l.tell(webhook.TypeToolCallCompleted, c)
		}
	}
	if o.Run.Kind != "" {
		l.runEnded(ctx, &o.Run, now)
	}
}

// apply updates the record of ev's call and returns it, or nil when there
// is nothing to write.
func (l *ledger) apply(ctx context.Context, ev *agui.CallEvent, now time.Time) *state.ToolCall {
	c := l.calls[ev.ID]
	if ev.Kind == agui.CallStarted {
		c = &state.ToolCall{ID: ev.ID, Name: ev.Name, Status: state.StatusPending, IsClientTool: ev.Frontend,
			ThreadID: l.in.ThreadID, RunID: l.in.RunID, CreatedAt: now}
		if t, ok := l.in.Tool(ev.Name); ok {
			c.Description = t.Description
			c.ParametersJSONSchema = json.RawMessage(t.Parameters)
		}
		l.calls[ev.ID] = c
		return c
	}
	if c == nil {
		// A result for a call of an earlier run (a resumed run answers
		// the original id): update the record the store has.
		if ev.Kind != agui.CallAnswered {
			return nil
		}
		got, err := l.store.GetCall(ctx, ev.ID)
		if err != nil {
			return nil
		}
		c = got
		l.calls[ev.ID] = c
	}
	switch ev.Kind {
	case agui.CallArgumentsComplete:
		// The store keeps argumentsJson only when the text is a JSON object
		// and fills argumentsDigest from the text (state.ToolCall).
		c.ArgumentsText = string(ev.Arguments)
		c.ArgumentsJSON = json.RawMessage(c.ArgumentsText)
		c.ArgumentsDigest = ""
		if !c.IsClientTool {
			c.Status = state.StatusExecuting // the agent runs its own tools
		}
	case agui.CallDecided:
		c.DecisionID = ev.Verdict.DecisionID
		switch ev.Verdict.Action {
		case agui.ActionDeny:
			c.End(state.StatusFailed, "denied by policy: "+ev.Verdict.Reason, now)
		case agui.ActionRequireApproval:
			if at, err := time.Parse(time.RFC3339, ev.Verdict.RequiresApprovalAt); err == nil && c.IsClientTool {
				c.Status = state.StatusRequiresConfirmation
				c.RequiresApprovalAt = &at
			}
		}
	case agui.CallAnswered:
		if c.Status.Terminal() {
			return nil
		}
		c.ResultJSON = resultJSON(ev.Content)
		c.ExecutedAt = &now
		c.End(state.StatusCompleted, "", now)
	}
	return c
}

// runEnded writes how a run ended, and the thread's pending calls, in one
// synchronous write.
func (l *ledger) runEnded(ctx context.Context, run *agui.RunEnd, now time.Time) {
	th := &state.Thread{ID: l.in.ThreadID, LastRunID: run.RunID}
	var writes []*state.ToolCall
	pending := map[string]bool{}
	if run.Kind == "finished" && run.Outcome != "cancelled" {
		for _, id := range run.Pending {
			pending[id] = true
		}
		for _, it := range run.Interrupts {
			th.Interrupts = append(th.Interrupts, state.Interrupt{ID: it.ID, ExpiresAt: it.ExpiresAt})
		}
	}
	for _, id := range run.Pending {
		c := l.calls[id]
		if c == nil || c.Status.Terminal() || !pending[id] {
			continue
		}
		th.PendingCalls = append(th.PendingCalls, id)
		if c.Status == state.StatusRequiresConfirmation {
			// Its record belongs to the reviewers now: a decision may
			// already have been made on any replica, and this copy must not
			// overwrite it.
			continue
		}
		// Dispatched to the application (or, for a call the agent left
		// unanswered and the policy let stand, handed to it), which has
		// until the deadline to answer (seed 003, clientToolDeadlineAt).
		c.Status = state.StatusExecuting
		deadline := now.Add(l.clientToolTimeout)
		c.ClientToolDeadlineAt = &deadline
		writes = append(writes, c)
	}
	// Whatever else this stream started and did not finish ends with the run.
	reason := "run ended with the call open"
	switch {
	case run.Kind == "error":
		reason = "run failed"
		if run.Code != "" {
			reason += ": " + run.Code
		}
	case run.Outcome == "cancelled":
		reason = "run cancelled"
	}
	for id, c := range l.calls {
		if !c.Status.Terminal() && !pending[id] {
			c.End(state.StatusCancelled, reason, now)
			writes = append(writes, c)
			l.tell(webhook.TypeToolCallCompleted, c)
		}
	}
	clear(l.calls)
	ctx, cancel := context.WithTimeout(ctx, syncWriteTimeout)
	defer cancel()
	if err := l.store.PutCallsSync(ctx, writes, th); err != nil {
		if errors.Is(err, state.ErrQueued) {
			l.log.Warn("the pending calls of this run are queued, not yet in redis; other replicas cannot see them until it returns",
				"pending", th.PendingCalls)
			return
		}
		l.log.Error("could not record the end of the run", "err", err)
	}
}

func (l *ledger) tell(eventType string, c *state.ToolCall) {
	if l.notify != nil {
		l.notify.Notify(eventType, c)
	}
}

func (l *ledger) put(ctx context.Context, c *state.ToolCall) {
	if err := l.store.PutCall(ctx, c); err != nil {
		l.log.Error("could not record tool call", "toolCallId", c.ID, "err", err)
	}
}

// resultJSON maps a result's content onto seed 003's resultJson, which is an
// object: a string becomes {"content": "…"}, a list of parts
// {"content": […]}.
func resultJSON(content []byte) json.RawMessage {
	if len(content) == 0 {
		return nil
	}
	b, err := json.Marshal(map[string]json.RawMessage{"content": json.RawMessage(content)})
	if err != nil {
		return nil
	}
	return b
}

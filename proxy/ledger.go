package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/aguard/aguard/agui"
	"github.com/aguard/aguard/state"
)

// syncWriteTimeout bounds the wait for Redis before a RUN_FINISHED goes out;
// past it the write is queued and the stream goes on.
const syncWriteTimeout = 2 * time.Second

// ledger records one stream's tool calls and runs in the state store, from
// the facts the Pipeline reports. It runs on the stream's goroutine, before
// the step's events are written, so that whatever RUN_FINISHED tells the
// consumer is pending is in the store (in Redis, when reachable) before the
// consumer reads it.
//
// It changes records only through the lifecycle's transitions (package
// state): it applies them to the records it owns (the calls this stream
// started), and asks the store for a compare-and-set on records others may
// change (a call held for approval, which reviewers decide on any replica).
// Every record it touches is of the stream's own thread.
type ledger struct {
	store             *state.Store
	notify            state.Notifier // nil: no webhooks
	in                *agui.RunInput
	clientToolTimeout time.Duration
	log               *slog.Logger
	now               func() time.Time // the store's clock, by which deadlines are judged
	// calls are the records of the calls this stream started, by id.
	calls map[string]*state.ToolCall
	// registered: the run is in the store's runs registry, so that another
	// replica ends its open calls if this one dies.
	registered bool
	// requestedBy is the authenticated consumer's subject, recorded on
	// every call the stream starts ("" when aguard authenticates no one).
	requestedBy string
}

func newLedger(store *state.Store, notify state.Notifier, in *agui.RunInput, clientToolTimeout time.Duration, log *slog.Logger) *ledger {
	return &ledger{store: store, notify: notify, in: in, clientToolTimeout: clientToolTimeout, log: log, now: store.Now,
		calls: map[string]*state.ToolCall{}}
}

func (l *ledger) ref(id string) state.Ref { return state.Ref{ThreadID: l.in.ThreadID, ID: id} }

func (l *ledger) run() state.RunRef { return state.RunRef{ThreadID: l.in.ThreadID, RunID: l.in.RunID} }

// record applies one pipeline step's facts to the ledger.
func (l *ledger) record(ctx context.Context, o *Output) {
	if len(o.Calls) == 0 && o.Run.Kind == "" {
		return // most events: nothing about calls or runs
	}
	now := l.now()
	for i := range o.Calls {
		l.event(ctx, &o.Calls[i], now)
	}
	if o.Run.Kind != "" {
		l.runEnded(ctx, &o.Run, now)
	}
}

// event records what happened to one call.
func (l *ledger) event(ctx context.Context, ev *agui.CallEvent, now time.Time) {
	if ev.Kind == agui.CallStarted {
		if !l.registered {
			l.store.RunStarted(ctx, l.run())
			l.registered = true
		}
		c := state.NewCall(l.ref(ev.ID), l.in.RunID, ev.Name, ev.Frontend, now)
		c.RequestedBy = l.requestedBy
		if t, ok := l.in.Tool(ev.Name); ok {
			c.Description = t.Description
			c.ParametersJSONSchema = json.RawMessage(t.Parameters)
		}
		l.calls[ev.ID] = c
		l.put(ctx, c)
		l.tell(state.CallStarted, c)
		return
	}
	c := l.calls[ev.ID]
	if c == nil {
		// A result for a call of an earlier run of this thread (a resumed
		// run answers the original id): update the record the store has.
		if ev.Kind != agui.CallAnswered {
			return
		}
		got, err := l.store.GetCall(ctx, l.ref(ev.ID))
		if err != nil {
			return
		}
		c = got
		l.calls[ev.ID] = c
	}
	var t state.Transition
	switch ev.Kind {
	case agui.CallArgumentsComplete:
		t = state.ArgumentsComplete(ev.Arguments)
	case agui.CallDecided:
		t = l.decided(c, ev.Verdict, now)
	case agui.CallAnswered:
		t = state.Answer(ev.Content, "", false, now)
	default:
		return
	}
	if err := t.To(c); err != nil {
		l.log.DebugContext(ctx, "tool call event does not apply to its record", "toolCallId", ev.ID, "err", err)
		return
	}
	c.UpdatedAt = now // as the webhook tells it; the store stamps its write
	l.put(ctx, c)
	switch {
	case c.Status == state.StatusRequiresConfirmation && ev.Kind == agui.CallDecided:
		l.tell(state.CallHeld, c)
	case c.Status.Terminal():
		l.tell(state.CallEnded, c)
	}
}

// decided is the transition a verdict, as the stream applied it, makes. A
// frontend call held for approval takes the place the hold gate reserved for
// it in the store; any other verdict leaves that place unused (a
// require_approval the stream cannot hold, for a call the agent executes
// itself, reaches the ledger as the denial the stream made of it).
func (l *ledger) decided(c *state.ToolCall, v agui.Verdict, now time.Time) state.Transition {
	d := state.PolicyDecision{ID: v.DecisionID, Revision: v.PolicyRevision, Reason: v.Reason}
	if v.Action == agui.ActionRequireApproval {
		if at, err := time.Parse(time.RFC3339, v.RequiresApprovalAt); err == nil && c.IsClientTool {
			return state.Hold(at, d)
		}
	}
	l.store.ReleaseHold(state.RefOf(c))
	if v.Action == agui.ActionDeny {
		return state.Deny(d, now)
	}
	return state.Allow(d)
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
			// overwrite it. The thread remembers it was held, so that an
			// answer is never let through if the record is lost.
			th.Approvals = append(th.Approvals, id)
			continue
		}
		// Dispatched to the application (or, for a call the agent left
		// unanswered and the policy let stand, handed to it), which has
		// until the deadline to answer (clientToolDeadlineAt).
		if err := state.Dispatch(now, l.clientToolTimeout).To(c); err == nil {
			writes = append(writes, c)
		}
	}
	// Whatever else this stream started and did not finish ends with the run.
	cause, detail := state.CauseRunEnded, ""
	switch {
	case run.Kind == "error":
		cause, detail = state.CauseRunFailed, run.Code
	case run.Outcome == "cancelled":
		cause = state.CauseRunCancelled
	}
	held := l.endOpen(cause, detail, pending, now, &writes)
	ctx, cancel := context.WithTimeout(ctx, syncWriteTimeout)
	defer cancel()
	if err := l.store.PutCallsSync(ctx, writes, th); err != nil {
		if errors.Is(err, state.ErrQueued) {
			l.log.WarnContext(ctx, "the pending calls of this run are queued, not yet in redis; other replicas cannot see them until it returns",
				"pending", th.PendingCalls)
		} else {
			l.log.ErrorContext(ctx, "could not record the end of the run", "err", err)
		}
	}
	l.endHeld(ctx, held, cause, detail, now)
	l.unregister(ctx)
}

// endOpen ends the open calls of this stream that are not pending, adding
// the ones it owns to writes; it returns the held ones, which reviewers may
// be deciding elsewhere: they end through the store (endHeld).
func (l *ledger) endOpen(cause state.EndCause, detail string, pending map[string]bool, now time.Time, writes *[]*state.ToolCall) (held []state.Ref) {
	for id, c := range l.calls {
		if c.Status.Terminal() || pending[id] {
			continue
		}
		if c.Status == state.StatusRequiresConfirmation {
			held = append(held, state.RefOf(c))
			continue
		}
		if err := state.EndWithRun(cause, detail, now).To(c); err == nil {
			*writes = append(*writes, c)
			l.tell(state.CallEnded, c)
		}
	}
	clear(l.calls)
	return held
}

// endHeld ends held calls with the run, each a compare-and-set: a decision a
// reviewer made meanwhile wins.
func (l *ledger) endHeld(ctx context.Context, held []state.Ref, cause state.EndCause, detail string, now time.Time) {
	for _, r := range held {
		c, err := l.store.Apply(ctx, r, state.EndWithRun(cause, detail, now))
		switch {
		case err == nil || errors.Is(err, state.ErrQueued):
			l.tell(state.CallEnded, c)
		case errors.Is(err, state.ErrTransition):
		default:
			l.log.WarnContext(ctx, "could not end a held tool call with its run", "toolCallId", r.ID, "err", err)
		}
	}
}

// close is called when the stream is over, however it ended. A run whose
// end the ledger did not see (the consumer left) is cancelled: its open
// calls end, and it leaves the runs registry.
func (l *ledger) close(ctx context.Context, end string) {
	if len(l.calls) > 0 {
		detail := "the stream ended: " + end
		if end == "consumer_gone" {
			detail = "the consumer disconnected"
		}
		now := l.now()
		var writes []*state.ToolCall
		held := l.endOpen(state.CauseRunCancelled, detail, nil, now, &writes)
		wctx, cancel := context.WithTimeout(ctx, syncWriteTimeout)
		if err := l.store.PutCallsSync(wctx, writes, nil); err != nil && !errors.Is(err, state.ErrQueued) {
			l.log.ErrorContext(ctx, "could not record the end of the run", "err", err)
		}
		l.endHeld(wctx, held, state.CauseRunCancelled, detail, now)
		cancel()
	}
	l.unregister(ctx)
}

func (l *ledger) unregister(ctx context.Context) {
	if l.registered {
		l.store.RunEnded(ctx, l.run())
		l.registered = false
	}
}

func (l *ledger) tell(n state.Notice, c *state.ToolCall) {
	if l.notify != nil && c != nil {
		l.notify.Notify(n, c)
	}
}

func (l *ledger) put(ctx context.Context, c *state.ToolCall) {
	if err := l.store.PutCall(ctx, c); err != nil {
		l.log.ErrorContext(ctx, "could not record tool call", "toolCallId", c.ID, "err", err)
	}
}

// holdGate puts a stream's verdicts through the ledger's protected memory: a
// frontend call the policy holds for approval must have a place there
// (state.Store.ReserveHold), or the hold could be evicted and the call let
// through. When there is none, the require_approval becomes a deny, with a
// reason that says so, logged; the store counts it
// (aguard_state_holds_refused_total).
type holdGate struct {
	agui.Decider
	store  *state.Store
	thread string
	log    *slog.Logger
}

// Decide implements agui.Decider.
func (g holdGate) Decide(ctx context.Context, c *agui.Call) agui.Verdict {
	v := g.Decider.Decide(ctx, c)
	if v.Action != agui.ActionRequireApproval || !c.Frontend {
		return v
	}
	if err := g.store.ReserveHold(state.Ref{ThreadID: g.thread, ID: c.ID}, len(c.Arguments)); err != nil {
		g.log.Warn("approval required, but the ledger cannot hold more calls; the call is denied",
			"toolCallId", c.ID, "decisionId", v.DecisionID, "err", err)
		return agui.Verdict{Action: agui.ActionDeny, DecisionID: v.DecisionID, PolicyRevision: v.PolicyRevision,
			Reason: "approval required, but aguard cannot hold more calls for approval now (its protected ledger memory is full)"}
	}
	return v
}

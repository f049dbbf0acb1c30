package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/aguard/aguard/agui"
	"github.com/aguard/aguard/state"
)

// ledger records one stream's tool calls and runs in the state store, from
// the facts the Pipeline reports. It runs on the stream's goroutine, before
// the step's events are written, and never waits for Redis there (README,
// "Bounded under every fault"): every change is written behind the stream
// (state.Store.Record), except the end of a run that RUN_FINISHED reports,
// whose write (the calls it says are pending, dispatched, and the thread)
// it waits for at most the store's RedisTimeout, so that the consumer reads
// RUN_FINISHED once Redis has it whenever Redis answers in time. When Redis
// does not, RUN_FINISHED goes out with the write queued, held in this
// replica's memory (protected: never evicted) and retried until Redis has
// it; it is logged and counted.
//
// It changes records only through the lifecycle's transitions (package
// state): it applies them to the records it owns (the calls this stream
// started; each change makes a new record, Transition.Next, which the store
// takes over, so one copy of a call's arguments serves the ledger and the
// store), and asks the store for a compare-and-set on records others may
// change (a call held for approval, which reviewers decide on any replica;
// a call of an earlier run): those need Redis round trips, and run after
// the events, in order, on a goroutine of their own (after). Every record
// it touches is of the stream's own thread.
type ledger struct {
	store             *state.Store
	notify            state.Notifier // nil: no webhooks
	in                *agui.RunInput
	clientToolTimeout time.Duration
	log               *slog.Logger
	now               func() time.Time // the store's clock, by which deadlines are judged
	// calls are the records of the calls this stream started, by id: the
	// store's records, read here, never changed.
	calls map[string]*state.ToolCall
	// registered: the run is in the store's runs registry, so that another
	// replica ends its open calls if this one dies.
	registered bool
	// requestedBy is the authenticated consumer's subject, recorded on
	// every call the stream starts ("" when aguard authenticates no one).
	requestedBy string
	after       after
}

func newLedger(store *state.Store, notify state.Notifier, in *agui.RunInput, clientToolTimeout time.Duration, log *slog.Logger) *ledger {
	return &ledger{store: store, notify: notify, in: in, clientToolTimeout: clientToolTimeout, log: log, now: store.Now,
		calls: map[string]*state.ToolCall{}}
}

func (l *ledger) ref(id string) state.Ref { return state.Ref{ThreadID: l.in.ThreadID, ID: id} }

func (l *ledger) run() state.RunRef { return state.RunRef{ThreadID: l.in.ThreadID, RunID: l.in.RunID} }

// recordCalls applies what one pipeline step reports of calls to the
// ledger; it never waits for Redis. The end of a run, which may, is
// runEnded.
func (l *ledger) recordCalls(ctx context.Context, o *Output) {
	if len(o.Calls) == 0 {
		return // most events: nothing about calls
	}
	now := l.now()
	for i := range o.Calls {
		l.event(ctx, &o.Calls[i], now)
	}
}

// event records what happened to one call.
func (l *ledger) event(ctx context.Context, ev *agui.CallEvent, now time.Time) {
	if ev.Kind == agui.CallStarted {
		if !l.registered {
			l.store.RunStarted(l.run())
			l.registered = true
		}
		c := state.NewCall(l.ref(ev.ID), l.in.RunID, ev.Name, ev.Frontend, now)
		c.RequestedBy = l.requestedBy
		if t, ok := l.in.Tool(ev.Name); ok {
			c.Description = t.Description
			c.ParametersJSONSchema = json.RawMessage(t.Parameters)
		}
		if l.put(ctx, c) {
			l.tell(state.CallStarted, c)
		}
		return
	}
	c := l.calls[ev.ID]
	if c == nil {
		// A result for a call of an earlier run of this thread (a resumed
		// run answers the original id): a compare-and-set on the record
		// the store has, after the events.
		if ev.Kind == agui.CallAnswered {
			l.answerEarlier(ctx, ev.ID, bytes.Clone(ev.Content), now)
		}
		return
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
	next, err := t.Next(c)
	if err != nil {
		l.log.DebugContext(ctx, "tool call event does not apply to its record", "toolCallId", ev.ID, "err", err)
		return
	}
	next.UpdatedAt = now // as the webhook tells it; the store stamps its write
	if !l.put(ctx, next) {
		return
	}
	switch {
	case next.Status == state.StatusRequiresConfirmation && ev.Kind == agui.CallDecided:
		l.tell(state.CallHeld, next)
	case next.Status.Terminal():
		l.tell(state.CallEnded, next)
	}
}

// answerEarlier records the answer to a call this stream did not start.
func (l *ledger) answerEarlier(ctx context.Context, id string, content []byte, now time.Time) {
	r := l.ref(id)
	l.after.do(ctx, l.log, len(content), true, func(ctx context.Context) {
		c, err := l.store.Apply(ctx, r, state.Answer(content, "", false, now))
		switch {
		case err == nil || errors.Is(err, state.ErrQueued):
			l.tell(state.CallEnded, c)
		case errors.Is(err, state.ErrTransition), errors.Is(err, state.ErrNotFound):
		default:
			l.log.WarnContext(ctx, "could not record the answer to a tool call of an earlier run", "toolCallId", id, "err", err)
		}
	})
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

// msgRunEndQueued is logged when a RUN_FINISHED goes out before Redis has
// its write.
const msgRunEndQueued = "run end queued for redis"

// runEnded records how a run ended, and the thread's pending calls, in one
// write. For a RUN_FINISHED it waits for Redis at most the store's
// RedisTimeout; a RUN_ERROR's write is behind the stream like any other.
func (l *ledger) runEnded(ctx context.Context, run *agui.RunEnd) {
	now := l.now()
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
		if next, err := state.Dispatch(now, l.clientToolTimeout).Next(c); err == nil {
			writes = append(writes, next)
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
	if run.Kind == "finished" {
		// With nothing left to do after the events, the run leaves the
		// registry right behind its last writes, not a write delay later.
		var ended []state.RunRef
		if l.registered && len(held) == 0 && l.after.idle() {
			ended, l.registered = []state.RunRef{l.run()}, false
		}
		wctx, cancel := context.WithTimeout(ctx, l.store.RedisTimeout())
		err := l.store.RecordSync(wctx, writes, th, ended...)
		cancel()
		switch {
		case errors.Is(err, state.ErrQueued):
			l.log.InfoContext(ctx, msgRunEndQueued, "pending", th.PendingCalls, "err", err,
				"detail", "Redis did not acknowledge the run's end within --redis-timeout; this replica holds it and writes it when Redis answers; other replicas see it then")
		case err != nil:
			l.log.ErrorContext(ctx, "could not record the end of the run", "err", err)
		}
	} else if err := l.store.Record(writes, th); err != nil {
		l.log.ErrorContext(ctx, "could not record the end of the run", "err", err)
	}
	l.tellEnded(writes)
	l.endHeld(ctx, held, cause, detail, now)
	l.unregister()
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
		if next, err := state.EndWithRun(cause, detail, now).Next(c); err == nil {
			*writes = append(*writes, next)
		}
	}
	clear(l.calls)
	return held
}

// endHeld ends held calls with the run, each a compare-and-set (a decision
// a reviewer made meanwhile wins), after the events.
func (l *ledger) endHeld(ctx context.Context, held []state.Ref, cause state.EndCause, detail string, now time.Time) {
	if len(held) == 0 {
		return
	}
	l.after.do(ctx, l.log, 0, false, func(ctx context.Context) {
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
	})
}

// close is called when the stream is over, however it ended. A run whose
// end the ledger did not see (the consumer left) is cancelled: its open
// calls end, and it leaves the runs registry. Nothing here waits for Redis
// either: the consumer's connection may carry its next request at once.
func (l *ledger) close(ctx context.Context, end string) {
	if len(l.calls) > 0 {
		detail := "the stream ended: " + end
		if end == "consumer_gone" {
			detail = "the consumer disconnected"
		}
		now := l.now()
		var writes []*state.ToolCall
		held := l.endOpen(state.CauseRunCancelled, detail, nil, now, &writes)
		if err := l.store.Record(writes, nil); err != nil {
			l.log.ErrorContext(ctx, "could not record the end of the run", "err", err)
		}
		l.tellEnded(writes)
		l.endHeld(ctx, held, state.CauseRunCancelled, detail, now)
	}
	l.unregister()
}

// unregister withdraws the run from the runs registry once the work queued
// after the events is done (until then, if this replica dies, another one
// must still find the run).
func (l *ledger) unregister() {
	if !l.registered {
		return
	}
	l.registered = false
	run := l.run()
	if !l.after.then(func() { l.store.RunEnded(run) }) {
		l.store.RunEnded(run) // nothing waits: withdraw it now
	}
}

// tell sends the webhook for c's change once the store has written c's
// record (state.Store.Tell): the receiver may read it from any replica.
func (l *ledger) tell(n state.Notice, c *state.ToolCall) {
	if l.notify != nil {
		l.store.Tell(l.notify, n, c)
	}
}

// tellEnded tells of the calls among writes that ended, once recorded.
func (l *ledger) tellEnded(writes []*state.ToolCall) {
	for _, c := range writes {
		if c.Status.Terminal() {
			l.tell(state.CallEnded, c)
		}
	}
}

// put records c behind the stream; the store takes it over, and the ledger
// keeps reading it as the call's record. It reports whether c was recorded.
func (l *ledger) put(ctx context.Context, c *state.ToolCall) bool {
	if err := l.store.Record([]*state.ToolCall{c}, nil); err != nil {
		l.log.ErrorContext(ctx, "could not record tool call", "toolCallId", c.ID, "err", err)
		return false
	}
	l.calls[c.ID] = c
	return true
}

// after runs a stream's ledger work that needs Redis round trips
// (compare-and-sets) off the stream's goroutine, in order, one goroutine
// per stream while there is work and none otherwise. Each piece of work
// gets afterTimeout. The answers to earlier runs' calls that wait are
// bounded per stream (afterMaxWork, afterMaxBytes); beyond, one is dropped
// and logged, and goes unrecorded: the call keeps its status and its
// deadline, and is never let through by it. The end of a run's held calls
// and its withdrawal from the registry, one each per stream, always wait.
type after struct {
	mu      sync.Mutex
	work    []afterWork
	bytes   int
	running bool
}

type afterWork struct {
	ctx  context.Context // the stream's, for its values: fn gets afterTimeout from the time it runs
	size int
	fn   func(context.Context)
}

const (
	afterTimeout  = 30 * time.Second
	afterMaxWork  = 1024
	afterMaxBytes = 16 << 20
)

// do queues fn (holding size bytes; bounded: subject to the bounds), and
// starts the goroutine if none runs.
func (a *after) do(ctx context.Context, log *slog.Logger, size int, bounded bool, fn func(context.Context)) {
	a.mu.Lock()
	if bounded && (len(a.work) >= afterMaxWork || a.bytes+size > afterMaxBytes) {
		a.mu.Unlock()
		log.WarnContext(ctx, "ledger work after the events is full; an answer to an earlier run's call goes unrecorded",
			"queued", afterMaxWork, "bytes", afterMaxBytes)
		return
	}
	a.work = append(a.work, afterWork{ctx, size, fn})
	a.bytes += size
	start := !a.running
	a.running = true
	a.mu.Unlock()
	if start {
		go a.run()
	}
}

// idle reports whether no work is queued or under way.
func (a *after) idle() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.running
}

// then queues fn behind the work under way, and reports true; with none
// under way it reports false and does not run fn.
func (a *after) then(fn func()) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.running {
		return false
	}
	a.work = append(a.work, afterWork{ctx: context.Background(), fn: func(context.Context) { fn() }})
	return true
}

func (a *after) run() {
	for {
		a.mu.Lock()
		if len(a.work) == 0 {
			a.running = false
			a.mu.Unlock()
			return
		}
		w := a.work[0]
		a.work = a.work[1:]
		a.bytes -= w.size
		a.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), afterTimeout)
		w.fn(ctx)
		cancel()
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

package agui

import (
	"context"
	"slices"

	"github.com/aguard/aguard/internal/jsonedit"
	"github.com/valyala/fastjson"
)

// Stream is the state machine for one consumer response stream. It reads each
// upstream event, checks it against the AG-UI 1.0 schema and sequence rules,
// applies the tool-call rules (answers to frontend calls that are not the
// application's dropped, calls first seen in replayed messages started,
// pending list set), keeps aguard's own signal names its own, and says what
// the consumer must receive.
//
// A Stream is not safe for concurrent use; one goroutine feeds it.
type Stream struct {
	in   *RunInput
	opts Options

	p  fastjson.Parser
	sc scanner
	// mp parses the replayed messages a hollow copy left out, one at a
	// time (msgText, the text of their array in the event; hollow.go).
	mp      fastjson.Parser
	msgText []byte

	cbuf []byte // compacted event
	rbuf []byte // rewritten event
	tbuf []byte // scratch for nested rewrites
	ebuf []byte // aguard's own RUN_ERROR
	hbuf []byte // the hollow copy of a large event (hollow.go)
	cuts []cut  // scratch: what the hollow copy replaces

	// hollowAbove is the event size from which the tree is built from a
	// hollow copy: the constant hollowAbove, which tests change to compare
	// the two ways.
	hollowAbove int

	done bool
	runs int // RUN_STARTED events seen

	// verifyEvents' stream-level flags.
	first      bool // a known event has been seen
	runStarted bool
	runDone    bool // RUN_FINISHED seen in the current run
	runErr     bool // RUN_ERROR seen (last terminal)

	run   runState
	lanes []lane

	// Compat-layer THINKING_* translation state (not reset per run, as in
	// the client): the minted id of the current span/message, 0 if none.
	thinkSpan, thinkMsg, mint int

	// known is what the stream learned about tool calls, for all its runs:
	// a result may answer a call from an earlier run, and a call an earlier
	// run started is history when a later snapshot replays it. knownBytes
	// counts the memory it and declined hold (maxKnownCalls,
	// maxKnownBytes).
	known      map[string]knownCall
	knownBytes int
	// overflow reports that known reached its bound: the stream ends.
	overflow bool
	// declined holds, by call id, the tool message the consumer holds for
	// each call aguard declined in this stream (restoreDeclines).
	declined map[string]decline
	// answered holds the ids answered by a forwarded TOOL_CALL_RESULT in the
	// current run (and calls a snapshot introduced, answered there).
	answered map[string]struct{}

	pending []string // scratch: the pending list at RUN_FINISHED

	// answers are the CallAnswered events of the current event, reported
	// after its calls' decisions; their contents are spans of abuf
	// (answerSpans), resolved when they are reported.
	answers     []CallEvent
	answerSpans []int
	abuf        []byte

	// slow turns the fast path off (fast.go); tests compare the two paths.
	slow bool
	// hold is what the consumer must not see yet, or ever (hold.go). Its
	// first field is read, with slow, for every event the fast path takes.
	hold holdState

	// ctx is the context Feed was given, handed to the Decider; nil
	// outside Feed. The Stream never waits on it itself.
	ctx context.Context
}

// Per-stream bounds: whatever an agent sends, a stream's memory stays
// bounded. Past one, the stream ends with RUN_ERROR AGUARD_LIMIT_EXCEEDED.
const (
	// maxEntitiesPerRun bounds the messages, reasoning entities, tool calls,
	// steps, activities, subagents and answers one run may open, and
	// maxRunKeyBytes the bytes of their ids, names and owners.
	maxEntitiesPerRun = 100_000
	// maxRunsPerStream bounds the runs one response may carry.
	maxRunsPerStream = 10_000
	// maxKnownCalls and maxKnownBytes bound what one stream remembers of
	// the tool calls of all its runs (Stream.known, Stream.declined).
	maxKnownCalls  = 1 << 17
	maxKnownBytes  = 8 << 20
	maxRunKeyBytes = 16 << 20
)

const msgTooManyCalls = "the response carried more tool calls than aguard tracks (131072 ids or 8 MiB)"

// NewStream returns the state machine for one response to the run input in.
// in may be nil (no advertised tools, nothing answered).
func NewStream(in *RunInput, opts Options) *Stream {
	return &Stream{
		in:   in,
		opts: opts,

		hollowAbove: hollowAbove,
	}
}

// Feed processes the JSON text of one upstream SSE event (its data lines
// already joined with "\n") and fills b, after resetting it, with what the
// consumer must receive. Events aguard does not change are forwarded as their
// original bytes when they arrived compact (b.Out[i].JSON then aliases data),
// compacted otherwise. After the stream has ended, Feed returns an empty batch
// with Done set.
//
// ctx is the consumer's stream's context: the Stream hands it to the Decider
// with every call it puts to it (a Decider asked under a cancelled context
// denies: see Decider), and does nothing else with it.
func (s *Stream) Feed(ctx context.Context, data []byte, b *Batch) {
	s.ctx = ctx
	s.feed(data, b)
	s.ctx = nil
}

func (s *Stream) feed(data []byte, b *Batch) {
	b.Reset()
	if s.done {
		b.Done = true
		return
	}
	if s.overflow {
		s.end(b, CodeLimitExceeded, msgTooManyCalls)
		return
	}
	if s.feedContent(data, b) {
		return
	}
	compact, serr := s.sc.scan(data)
	if serr != nil {
		s.malformed(b, data, "", "event is not valid JSON: "+serr.Error())
		return
	}
	out := data
	if !compact {
		s.cbuf = appendCompact(s.cbuf[:0], data)
		out = s.cbuf
	}
	src := s.parseSource(out)
	if treeTooLarge(src, s.msgText) {
		s.end(b, CodeLimitExceeded, msgTreeTooLarge)
		s.shed(len(src))
		return
	}
	s.feedEvent(b, out, src)
	// Not deferred: feedEvent's many returns would keep the compiler from
	// open-coding the defer, and every event off the fast path would pay the
	// runtime's deferred-call path (a stack walk) for it.
	s.shed(len(src))
}

// feedEvent checks and applies the event whose compact JSON is out, parsed
// from src (out, or its hollow copy: hollow.go), and fills b.
func (s *Stream) feedEvent(b *Batch, out, src []byte) {
	v, err := s.p.ParseBytes(src)
	if err != nil {
		s.malformed(b, out, "", "event is nested too deeply to be read")
		return
	}
	o, err := v.Object()
	if err != nil {
		s.malformed(b, out, "", "event is not a JSON object")
		return
	}
	tv := o.Get("type")
	if tv == nil || tv.Type() != fastjson.TypeString {
		s.malformed(b, out, "", "event has no string type")
		return
	}
	typ := tv.GetStringBytes()
	spec := specFor(typ)
	if spec == nil {
		// Unknown types: the 1.0 client drops them with a warning before
		// any sequence rule sees them; aguard passes them through.
		b.InType = string(typ)
		if countKey(o, "type") > 1 {
			s.malformed(b, out, b.InType, "event has more than one type member")
			return
		}
		s.routeEvent(b, &ev{typ: b.InType, out: out})
		return
	}
	b.InType = spec.typ
	unknown, fe := checkObject(o, spec.fields, s.replayedMessages())
	if fe != nil {
		s.malformed(b, out, spec.typ, spec.typ+" has a malformed field: "+fe.Error())
		return
	}
	e := ev{typ: spec.typ, v: v, out: out, unknown: unknown}
	s.hold.closed = false
	s.run.ended = s.run.ended[:0]
	s.run.startedNow = s.run.startedNow[:0]
	s.run.introduced = s.run.introduced[:0]
	s.answers, s.answerSpans, s.abuf = s.answers[:0], s.answerSpans[:0], s.abuf[:0]
	if vi := s.apply(&e, b); vi != nil {
		if s.fatal(b, vi) {
			return
		}
	}
	if len(s.hold.laneWait) > 0 {
		s.putLaneWaiting(b)
	}
	if s.done {
		return // a policy ended the stream while applying the event
	}
	if n := s.run.size() + len(s.answered); n > maxEntitiesPerRun {
		s.end(b, CodeLimitExceeded, "the run opened more than 100000 messages, tool calls, steps and other entities")
		return
	}
	if s.run.keyBytes > maxRunKeyBytes {
		s.end(b, CodeLimitExceeded, "the ids, names and owners the run opened passed 16 MiB")
		return
	}
	if s.runs > maxRunsPerStream {
		s.end(b, CodeLimitExceeded, "the response carried more than 10000 runs")
		return
	}
	if s.overflow {
		s.end(b, CodeLimitExceeded, msgTooManyCalls)
		return
	}
	if e.typ == tToolEnd && !e.drop {
		// What a verdict on this call calls for follows its END.
		s.routeEvent(b, &e)
		e.drop = true
	}
	if n := len(s.run.startedNow) + 2*len(s.run.introduced) + len(s.answers); n > keptCalls {
		// Replayed messages may start calls by the thousand: grown by
		// appending, their events would cost five times their size.
		b.Calls = slices.Grow(b.Calls, n)
	}
	for _, c := range s.run.startedNow {
		s.markStarted(c.id)
		ce := CallEvent{Kind: CallStarted, ID: c.id, Name: c.name, Frontend: s.in.isFrontendName(c.name)}
		if s.opts.Decider != nil {
			ce.Verdict = s.screen(b, c, e.typ == tRunStarted)
			ce.Visibility = c.vis.String()
		}
		b.Calls = append(b.Calls, ce)
	}
	// Calls whose chunk stream this event closed: the consumer synthesises
	// their END just before this event, so what the verdict calls for comes
	// before it too.
	s.decideEnded(b, e.typ)
	if s.done {
		return
	}
	if len(s.run.introduced) > 0 {
		s.decideIntroduced(b, &e)
		if s.done {
			return
		}
	}
	s.reportAnswers(b)
	if !e.drop {
		s.routeEvent(b, &e)
	}
}

// decideIntroduced decides the calls the current event's replayed messages
// introduced. The event makes them known to the consumer, so what a verdict
// calls for follows it; but a held call is judged before the event goes
// anywhere, so that a denied one can be left out of it (and an agent-side
// one still unanswered there holds the event back with it).
func (s *Stream) decideIntroduced(b *Batch, e *ev) {
	late := s.run.introLate[:0]
	s.run.ended = s.run.ended[:0]
	for _, c := range s.run.introduced {
		if c.show != held {
			late = append(late, c)
			continue
		}
		if _, ok := s.answered[c.id]; ok {
			c.resultSeen = true
		}
		s.run.ended = append(s.run.ended, c)
	}
	s.run.introLate = late
	if len(s.run.ended) > 0 {
		s.hold.deferring = true
		s.decideEnded(b, e.typ)
		if s.done {
			return
		}
		for _, c := range s.run.introduced {
			if c.show == held {
				// Allowed, agent-side, its answer not there: the event
				// waits with it for the answer or the end of the run.
				s.enqueue(b, c, "", nil, false, true, nil)
			}
		}
	}
	if !e.drop {
		s.routeEvent(b, e)
		e.drop = true
		if s.done {
			return // making room for it ended the run (past --max-held)
		}
	}
	s.putDeferred(b)
	s.run.ended = append(s.run.ended[:0], late...)
	s.decideEnded(b, e.typ)
}

// ev is the event being processed.
type ev struct {
	typ     string
	v       *fastjson.Value
	out     []byte // what will be forwarded (original, compacted or rewritten)
	unknown bool
	drop    bool
	// call is the tool call of the run the event belongs to, when the
	// Stream routes events by call (hold.go); cid the toolCallId of a
	// TOOL_CALL_RESULT.
	call *call
	cid  []byte
}

func (e *ev) str(key string) ([]byte, bool) {
	x := e.v.Get(key)
	if x == nil || x.Type() != fastjson.TypeString {
		return nil, false
	}
	return x.GetStringBytes(), true
}

func (e *ev) tag() tag {
	id, ok := e.str("subagentRunId")
	return tag{id: id, ok: ok}
}

// present reports whether key is a member with a non-null value.
func (e *ev) present(key string) bool {
	x := e.v.Get(key)
	return x != nil && x.Type() != fastjson.TypeNull
}

func (s *Stream) emit(b *Batch, typ string, js []byte) {
	b.Out = append(b.Out, Event{Type: typ, JSON: js})
}

// malformed handles an event that is not a well-formed AG-UI event: fatal,
// nothing of it reaches the consumer. In monitor mode it is noted and
// forwarded as it came.
func (s *Stream) malformed(b *Batch, out []byte, typ, msg string) {
	vi := viol("malformed_event", "", msg)
	if s.fatal(b, vi) {
		return
	}
	s.routeEvent(b, &ev{typ: typ, out: out})
}

// fatal records a violation. In enforce mode it ends the stream — with
// RUN_ERROR AGUARD_PROTOCOL_VIOLATION when a RUN_ERROR is legal here — and
// returns true; in monitor mode it only notes it and returns false.
func (s *Stream) fatal(b *Batch, vi *violation) bool {
	b.Notes = append(b.Notes, Note{Kind: "violation", Rule: vi.rule, ID: vi.id, Message: vi.msg})
	if s.opts.Monitor {
		return false
	}
	s.end(b, CodeProtocolViolation, vi.rule+": "+vi.msg)
	return true
}

// end emits aguard's own RUN_ERROR (unless the last run already ended with
// one, after which only RUN_STARTED is legal) and marks the stream done. A
// bound reached is noted too ("limit_exceeded"), for the operator: the
// agent, not the consumer, is usually the one to look at.
func (s *Stream) end(b *Batch, code, message string) {
	if code == CodeLimitExceeded {
		b.Notes = append(b.Notes, Note{Kind: "limit_exceeded", Message: message})
	}
	// Calls still held are never judged: the consumer never sees them.
	// What waited behind them goes out first.
	s.abandon(b)
	if !s.runErr {
		e := append(s.ebuf[:0], `{"type":"RUN_ERROR","code":`...)
		e = jsonedit.AppendString(e, code)
		e = append(e, `,"message":`...)
		e = jsonedit.AppendString(e, message)
		e = append(e, '}')
		s.ebuf = e
		s.emit(b, tRunError, e)
		s.runErr = true
		b.Run.Kind, b.Run.RunID, b.Run.Code = "error", s.run.runID, code
	}
	s.done = true
	b.Done = true
}

// End reports that the upstream body ended (err == nil: clean EOF) or broke
// (err != nil). Unless the current run ended with RUN_FINISHED or RUN_ERROR,
// the consumer gets RUN_ERROR AGUARD_UPSTREAM_LOST: a truncated run is never
// reported as a success. b.Done is set.
func (s *Stream) End(err error, b *Batch) {
	b.Reset()
	if s.done {
		b.Done = true
		return
	}
	if s.first && (s.runDone || s.runErr) {
		s.done = true
		b.Done = true
		return
	}
	var msg string
	switch {
	case err != nil && !s.first:
		msg = "the upstream stream broke before any event arrived: " + err.Error()
	case err != nil:
		msg = "the upstream stream broke before the run finished: " + err.Error()
	case !s.first:
		msg = "the upstream stream ended without any event"
	default:
		msg = "the upstream stream ended before the run finished (no RUN_FINISHED or RUN_ERROR)"
	}
	b.Notes = append(b.Notes, Note{Kind: "upstream_lost", Message: msg})
	s.end(b, CodeUpstreamLost, msg)
}

// Abort ends the consumer stream for a reason outside the stream — an event
// over the size limit (CodeLimitExceeded), shutdown (CodeShutdown) — with
// RUN_ERROR {code, message} when a RUN_ERROR is legal at this point (it is not
// right after a RUN_ERROR). b.Done is set.
func (s *Stream) Abort(code, message string, b *Batch) {
	b.Reset()
	if s.done {
		b.Done = true
		return
	}
	s.end(b, code, message)
}

package agui

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// This file is the sequence state machine: what the official client's
// verifyEvents enforces (@ag-ui/client 1.0.0), applied to the events the consumer
// receives — those aguard forwards and the ones the client synthesises when
// it expands chunks (chunks.go). Every rule here is fatal for the 1.0 client,
// so every one is fatal for aguard.

// owner is who an entity belongs to: the parent agent (sub == false) or the
// subagent invocation id.
type owner struct {
	id  string
	sub bool
}

func (o owner) String() string {
	if !o.sub {
		return "(the parent agent)"
	}
	return "'" + o.id + "'"
}

// tag is an event's subagentRunId as read from it. id aliases the parser's
// buffer.
type tag struct {
	id []byte
	ok bool
}

// is reports whether t names o; an absent tag names the parent agent.
func (t tag) is(o owner) bool { return t.ok == o.sub && string(t.id) == o.id }

func (t tag) owner() owner {
	if !t.ok {
		return owner{}
	}
	return owner{id: string(t.id), sub: true}
}

// disagrees is verifyEvents' attribution rule: a continuation whose tag names
// someone other than its opener's owner. An absent tag never disagrees.
func (t tag) disagrees(o *owner) bool { return t.ok && o != nil && !t.is(*o) }

// violation is a broken rule.
type violation struct {
	rule string // stable identifier, e.g. "tool_call_not_open"
	id   string // the id involved, if any
	msg  string // a sentence naming the event and id
}

func viol(rule, id, msg string) *violation { return &violation{rule: rule, id: id, msg: msg} }

// entity is one text message, reasoning message/span or activity of the
// current run. It exists once its owner is on record (the client keeps
// owners for the whole run, open or not).
type entity struct {
	id       string // its key in runState.msgs (text messages only)
	own      owner
	open     bool // text message open / reasoning message open
	spanOpen bool // reasoning span open (REASONING_START…REASONING_END)
	openSeq  int  // order of opening, for messages listing open ids
}

// call is one tool call of the current run.
type call struct {
	id        string
	own       owner
	open      bool
	started   bool // a TOOL_CALL_START (explicit or from a chunk) in this run
	name      string
	parent    string
	hasParent bool
	openSeq   int
	// args accumulates the argument text, up to maxArgBytes; argsCut
	// reports that the text was longer. Policy evaluation at
	// TOOL_CALL_END reads it.
	args    []byte
	argsCut bool
	// reopened: a TOOL_CALL_START reopened the call after it had closed.
	reopened bool
	// snap: replayed messages (a snapshot, the input echo) introduced the
	// call; parent is the message that carries it (snapshot.go).
	snap bool
	// What the consumer sees of the call (hold.go): vis is the
	// tool_call_start verdict as applied, show where its events go now.
	// endAllowed: a held agent-side call allowed at its end, waiting for
	// its result or the end of the run; resultSeen: its result arrived
	// while it was held. (Bytes, beside the bools above: the struct keeps
	// its size.)
	vis        vis
	show       show
	endAllowed bool
	resultSeen bool
}

// maxArgBytes caps the argument text kept per call, and maxRunArgBytes all
// the argument text kept in one run (memory bounds). Text past either is not
// kept and the call's arguments count as truncated (a Decider sees
// ArgumentsTruncated; the proxy denies such a call).
const (
	maxArgBytes    = 1 << 20
	maxRunArgBytes = 16 << 20
)

// stepKey names an open step: steps are tracked per owner.
type stepKey struct {
	own  owner
	name string
}

// runState is verifyEvents' per-run state. It resets on RUN_STARTED.
type runState struct {
	msgs       map[string]*entity // owners.message + activeMessages
	reasoning  map[string]*entity // owners.reasoning + both active sets
	activities map[string]*owner
	calls      map[string]*call
	steps      map[stepKey]int // open steps, value = open order
	// stepOpeners lists, per step name, who opened it, in order; entries
	// of steps since finished are dropped lazily (stepFinished).
	stepOpeners map[string]*openers
	subActive   map[string]bool
	subClosed   map[string]bool
	// replayAnswered holds the calls a tool message in this run's replayed
	// messages (snapshots, the input echo) answered, as forwarded.
	replayAnswered map[string]struct{}
	// minted reasoning ids of translated THINKING_* events (the 1.0
	// client's compatibility layer); they can never collide with a producer's id.
	thinkSpans map[int]*entity
	thinkMsgs  map[int]*entity

	order []*call // calls in first-START order (pending list)
	seq   int
	// ended holds the calls whose arguments completed during the event
	// being processed, for the Decider; startedNow those it started, and
	// introduced those of them its replayed messages introduced.
	ended      []*call
	startedNow []*call
	introduced []*call
	// introLate is scratch for decideIntroduced.
	introLate []*call
	// argBytes is the argument text kept in this run.
	argBytes int
	// runID is the current run's id (RUN_STARTED.runId).
	runID string
	// keyBytes is the bytes of the strings the run's maps keep (ids,
	// names, owners), which maxRunKeyBytes bounds.
	keyBytes int
	// opened counts what is open, by what RUN_FINISHED names, so that a
	// run that closed everything finishes without a look at each entity.
	opened openCounts
	// finishListed: a RUN_FINISHED of this run already listed what was
	// open (monitor mode goes on after it).
	finishListed bool
	// text is the text message the fast path (fast.go) last continued, or
	// nil: most content events continue the message before them, and this
	// spares the map lookup. thought is the reasoning message it last
	// continued, under the id thoughtID.
	text      *entity
	thought   *entity
	thoughtID string
}

// put sets m[k] = v, making m first: a stream's maps are made when it
// first puts something in them, so a stream that waits holds no empty
// maps (thirteen of them were half a KiB per idle stream).
func put[K comparable, V any](m *map[K]V, k K, v V) {
	if *m == nil {
		*m = make(map[K]V)
	}
	(*m)[k] = v
}

func (r *runState) reset() {
	clear(r.msgs)
	clear(r.reasoning)
	clear(r.activities)
	clear(r.calls)
	clear(r.steps)
	clear(r.stepOpeners)
	clear(r.subActive)
	clear(r.subClosed)
	clear(r.replayAnswered)
	clear(r.thinkSpans)
	clear(r.thinkMsgs)
	r.order = r.order[:0]
	r.seq = 0
	r.ended = r.ended[:0]
	r.startedNow = r.startedNow[:0]
	r.introduced = r.introduced[:0]
	clear(r.introLate)
	r.introLate = r.introLate[:0]
	r.argBytes = 0
	r.keyBytes = 0
	r.opened = openCounts{}
	r.finishListed = false
	r.text = nil
	r.thought, r.thoughtID = nil, ""
}

// openCounts counts a run's open text messages, reasoning messages (the
// THINKING_TEXT_MESSAGE ones included), reasoning spans (THINKING ones
// included) and tool calls. Open steps and subagents are their maps' sizes.
type openCounts struct{ msgs, rmsgs, spans, calls int }

// keep counts n more bytes of strings the run's maps keep.
func (r *runState) keep(n int) { r.keyBytes += n }

func (r *runState) next() int { r.seq++; return r.seq }

// size is the number of entities the run tracks.
func (r *runState) size() int {
	return len(r.msgs) + len(r.reasoning) + len(r.activities) + len(r.calls) + len(r.steps) +
		len(r.subActive) + len(r.subClosed) + len(r.replayAnswered) + len(r.thinkSpans) + len(r.thinkMsgs)
}

func q(b []byte) string { return "'" + string(b) + "'" }

// textStart: "TEXT_MESSAGE_START for an id that is open" is fatal; a reopen
// under a different owner is fatal.
func (r *runState) textStart(id []byte, t tag) *violation {
	e := r.msgs[string(id)]
	if e != nil && e.open {
		return viol("text_message_already_open", string(id), "TEXT_MESSAGE_START for text message "+q(id)+", which is already open")
	}
	if e != nil && t.disagrees(&e.own) {
		return viol("owner_mismatch", string(id), "TEXT_MESSAGE_START: subagentRunId "+q(t.id)+" does not match the owner "+e.own.String()+" of text message "+q(id))
	}
	if e == nil {
		e = &entity{id: string(id), own: t.owner()}
		put(&r.msgs, e.id, e)
		r.keep(len(e.id) + len(e.own.id))
	}
	e.open = true
	r.opened.msgs++
	e.openSeq = r.next()
	return nil
}

// textCont checks TEXT_MESSAGE_CONTENT / TEXT_MESSAGE_END and applies END.
func (r *runState) textCont(typ string, id []byte, t tag, end bool) *violation {
	e := r.msgs[string(id)]
	if e == nil || !e.open {
		return viol("text_message_not_open", string(id), typ+" for text message "+q(id)+", which is not open")
	}
	if t.disagrees(&e.own) {
		return viol("owner_mismatch", string(id), typ+": subagentRunId "+q(t.id)+" does not match the owner "+e.own.String()+" of text message "+q(id))
	}
	if end {
		e.open = false
		r.opened.msgs--
	}
	return nil
}

// toolStart applies TOOL_CALL_START (explicit or synthesised from a chunk).
// Beyond verifyEvents, a reopen must agree with the call it reopens: "A
// reopening start MUST agree with the call it reopens — the same
// toolCallName, the same parentMessageId, the same owner"
// (https://docs.ag-ui.com, Tool Calls, TOOL_CALL_END). The 1.0 client
// accepts a renaming reopen and renames the call; aguard ends the stream
// instead. A call that replayed messages introduced is carried by its
// message: a start that names no parent agrees with it.
func (r *runState) toolStart(id, name, parent []byte, hasParent bool, t tag) (*call, *violation) {
	c := r.calls[string(id)]
	if c != nil && c.open {
		return nil, viol("tool_call_already_open", string(id), "TOOL_CALL_START for tool call "+q(id)+", which is already open")
	}
	// "When the parent message is attributed to a subagent, the call MUST
	// agree with that attribution — a tool call belongs to the message that
	// carries it" (https://docs.ag-ui.com, Tool Calls, TOOL_CALL_START).
	var inherited *owner
	if hasParent {
		if pe := r.msgs[string(parent)]; pe != nil {
			if t.disagrees(&pe.own) {
				return nil, viol("owner_mismatch", string(id), "TOOL_CALL_START for tool call "+q(id)+": subagentRunId "+q(t.id)+" does not match the owner "+pe.own.String()+" of its parent message "+q(parent))
			}
			inherited = &pe.own
		}
	}
	if c != nil {
		if t.disagrees(&c.own) {
			return nil, viol("owner_mismatch", string(id), "TOOL_CALL_START reopening tool call "+q(id)+": subagentRunId "+q(t.id)+" does not match its owner "+c.own.String())
		}
		if !t.ok && inherited != nil && *inherited != c.own {
			return nil, viol("owner_mismatch", string(id), "TOOL_CALL_START reopening tool call "+q(id)+": it is owned by "+c.own.String()+" but its parent message "+q(parent)+" is owned by "+inherited.String())
		}
		if c.started {
			if c.name != string(name) {
				return nil, viol("tool_call_reopen_mismatch", string(id), "TOOL_CALL_START reopening tool call "+q(id)+" names tool "+q(name)+", but the call it reopens is '"+c.name+"'")
			}
			if (c.hasParent != hasParent && !(c.snap && !hasParent)) || (hasParent && c.parent != string(parent)) {
				return nil, viol("tool_call_reopen_mismatch", string(id), "TOOL_CALL_START reopening tool call "+q(id)+" has parentMessageId "+optQ(parent, hasParent)+", but the call it reopens has "+optQ([]byte(c.parent), c.hasParent))
			}
		}
	} else {
		c = &call{id: string(id), own: t.owner()}
		if !t.ok && inherited != nil {
			c.own = *inherited
		}
		put(&r.calls, c.id, c)
		r.keep(len(c.id) + len(c.own.id))
	}
	if c.started {
		c.reopened = true
	} else {
		r.startedNow = append(r.startedNow, c)
		c.started = true
		c.name = string(name)
		c.parent = string(parent)
		c.hasParent = hasParent
		r.keep(len(c.name) + len(c.parent))
		r.order = append(r.order, c)
	}
	c.open = true
	r.opened.calls++
	c.openSeq = r.next()
	return c, nil
}

func optQ(b []byte, ok bool) string {
	if !ok {
		return "(absent)"
	}
	return q(b)
}

// toolCont checks TOOL_CALL_ARGS / TOOL_CALL_END and applies them.
func (r *runState) toolCont(typ string, id, delta []byte, t tag, end bool) *violation {
	c := r.calls[string(id)]
	if c == nil || !c.open {
		return viol("tool_call_not_open", string(id), typ+" for tool call "+q(id)+", which is not open")
	}
	if t.disagrees(&c.own) {
		return viol("owner_mismatch", string(id), typ+": subagentRunId "+q(t.id)+" does not match the owner "+c.own.String()+" of tool call "+q(id))
	}
	if end {
		c.open = false
		r.opened.calls--
		r.ended = append(r.ended, c)
		return nil
	}
	r.appendArgs(c, delta)
	return nil
}

// appendArgs adds delta to c's argument text, within the bounds.
func (r *runState) appendArgs(c *call, delta []byte) {
	if c.argsCut {
		return
	}
	if len(c.args)+len(delta) > maxArgBytes || r.argBytes+len(delta) > maxRunArgBytes {
		c.argsCut = true
		return
	}
	c.args = append(c.args, delta...)
	r.argBytes += len(delta)
}

// introduce starts a call that replayed messages carry and nothing started
// (snapshot.go): the message parent carries it, with the argument text args,
// complete. It is decided like a call whose END arrived.
func (r *runState) introduce(id, name []byte, parent string, own owner, args []byte) *call {
	c := r.calls[string(id)]
	if c == nil {
		c = &call{id: string(id), own: own}
		put(&r.calls, c.id, c)
		r.keep(len(c.id) + len(c.own.id))
	}
	c.started, c.snap = true, true
	c.name, c.parent, c.hasParent = string(name), parent, true
	r.keep(len(c.name) + len(c.parent))
	r.appendArgs(c, args)
	r.order = append(r.order, c)
	r.startedNow = append(r.startedNow, c)
	r.introduced = append(r.introduced, c)
	return c
}

// reasoningStart applies REASONING_START (span) or REASONING_MESSAGE_START.
func (r *runState) reasoningStart(typ string, span bool, id []byte, t tag) *violation {
	e := r.reasoning[string(id)]
	if e != nil && ((span && e.spanOpen) || (!span && e.open)) {
		return viol("reasoning_already_open", string(id), typ+" for reasoning "+kindWord(span)+" "+q(id)+", which is already open")
	}
	if e != nil && t.disagrees(&e.own) {
		return viol("owner_mismatch", string(id), typ+": subagentRunId "+q(t.id)+" does not match the owner "+e.own.String()+" of reasoning message "+q(id))
	}
	if e == nil {
		e = &entity{own: t.owner()}
		put(&r.reasoning, string(id), e)
		r.keep(len(id) + len(e.own.id))
	}
	r.openEntity(e, span)
	return nil
}

// openEntity opens a reasoning span or message that is not open.
func (r *runState) openEntity(e *entity, span bool) {
	if span {
		e.spanOpen = true
		r.opened.spans++
	} else {
		e.open = true
		r.opened.rmsgs++
	}
	e.openSeq = r.next()
}

func kindWord(span bool) string {
	if span {
		return "span"
	}
	return "message"
}

// reasoningCont checks REASONING_MESSAGE_CONTENT/END and REASONING_END.
func (r *runState) reasoningCont(typ string, span bool, id []byte, t tag, end bool) *violation {
	e := r.reasoning[string(id)]
	return r.contEntity(e, typ, span, string(id), t, end)
}

// contEntity checks a reasoning span's or message's continuation, and
// applies its end.
func (r *runState) contEntity(e *entity, typ string, span bool, id string, t tag, end bool) *violation {
	if e == nil || (span && !e.spanOpen) || (!span && !e.open) {
		return viol("reasoning_not_open", id, typ+" for reasoning "+kindWord(span)+" '"+id+"', which is not open")
	}
	if t.disagrees(&e.own) {
		return viol("owner_mismatch", id, typ+": subagentRunId "+q(t.id)+" does not match the owner "+e.own.String()+" of reasoning message '"+id+"'")
	}
	if end {
		if span {
			e.spanOpen = false
			r.opened.spans--
		} else {
			e.open = false
			r.opened.rmsgs--
		}
	}
	return nil
}

// stepStarted / stepFinished: steps are tracked per owner.
func (r *runState) stepStarted(name []byte, t tag) *violation {
	k := stepKey{own: t.owner(), name: string(name)}
	if _, ok := r.steps[k]; ok {
		return viol("step_already_active", string(name), "STEP_STARTED for step "+q(name)+", which is already active for "+k.own.String())
	}
	seq := r.next()
	put(&r.steps, k, seq)
	r.keep(len(k.name) + len(k.own.id))
	o := r.stepOpeners[k.name]
	if o == nil {
		o = &openers{}
		put(&r.stepOpeners, k.name, o)
	}
	o.add(r.steps, k, seq)
	return nil
}

func (r *runState) stepFinished(name []byte, t tag) *violation {
	k := stepKey{own: t.owner(), name: string(name)}
	if _, ok := r.steps[k]; !ok {
		// Name the owner that opened the step first: the same input always
		// gets the same message.
		if o := r.stepOpeners[k.name]; o != nil {
			if first, ok := o.first(r.steps, k.name); ok {
				return viol("step_owner_mismatch", string(name), "STEP_FINISHED for step "+q(name)+" attributed to "+k.own.String()+", but that step is open under "+first.String())
			}
			delete(r.stepOpeners, k.name)
		}
		return viol("step_not_active", string(name), "STEP_FINISHED for step "+q(name)+", which was not started")
	}
	delete(r.steps, k)
	if o := r.stepOpeners[k.name]; o != nil {
		if _, ok := o.first(r.steps, k.name); !ok {
			delete(r.stepOpeners, k.name) // nothing of that name is open
		}
	}
	return nil
}

// openers is who opened one step name, in the order they did. An entry
// whose step has since finished (or finished and opened again: its open
// order differs) is stale, dropped from the front when first is asked,
// and all at once when the stale ones may be half of the list: each
// entry costs O(1) over its life, however the steps interleave.
type openers struct {
	list []opener
	// compacted is the list's length after the last compaction.
	compacted int
}

type opener struct {
	own owner
	seq int
}

func (o *openers) add(steps map[stepKey]int, k stepKey, seq int) {
	if len(o.list) >= 2*o.compacted+8 {
		o.list = slices.DeleteFunc(o.list, func(e opener) bool { return steps[stepKey{e.own, k.name}] != e.seq })
		o.compacted = len(o.list)
	}
	o.list = append(o.list, opener{k.own, seq})
}

// first returns the owner of the earliest-opened step of that name still
// open.
func (o *openers) first(steps map[stepKey]int, name string) (owner, bool) {
	for len(o.list) > 0 {
		e := o.list[0]
		if steps[stepKey{e.own, name}] == e.seq {
			return e.own, true
		}
		o.list[0] = opener{}
		o.list = o.list[1:]
		if o.compacted > 0 {
			o.compacted--
		}
	}
	return owner{}, false
}

// runFinished reports what is still open when RUN_FINISHED arrives, or
// returns nil. "A call left open when the run finishes is a violation"
// (https://docs.ag-ui.com, Tool Calls, Error Handling); verifyEvents says the
// same of steps, messages, reasoning and subagents.
func (r *runState) runFinished() *violation {
	kind, n := r.firstOpen()
	if kind == openNone {
		return nil
	}
	k := openKinds[kind]
	if r.finishListed {
		// Monitor mode goes on after a RUN_FINISHED that found items
		// open; a later one in the same run says how many, without
		// another look at every entity.
		return viol(k.rule, "", fmt.Sprintf("RUN_FINISHED while %d %s are still %s (listed at an earlier RUN_FINISHED of this run)", n, k.what, k.state))
	}
	r.finishListed = true
	return viol(k.rule, "", "RUN_FINISHED while "+k.what+" are still "+k.state+": "+listOpen(r.openItems(kind)))
}

// openKind is what RUN_FINISHED finds open, in the order it names them.
type openKind uint8

const (
	openNone openKind = iota
	openSteps
	openMsgs
	openRmsgs
	openSpans
	openCalls
	openSubs
)

// openKinds is how RUN_FINISHED names each kind; read-only.
var openKinds = [...]struct{ rule, what, state string }{
	openSteps: {"run_finished_with_open_steps", "steps", "active"},
	openMsgs:  {"run_finished_with_open_messages", "text messages", "open"},
	openRmsgs: {"run_finished_with_open_reasoning", "reasoning messages", "open"},
	openSpans: {"run_finished_with_open_reasoning", "reasoning spans", "open"},
	openCalls: {"run_finished_with_open_tool_calls", "tool calls", "open"},
	openSubs:  {"run_finished_with_active_subagents", "subagents", "active"},
}

// firstOpen returns, from the counts alone, the first kind RUN_FINISHED
// finds open and how many of it, or openNone.
func (r *runState) firstOpen() (openKind, int) {
	o := r.opened
	switch {
	case len(r.steps) > 0:
		return openSteps, len(r.steps)
	case o.msgs > 0:
		return openMsgs, o.msgs
	case o.rmsgs > 0:
		return openRmsgs, o.rmsgs
	case o.spans > 0:
		return openSpans, o.spans
	case o.calls > 0:
		return openCalls, o.calls
	case len(r.subActive) > 0:
		return openSubs, len(r.subActive)
	}
	return openNone, 0
}

// openItems returns the open items of one kind, in no order.
func (r *runState) openItems(kind openKind) []openItem {
	var items []openItem
	switch kind {
	case openSteps:
		for k, seq := range r.steps {
			items = append(items, openItem{seq, k.name})
		}
	case openMsgs:
		for id, e := range r.msgs {
			if e.open {
				items = append(items, openItem{e.openSeq, id})
			}
		}
	case openRmsgs, openSpans:
		span := kind == openSpans
		for id, e := range r.reasoning {
			if (span && e.spanOpen) || (!span && e.open) {
				items = append(items, openItem{e.openSeq, id})
			}
		}
		thinking, name := r.thinkMsgs, "(THINKING_TEXT_MESSAGE)"
		if span {
			thinking, name = r.thinkSpans, "(THINKING)"
		}
		for _, e := range thinking {
			if (span && e.spanOpen) || (!span && e.open) {
				items = append(items, openItem{e.openSeq, name})
			}
		}
	case openCalls:
		for _, c := range r.calls {
			if c.open {
				items = append(items, openItem{c.openSeq, c.id})
			}
		}
	case openSubs:
		// Subagents have no open order: by id.
		ids := make([]string, 0, len(r.subActive))
		for id := range r.subActive {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for i, id := range ids {
			items = append(items, openItem{i, id})
		}
	}
	return items
}

// openItem is an open entity as RUN_FINISHED lists it.
type openItem struct {
	seq int
	id  string
}

// maxListed is how many ids a RUN_FINISHED violation names.
const maxListed = 10

// listOpen names the first maxListed items in the order they opened, and
// how many more there are.
func listOpen(items []openItem) string {
	sort.Slice(items, func(i, j int) bool { return items[i].seq < items[j].seq })
	var b strings.Builder
	for i, it := range items {
		if i == maxListed {
			fmt.Fprintf(&b, " and %d more", len(items)-maxListed)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("'" + it.id + "'")
	}
	return b.String()
}

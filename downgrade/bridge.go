// Package downgrade bridges AG-UI 1.0 and the legacy 0.x line: it rewrites the
// 1.0 events aguard sends to a legacy consumer (one whose RunAgentInput has no
// protocolVersion) into events @ag-ui/client 0.0.58 accepts, and a 1.0
// RunAgentInput into one a 0.x agent server can read.
//
// A downgrade reshapes; it does not invent. Content-part lists become the
// concatenation of their text parts; fields, outcomes and events 0.x cannot
// represent are removed. Every step that loses something the user could miss
// is announced in the stream, as a CUSTOM event named "aguard.downgrade", and
// reported to the caller as an agui.Note of Kind "downgrade". Nothing else
// changes: no event is reordered, no id or outcome is altered beyond the rules
// listed on Bridge, and a rewritten event keeps every byte it does not have to
// change, in order.
//
// The package is pure: no I/O, no clocks, no goroutines, no global state. It
// is not a validator — the events it is given are assumed to be what package
// agui produced (compact, checked JSON objects), and input it cannot make sense
// of passes through unchanged so that the consumer's own validation reports it.
// It does not upgrade 0.x events to 1.0 and does not decide which peers are
// legacy: the proxy does, from the presence of protocolVersion.
package downgrade

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/aguard/aguard/agui"
	"github.com/aguard/aguard/internal/jsonedit"
)

// noteKind is the agui.Note Kind of every note this package returns. A note's
// Rule holds the announcement's "what", its ID the tool call id (or the
// message id when there is no call).
const noteKind = "downgrade"

// announcementName is the name of the CUSTOM event that announces a lossy
// downgrade step to the consumer.
const announcementName = "aguard.downgrade"

// Bridge rewrites the 1.0 events aguard sends to a legacy (0.x) consumer — one
// whose RunAgentInput has no protocolVersion — into events @ag-ui/client 0.0.58
// accepts, announcing every lossy step. One Bridge per consumer stream (it may
// keep state, e.g. per-stream counters); not safe for concurrent use.
//
// The rules, each pinned by a unit test, their output checked against the
// official 0.0.58 client (interop_test.go):
//
//   - TOOL_CALL_RESULT content given as a list of parts becomes the
//     concatenation of its text parts' text, in order, with no separator and
//     no placeholder; "" when there is no text part. Dropping a non-text part
//     is announced (what "tool_result_content", with toolCallId, messageId and
//     the dropped parts); a list of text parts only is rewritten silently.
//   - Tool messages in MESSAGES_SNAPSHOT and in the RUN_STARTED input echo are
//     flattened the same way (what "tool_message_content").
//   - User messages there keep their content parts, except parts 0.x cannot
//     parse: a part with a provider "file" source (what "file_source"), or a
//     part or source of a type 0.x does not know (what "user_message_content").
//     Those parts are dropped and announced.
//   - A content list that is malformed — a text part whose text is not a
//     string, say — is left as it is, so the consumer's validation reports it:
//     a downgrade does not repair.
//   - RUN_FINISHED: outcome.pendingToolCallIds is removed silently, because
//     0.0.58's success outcome is strict and a legacy consumer derives the
//     pending calls from what it received (every call started and not
//     answered, and every call a snapshot gave it without an answer), which
//     is the list the field carried. Any other member 0.x's
//     strict outcomes reject is removed and announced (what "outcome_member").
//     A "cancelled" outcome is removed and announced (what
//     "cancelled_outcome"): 0.x has no such outcome, so the run then reads as a
//     success. An outcome of any other unknown type likewise (what
//     "unknown_outcome").
//   - RUN_STARTED: protocolVersion is removed silently — a translating proxy
//     declares what it emits, and 0.x events carry no version. An input echo
//     without "tools" or "context" gets them as [] (0.0.58 requires both; in
//     1.0 an absent list and [] mean the same).
//   - SUBAGENT_STARTED, SUBAGENT_FINISHED, SUBAGENT_ERROR and any type 0.x does
//     not know are dropped and announced (what "event", dropped
//     [{"index":0,"type":"<event type>"}]). The 0.x event types are those of
//     @ag-ui/core 0.0.58: RUN_STARTED, RUN_FINISHED, RUN_ERROR, STEP_STARTED,
//     STEP_FINISHED, TEXT_MESSAGE_START/CONTENT/END/CHUNK,
//     TOOL_CALL_START/ARGS/END/CHUNK/RESULT, STATE_SNAPSHOT, STATE_DELTA,
//     MESSAGES_SNAPSHOT, ACTIVITY_SNAPSHOT, ACTIVITY_DELTA, RAW, CUSTOM,
//     REASONING_START/END, REASONING_MESSAGE_START/CONTENT/END/CHUNK,
//     REASONING_ENCRYPTED_VALUE, and the THINKING_START/END and
//     THINKING_TEXT_MESSAGE_START/CONTENT/END events 1.0 retired.
//
// Everything else passes through as it is: 0.0.58 ignores or strips the other
// 1.0 additions (subagentRunId tags, metadata, usage, encryptedValueType).
//
// An announcement is the event
//
//	{"type":"CUSTOM","name":"aguard.downgrade","value":{"what":…,"toolCallId"?:…,"messageId"?:…,"dropped":[{"index":i,"type":"image"},…]}}
//
// where index is the position of the dropped item in its list (0 for an
// outcome or an event) and type its type (the part's, the outcome's, the
// event's, or the outcome member's name). It goes just before the event it
// concerns, or in place of a dropped event, with two exceptions forced by
// 0.0.58's sequence rules: announcements about a RUN_STARTED follow it (0.x
// rejects any event before RUN_STARTED), and none is sent outside a run
// (before the first RUN_STARTED or after RUN_FINISHED/RUN_ERROR), where 0.x
// rejects a CUSTOM; the note is still returned. And because a CUSTOM closes an
// open *_CHUNK stream in 0.0.58 where the dropped event did not, the
// announcement of an event dropped while a chunk stream may be open is held
// back until the next event that closes it anyway (a stream that ends first
// never carries it; the note is returned all the same).
type Bridge struct {
	inRun     bool         // inside a run: announcements may go on the wire
	chunkOpen bool         // a *_CHUNK stream may be open in 0.0.58's chunk lane
	held      []agui.Event // announcements waiting for the chunk stream to close
	losses    []loss       // scratch, reused across calls
}

// New returns a Bridge for one legacy consumer stream.
func New() *Bridge { return &Bridge{} }

// Event appends to out what the legacy consumer receives for ev, and to notes
// what was lost (Kind "downgrade", Rule the announcement's "what"); returns
// both.
//
// Unchanged events are appended as they are: same JSON bytes, no allocation.
// A lossy rewrite is preceded by an aguard.downgrade announcement just before
// the downgraded event (or in place of a dropped event); see Bridge for the
// rules, the announcement's shape and where it goes.
// A rewritten event's JSON is a new slice that Event does not retain. ev.Type
// must be the type of ev.JSON, which must be a compact JSON object, as package
// agui delivers them.
func (b *Bridge) Event(ev agui.Event, out []agui.Event, notes []agui.Note) ([]agui.Event, []agui.Note) {
	switch ev.Type {
	case "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
		"TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END",
		"STATE_SNAPSHOT", "STATE_DELTA", "CUSTOM", "STEP_STARTED", "STEP_FINISHED",
		"REASONING_START", "REASONING_END",
		"REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT", "REASONING_MESSAGE_END",
		"THINKING_START", "THINKING_END",
		"THINKING_TEXT_MESSAGE_START", "THINKING_TEXT_MESSAGE_CONTENT", "THINKING_TEXT_MESSAGE_END":
		// 0.0.58 closes an open chunk stream before each of these.
		if len(b.held) > 0 {
			out = b.release(out)
		}
		b.chunkOpen = false
		return append(out, ev), notes
	case "RAW", "ACTIVITY_SNAPSHOT", "ACTIVITY_DELTA", "REASONING_ENCRYPTED_VALUE":
		// Known to 0.0.58; they close nothing.
		return append(out, ev), notes
	case "TEXT_MESSAGE_CHUNK", "TOOL_CALL_CHUNK", "REASONING_MESSAGE_CHUNK":
		b.chunkOpen = true
		return append(out, ev), notes
	case "RUN_ERROR":
		out = b.release(out)
		b.chunkOpen, b.inRun = false, false
		return append(out, ev), notes
	case "TOOL_CALL_RESULT", "MESSAGES_SNAPSHOT", "RUN_STARTED", "RUN_FINISHED":
		return b.rewrite(ev, out, notes)
	default:
		return b.drop(ev, out, notes)
	}
}

// rewrite handles the event types that may need changing.
func (b *Bridge) rewrite(ev agui.Event, out []agui.Event, notes []agui.Note) ([]agui.Event, []agui.Note) {
	losses := b.losses[:0]
	var js []byte
	switch ev.Type {
	case "TOOL_CALL_RESULT":
		js, losses = toolResult(ev.JSON, losses)
	case "MESSAGES_SNAPSHOT":
		js, losses = snapshot(ev.JSON, losses)
	case "RUN_STARTED":
		js, losses = downgradeRunStarted(ev.JSON, losses)
	case "RUN_FINISHED":
		js, losses = downgradeRunFinished(ev.JSON, losses)
	}
	if !same(js, ev.JSON) {
		if json.Valid(ev.JSON) {
			ev.JSON = js
		} else {
			// Not JSON after all: forward it untouched for the consumer to reject.
			losses = losses[:0]
		}
	}
	defer func() {
		clear(losses) // drop references into ev.JSON
		b.losses = losses[:0]
	}()

	if ev.Type == "RUN_STARTED" {
		if b.inRun {
			out = b.release(out)
		}
		b.held = b.held[:0]
		b.inRun, b.chunkOpen = true, false
		out = append(out, ev)
		return b.announce(losses, out, notes)
	}
	out = b.release(out)
	out, notes = b.announce(losses, out, notes)
	b.chunkOpen = false
	if ev.Type == "RUN_FINISHED" {
		b.inRun = false
	}
	return append(out, ev), notes
}

// drop handles an event of a type 0.x does not know.
func (b *Bridge) drop(ev agui.Event, out []agui.Event, notes []agui.Note) ([]agui.Event, []agui.Note) {
	typ, _ := json.Marshal(ev.Type) // cannot fail for a string
	l := loss{what: whatEvent, dropped: []dropped{{index: 0, typ: typ}}}
	notes = append(notes, l.note())
	switch {
	case !b.inRun:
	case b.chunkOpen:
		b.held = append(b.held, l.announcement())
	default:
		out = append(out, l.announcement())
	}
	return out, notes
}

// release appends the held announcements (when inside a run) and forgets them.
func (b *Bridge) release(out []agui.Event) []agui.Event {
	if b.inRun {
		out = append(out, b.held...)
	}
	clear(b.held)
	b.held = b.held[:0]
	return out
}

// announce appends a note for each loss, and its announcement when inside a run.
func (b *Bridge) announce(losses []loss, out []agui.Event, notes []agui.Note) ([]agui.Event, []agui.Note) {
	for _, l := range losses {
		notes = append(notes, l.note())
		if b.inRun {
			out = append(out, l.announcement())
		}
	}
	return out, notes
}

// same reports whether a and b are the same slice.
func same(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// toolResult flattens a TOOL_CALL_RESULT whose content is a list of parts.
func toolResult(js []byte, losses []loss) ([]byte, []loss) {
	cs, ce, ok := jsonedit.Member(js, "content")
	if !ok || js[cs] != '[' {
		return js, losses
	}
	str, drops, ok := flatten(js[cs:ce])
	if !ok {
		return js, losses
	}
	if len(drops) > 0 {
		losses = append(losses, loss{what: whatToolResult,
			toolCallID: jsonedit.String(js, "toolCallId"), messageID: jsonedit.String(js, "messageId"), dropped: drops})
	}
	return apply(js, []jsonedit.Edit{{From: cs, To: ce, With: str}}), losses
}

// snapshot downgrades the messages of a MESSAGES_SNAPSHOT.
func snapshot(js []byte, losses []loss) ([]byte, []loss) {
	ms, me, ok := jsonedit.Member(js, "messages")
	if !ok || js[ms] != '[' {
		return js, losses
	}
	arr := js[ms:me]
	na, losses := messages(arr, true, losses)
	if same(na, arr) {
		return js, losses
	}
	return apply(js, []jsonedit.Edit{{From: ms, To: me, With: na}}), losses
}

// downgradeRunStarted removes protocolVersion and downgrades the input echo.
func downgradeRunStarted(js []byte, losses []loss) ([]byte, []loss) {
	it := jsonedit.Members(js)
	var s jsonedit.Splicer
	for {
		m, more := it.Next()
		if !more {
			break
		}
		switch {
		case m.KeyIs("protocolVersion"):
			s.Drop(m)
		case m.KeyIs("input") && js[m.ValueStart] == '{':
			in := js[m.ValueStart:m.ValueEnd]
			var ni []byte
			ni, losses = inputEcho(in, losses)
			if same(ni, in) {
				s.Keep(m)
			} else {
				s.Replace(m, ni)
			}
		default:
			s.Keep(m)
		}
	}
	if it.Malformed() {
		return js, losses
	}
	return apply(js, s.Edits), losses
}

// inputEcho downgrades the RunAgentInput echoed in RUN_STARTED.input.
func inputEcho(in []byte, losses []loss) ([]byte, []loss) {
	it := jsonedit.Members(in)
	var s jsonedit.Splicer
	var tools, context bool
	for {
		m, more := it.Next()
		if !more {
			break
		}
		switch {
		case m.KeyIs("tools"):
			tools = true
		case m.KeyIs("context"):
			context = true
		case m.KeyIs("messages") && in[m.ValueStart] == '[':
			arr := in[m.ValueStart:m.ValueEnd]
			var na []byte
			na, losses = messages(arr, true, losses)
			if !same(na, arr) {
				s.Replace(m, na)
				continue
			}
		}
		s.Keep(m)
	}
	at := it.Close()
	if at < 0 {
		return in, losses
	}
	// @ag-ui/core 0.0.58 RunAgentInputSchema has tools and context as required
	// arrays; 1.0 made them optional, absent meaning [].
	if !tools {
		s.Insert(at, []byte(`"tools":[]`))
	}
	if !context {
		s.Insert(at, []byte(`"context":[]`))
	}
	return apply(in, s.Edits), losses
}

// downgradeRunFinished makes the outcome one of 0.x's two strict shapes, or removes it.
func downgradeRunFinished(js []byte, losses []loss) ([]byte, []loss) {
	ostart, oend, ok := jsonedit.Member(js, "outcome")
	if !ok || js[ostart] != '{' {
		return js, losses // absent, null (0.x accepts it) or malformed
	}
	outcome := js[ostart:oend]
	typ := jsonedit.String(outcome, "type")
	if typ == nil {
		return js, losses // malformed
	}
	interrupt := jsonedit.TokenIs(typ, "interrupt")
	if !interrupt && !jsonedit.TokenIs(typ, "success") {
		// 0.x has no such outcome: remove every outcome member, so that no
		// earlier duplicate takes the removed one's place.
		what := whatUnknownOut
		if jsonedit.TokenIs(typ, "cancelled") {
			what = whatCancelled
		}
		it := jsonedit.Members(js)
		var s jsonedit.Splicer
		for {
			m, more := it.Next()
			if !more {
				break
			}
			if m.KeyIs("outcome") {
				s.Drop(m)
			} else {
				s.Keep(m)
			}
		}
		if it.Malformed() {
			return js, losses
		}
		losses = append(losses, loss{what: what, dropped: []dropped{{index: 0, typ: typ}}})
		return apply(js, s.Edits), losses
	}

	// 0.0.58: success is z.object({type}).strict(), interrupt is
	// z.object({type, interrupts}).strict().
	it := jsonedit.Members(outcome)
	var s jsonedit.Splicer
	var drops []dropped
	for i := 0; ; i++ {
		m, more := it.Next()
		if !more {
			break
		}
		switch {
		case m.KeyIs("type"), interrupt && m.KeyIs("interrupts"):
			s.Keep(m)
		case m.KeyIs("pendingToolCallIds"):
			s.Drop(m) // silent: the legacy consumer derives the same list
		default:
			s.Drop(m)
			drops = append(drops, dropped{index: i, typ: outcome[m.Start : m.Start+len(m.Key)+2]})
		}
	}
	if it.Malformed() || len(s.Edits) == 0 {
		return js, losses
	}
	if len(drops) > 0 {
		losses = append(losses, loss{what: whatOutcomeKey, dropped: drops})
	}
	return apply(js, []jsonedit.Edit{{From: ostart, To: oend, With: apply(outcome, s.Edits)}}), losses
}

// announcement renders the CUSTOM event that announces l. Every value in it
// is either a constant or a JSON string token copied from a valid event.
func (l loss) announcement() agui.Event {
	b := make([]byte, 0, 96+len(l.toolCallID)+len(l.messageID)+32*len(l.dropped))
	b = append(b, `{"type":"CUSTOM","name":"`+announcementName+`","value":{"what":"`...)
	b = append(b, l.what...)
	b = append(b, '"')
	if l.toolCallID != nil {
		b = append(b, `,"toolCallId":`...)
		b = append(b, l.toolCallID...)
	}
	if l.messageID != nil {
		b = append(b, `,"messageId":`...)
		b = append(b, l.messageID...)
	}
	b = append(b, `,"dropped":[`...)
	for i, d := range l.dropped {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, int64(d.index), 10)
		b = append(b, `,"type":`...)
		b = append(b, d.typ...)
		b = append(b, '}')
	}
	b = append(b, "]}}"...)
	return agui.Event{Type: "CUSTOM", JSON: b}
}

// note renders l for the proxy's log.
func (l loss) note() agui.Note {
	n := agui.Note{Kind: noteKind, Rule: l.what}
	switch {
	case l.toolCallID != nil:
		n.ID = unquote(l.toolCallID)
	case l.messageID != nil:
		n.ID = unquote(l.messageID)
	}
	var parts strings.Builder
	for i, d := range l.dropped {
		if i > 0 {
			parts.WriteString(", ")
		}
		if l.what != whatEvent && l.what != whatCancelled && l.what != whatUnknownOut {
			parts.WriteString("#" + strconv.Itoa(d.index) + " ")
		}
		parts.WriteString(unquote(d.typ))
	}
	const legacy = "a legacy (0.x) consumer"
	switch l.what {
	case whatToolResult:
		n.Message = "the result of tool call " + strconv.Quote(unquote(l.toolCallID)) +
			" carries content parts " + legacy + " cannot hold; only its text parts were bridged, dropped: " + parts.String()
	case whatToolMessage:
		n.Message = "tool message " + strconv.Quote(unquote(l.messageID)) + " (tool call " +
			strconv.Quote(unquote(l.toolCallID)) + ") carries content parts " + legacy +
			" cannot hold; only its text parts were bridged, dropped: " + parts.String()
	case whatFileSource:
		n.Message = "user message " + strconv.Quote(unquote(l.messageID)) +
			": dropped parts with a provider file source, which 0.x does not have: " + parts.String()
	case whatUserContent:
		n.Message = "user message " + strconv.Quote(unquote(l.messageID)) +
			": dropped content parts " + legacy + " cannot parse: " + parts.String()
	case whatCancelled:
		n.Message = "RUN_FINISHED outcome \"cancelled\" removed: 0.x has no such outcome, so " + legacy + " reads the run as a success"
	case whatUnknownOut:
		n.Message = "RUN_FINISHED outcome " + strconv.Quote(parts.String()) + " removed: 0.x does not know it, so " + legacy + " reads the run as a success"
	case whatOutcomeKey:
		n.Message = "RUN_FINISHED outcome members removed, 0.x outcomes are strict: " + parts.String()
	case whatEvent:
		n.Message = "dropped a " + parts.String() + " event: 0.x does not know this event type"
	}
	return n
}

package agui

import (
	"github.com/aguard/aguard/internal/jsonedit"
	"github.com/valyala/fastjson"
)

// This file reads the messages an agent replays — a MESSAGES_SNAPSHOT, and
// the RUN_STARTED input echo, whose messages the official client adds to
// those it holds — and keeps them consistent with what the consumer was told
// about tool calls (https://docs.ag-ui.com, Tool Calls, Frontend tools):
//
//   - A tool message answering a frontend call reaches the consumer only
//     when it is the application's own: one the application sent in this
//     run's input. "A producer that calls a frontend tool MUST NOT answer it:
//     no TOOL_CALL_RESULT, no fabricated tool message." A LangGraph ToolNode
//     answers frontend calls itself (`Error: Tool "x" not found`), and the
//     agent replays that answer in every later snapshot, next to the
//     application's real one.
//   - A tool call the messages carry that neither the input nor any run of
//     this stream started is one this run started: the LangGraph adapter
//     sometimes streams no TOOL_CALL_START for it (text before the call, the
//     second call of a message). It is reported, decided and pending like a
//     streamed call, so that what aguard drops and what it says is pending
//     never contradict each other.
//   - A decline aguard sent for a call (a TOOL_CALL_RESULT the consumer now
//     holds as a tool message) is kept in later snapshots, which the
//     consumer applies by dropping the messages they do not carry.

// knownCall is what a stream learned about one tool call.
type knownCall struct {
	// frontend: the call names an advertised tool.
	frontend bool
	// started: a run of this stream started it (streamed, or introduced
	// by replayed messages).
	started bool
}

// decline is the tool message the consumer holds for a call aguard declined.
type decline struct {
	msgID string
	js    []byte
}

// knownEntryBytes is what one entry of Stream.known costs beyond its id's
// bytes, for the bound.
const knownEntryBytes = 64

// learn records what the stream learned about call id: that it names an
// advertised tool, that a run of this stream started it. Past the bounds
// nothing more is recorded and the stream ends (overflow).
func (s *Stream) learn(id []byte, frontend, started bool) {
	k, ok := s.known[string(id)]
	if ok && (k.frontend || !frontend) && (k.started || !started) {
		return
	}
	if !ok {
		if len(s.known) >= maxKnownCalls || s.knownBytes+len(id)+knownEntryBytes > maxKnownBytes {
			s.overflow = true
			return
		}
		s.knownBytes += len(id) + knownEntryBytes
	}
	k.frontend = k.frontend || frontend
	k.started = k.started || started
	put(&s.known, string(id), k)
}

func (s *Stream) markFrontend(id []byte) { s.learn(id, true, false) }

func (s *Stream) markStarted(id string) {
	if k, ok := s.known[id]; !ok || !k.started {
		s.learn([]byte(id), false, true)
	}
}

// isFrontendCall reports whether id is known to call an advertised tool.
func (s *Stream) isFrontendCall(id []byte) bool {
	if k, ok := s.known[string(id)]; ok && k.frontend {
		return true
	}
	_, frontend := s.in.hasCall(id)
	return frontend
}

// introduces reports whether replayed messages carrying the call id carry a
// call nothing started: not the input's history, not a call of this run or
// of an earlier run of this stream.
func (s *Stream) introduces(id []byte) bool {
	if c := s.run.calls[string(id)]; c != nil && c.started {
		return false
	}
	if k, ok := s.known[string(id)]; ok && k.started {
		return false
	}
	known, _ := s.in.hasCall(id)
	return !known
}

// messageList is the messages of a history (a MESSAGES_SNAPSHOT's, a
// RUN_STARTED input echo's, a RunAgentInput's): the array of the parse
// tree, or, when the hollow copy left them out (hollow.go), the array's
// text, each message parsed when it is read, into a tree the next one
// reuses.
type messageList struct {
	tree []*fastjson.Value
	text []byte
	p    *fastjson.Parser
}

// replayedMessages returns the messages the hollow copy of the event being
// fed left out, if any (text nil when none).
func (s *Stream) replayedMessages() messageList {
	return messageList{text: s.msgText, p: &s.mp}
}

// each calls fn with each message and its index. A message is valid only
// until fn returns.
func (r messageList) each(fn func(i int, m *fastjson.Value)) {
	if r.text == nil {
		for i, m := range r.tree {
			fn(i, m)
		}
		return
	}
	eachElement(r.text, func(i int, el []byte) bool {
		// A parse fails only on nesting, which the hollow copy leaves
		// whole: not once check has passed.
		if m, err := r.p.ParseBytes(el); err == nil {
			fn(i, m)
		}
		return true
	})
}

// check checks the messages read from text as checkValue checks an array of
// them: the first message at fault, at its index.
func (r messageList) check() (fe *fieldError) {
	eachElement(r.text, func(i int, el []byte) bool {
		m, err := r.p.ParseBytes(el)
		if err != nil {
			fe = ferr("message is nested too deeply to be read").atIndex(i)
		} else if fe = checkMessage(m); fe != nil {
			fe = fe.atIndex(i)
		}
		return fe == nil
	})
	return fe
}

// scrubMessages handles the messages of a MESSAGES_SNAPSHOT (echo == false)
// or of the RUN_STARTED input echo (echo == true): it learns which calls name
// frontend tools and starts the calls the messages introduce, removes tool
// messages that answer a frontend call and are not the application's own,
// puts back the declines aguard sent (snapshots only), and seeds the owners
// of the messages the consumer gets as verifyEvents does (a snapshot
// authoritatively, the echo only for ids nothing claimed).
func (s *Stream) scrubMessages(e *ev, b *Batch, echo bool) {
	msgs := s.replayedMessages()
	if msgs.text == nil {
		if echo {
			msgs.tree = e.v.GetArray("input", "messages")
		} else {
			msgs.tree = e.v.GetArray("messages")
		}
	}
	s.learnCalls(msgs)
	drops := s.screenAnswers(msgs, echo, b)
	var adds []insertion
	if !echo && len(s.declined) > 0 && !s.opts.Monitor {
		adds = s.restoreDeclines(msgs, drops)
	}
	if len(drops) > 0 || len(adds) > 0 {
		s.editMessages(e, drops, adds, echo)
	}
	authoritative := !echo
	msgs.each(func(i int, m *fastjson.Value) {
		if len(drops) > 0 && drops[0] == i {
			drops = drops[1:]
			return
		}
		s.seedOwner(m, authoritative)
	})
	for _, a := range adds {
		if _, ok := s.run.msgs[a.msgID]; !ok || authoritative {
			if !ok {
				s.run.keep(len(a.msgID) + len(a.own.id))
			} else {
				// A new entity replaces the message's: the fast path's
				// remembered message (fast.go) may be the one replaced.
				s.run.text = nil
			}
			put(&s.run.msgs, a.msgID, &entity{id: a.msgID, own: a.own})
		}
	}
}

// learnCalls reads the calls of the messages' assistant messages: which name
// frontend tools, and which the messages introduce (started by this run).
func (s *Stream) learnCalls(msgs messageList) {
	msgs.each(func(_ int, m *fastjson.Value) {
		if string(m.GetStringBytes("role")) != "assistant" {
			return
		}
		for _, tc := range m.GetArray("toolCalls") {
			id, name := tc.GetStringBytes("id"), tc.GetStringBytes("function", "name")
			if s.in.isFrontend(name) {
				s.markFrontend(id)
			}
			if !s.introduces(id) {
				continue
			}
			c := s.run.introduce(id, name, string(m.GetStringBytes("id")), messageOwner(m), tc.GetStringBytes("function", "arguments"))
			if _, ok := s.run.replayAnswered[c.id]; ok {
				// Earlier replayed messages of the run carried its answer
				// before they carried the call.
				put(&s.answered, c.id, struct{}{})
				s.addAnswer(c.id, c.name, s.in.isFrontendName(c.name), nil)
			}
		}
	})
}

// screenAnswers reads the messages' tool messages: it returns the indexes of
// those to remove, answers to a frontend call that are not the
// application's own (noted; none in monitor mode), and records the others
// as answers — the answer of a call replayed messages introduced.
func (s *Stream) screenAnswers(msgs messageList, echo bool, b *Batch) (drops []int) {
	msgs.each(func(i int, m *fastjson.Value) {
		if string(m.GetStringBytes("role")) != "tool" {
			return
		}
		id, mid := m.GetStringBytes("toolCallId"), m.GetStringBytes("id")
		if s.isFrontendCall(id) {
			var own bool
			own, s.tbuf = s.in.ownAnswer(id, mid, m.Get("content"), s.tbuf)
			if !own {
				where := "MESSAGES_SNAPSHOT"
				if echo {
					where = "the RUN_STARTED input echo"
				}
				b.Notes = append(b.Notes, Note{Kind: "fabricated_result", ID: string(id),
					Message: "tool message " + jq(mid) + " in " + where + " answering frontend tool call " + jq(id) +
						" removed: it is not the application's own answer, and a producer MUST NOT fabricate one"})
				if !s.opts.Monitor {
					drops = append(drops, i)
					return
				}
			}
		}
		if _, ok := s.run.replayAnswered[string(id)]; !ok {
			put(&s.run.replayAnswered, string(id), struct{}{})
			s.run.keep(len(id))
		}
		if s.hold.held > 0 {
			if c := s.run.calls[string(id)]; c != nil && c.show == held {
				// Its answer is here: a call allowed at its end goes out
				// before the messages that carry the answer.
				c.resultSeen = true
				if c.endAllowed {
					s.release(b, c)
				}
			}
		}
		if c := s.run.calls[string(id)]; c != nil && c.snap {
			if _, ok := s.answered[c.id]; !ok {
				// A call replayed messages introduced has no
				// TOOL_CALL_RESULT to wait for: its tool message there is
				// its answer.
				put(&s.answered, c.id, struct{}{})
				s.addAnswer(c.id, c.name, s.in.isFrontendName(c.name), m.Get("content"))
			}
		}
	})
	return drops
}

// insertion is a message put into replayed messages after index after.
type insertion struct {
	after int
	js    []byte
	msgID string
	own   owner
}

// restoreDeclines returns the declines aguard sent for calls the messages
// carry and that the messages (without drops) lack: each goes after the
// assistant message carrying the call and the tool messages that follow it,
// where the official client put it when it applied the TOOL_CALL_RESULT.
func (s *Stream) restoreDeclines(msgs messageList, drops []int) []insertion {
	held := map[string]bool{}
	msgs.each(func(i int, m *fastjson.Value) {
		if len(drops) > 0 && drops[0] == i {
			drops = drops[1:]
			return
		}
		held[string(m.GetStringBytes("id"))] = true
	})
	var adds []insertion
	open := 0 // adds[open:] came from the last message that was not a tool message
	msgs.each(func(i int, m *fastjson.Value) {
		role := string(m.GetStringBytes("role"))
		if role == "tool" {
			for j := open; j < len(adds); j++ {
				adds[j].after = i
			}
			return
		}
		open = len(adds)
		if role != "assistant" {
			return
		}
		for _, tc := range m.GetArray("toolCalls") {
			d, ok := s.declined[string(tc.GetStringBytes("id"))]
			if !ok || held[d.msgID] {
				continue
			}
			held[d.msgID] = true
			adds = append(adds, insertion{after: i, js: d.js, msgID: d.msgID, own: messageOwner(m)})
		}
	})
	return adds
}

// recordDecline remembers the tool message the consumer holds once it has
// applied aguard's decline of c.
func (s *Stream) recordDecline(c *call, v Verdict) {
	if _, ok := s.declined[c.id]; ok {
		return
	}
	js := append([]byte(`{"id":`), jsonedit.AppendString(nil, "aguard-declined-"+c.id)...)
	js = append(js, `,"role":"tool","toolCallId":`...)
	js = jsonedit.AppendString(js, c.id)
	js = append(js, `,"content":`...)
	js = jsonedit.AppendString(js, "Declined by policy: "+v.Reason)
	js = withTag(js, c)
	js = append(js, '}')
	if s.knownBytes+len(js) > maxKnownBytes {
		s.overflow = true
		return
	}
	s.knownBytes += len(js)
	put(&s.declined, c.id, decline{msgID: "aguard-declined-" + c.id, js: js})
}

// editMessages rewrites e.out without the messages at the indexes drops
// and with the insertions adds.
func (s *Stream) editMessages(e *ev, drops []int, adds []insertion, echo bool) {
	obj := e.out
	off := 0
	if echo {
		is, ie, ok := jsonedit.Member(obj, "input")
		if !ok {
			return
		}
		obj, off = obj[is:ie], is
	}
	ms, me, ok := jsonedit.Member(obj, "messages")
	if !ok {
		return
	}
	ms, me = ms+off, me+off
	s.tbuf = editElements(s.tbuf[:0], e.out[ms:me], drops, adds)
	r := append(s.rbuf[:0], e.out[:ms]...)
	r = append(r, s.tbuf...)
	r = append(r, e.out[me:]...)
	s.rbuf = r
	e.out = r
}

// editElements appends to dst the compact array arr without the elements
// whose index is in drop (ascending), and with each insertion's text after
// the element at its index (insertions ascending by index).
func editElements(dst, arr []byte, drop []int, adds []insertion) []byte {
	dst = append(dst, '[')
	wrote := false
	put := func(v []byte) {
		if wrote {
			dst = append(dst, ',')
		}
		dst = append(dst, v...)
		wrote = true
	}
	it := jsonedit.Elements(arr)
	for idx := 0; ; idx++ {
		el, more := it.Next()
		if !more {
			break
		}
		if len(drop) > 0 && drop[0] == idx {
			drop = drop[1:]
		} else {
			put(arr[el.ValueStart:el.ValueEnd])
		}
		for len(adds) > 0 && adds[0].after == idx {
			put(adds[0].js)
			adds = adds[1:]
		}
	}
	for _, a := range adds {
		put(a.js)
	}
	return append(dst, ']')
}

// messageOwner is the owner of a replayed message: its subagentRunId, or the
// parent agent.
func messageOwner(m *fastjson.Value) owner {
	if sub := m.Get("subagentRunId"); sub != nil && sub.Type() == fastjson.TypeString {
		return owner{id: string(sub.GetStringBytes()), sub: true}
	}
	return owner{}
}

// seedOwner records the owner of a replayed message (and of its tool calls).
func (s *Stream) seedOwner(m *fastjson.Value, authoritative bool) {
	id := m.GetStringBytes("id")
	own := messageOwner(m)
	bucket := &s.run.msgs
	switch string(m.GetStringBytes("role")) {
	case "reasoning":
		bucket = &s.run.reasoning
	case "activity":
		if cur := s.run.activities[string(id)]; cur == nil || authoritative {
			if cur == nil {
				s.run.keep(len(id) + len(own.id))
			}
			o := own
			put(&s.run.activities, string(id), &o)
		}
		return
	}
	if cur := (*bucket)[string(id)]; cur == nil {
		put(bucket, string(id), &entity{own: own})
		s.run.keep(len(id) + len(own.id))
	} else if authoritative {
		cur.own = own
	}
	for _, tc := range m.GetArray("toolCalls") {
		tid := tc.GetStringBytes("id")
		if c := s.run.calls[string(tid)]; c == nil {
			put(&s.run.calls, string(tid), &call{id: string(tid), own: own})
			s.run.keep(len(tid) + len(own.id))
		} else if authoritative {
			c.own = own
		}
	}
}

// addAnswer queues the CallAnswered event of call id (named name, "" when
// unknown), whose answer has the given content (nil when absent).
func (s *Stream) addAnswer(id, name string, frontend bool, content *fastjson.Value) {
	start := len(s.abuf)
	if content != nil {
		s.abuf = content.MarshalTo(s.abuf)
	}
	s.answers = append(s.answers, CallEvent{Kind: CallAnswered, ID: id, Name: name, Frontend: frontend})
	s.answerSpans = append(s.answerSpans, start, len(s.abuf))
}

// reportAnswers appends the queued CallAnswered events to b.
func (s *Stream) reportAnswers(b *Batch) {
	for i, a := range s.answers {
		if from, to := s.answerSpans[2*i], s.answerSpans[2*i+1]; to > from {
			a.Content = s.abuf[from:to]
		}
		if s.opts.Decider != nil {
			if c := s.run.calls[a.ID]; c != nil {
				a.Visibility = c.vis.String() // screened after the answer was read
			}
		}
		b.Calls = append(b.Calls, a)
	}
	clear(s.answers)
	s.answers = s.answers[:0]
}

// jq renders untrusted bytes for a note's message: as a JSON string, every
// control character and quote escaped.
func jq(b []byte) string { return string(jsonedit.AppendString(nil, string(b))) }

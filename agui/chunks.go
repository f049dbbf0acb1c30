package agui

// This file tracks chunk expansion as the 1.0 client's transformChunks does it
// (@ag-ui/client 1.0.0). aguard forwards chunks as chunks; it only has to know which
// START/CONTENT/END events the consumer will synthesise from them, so that the
// sequence rules (seq.go) see the same stream the consumer's verifier sees.
//
// "A consumer MUST expand chunks as the streaming pattern specifies: the first
// chunk MUST carry toolCallId and toolCallName, and a continuation repeating
// toolCallName or parentMessageId with a conflicting value is fatal" (https://docs.ag-ui.com,
// Tool Calls, TOOL_CALL_CHUNK).

type laneKind uint8

const (
	laneText laneKind = iota + 1
	laneTool
	laneReasoning
)

func (k laneKind) String() string {
	switch k {
	case laneText:
		return "text message"
	case laneTool:
		return "tool call"
	default:
		return "reasoning message"
	}
}

// lane is the stream one owner is assembling from chunks. Each owner (the
// parent agent, or a subagent) has at most one.
type lane struct {
	own  owner // the lane's key
	kind laneKind
	id   string
	// The opener's subagentRunId, re-stamped on the synthesised END.
	opTagged bool
	opTagID  string
	// text: established role (absent means assistant) and name;
	// tool: toolCallName and parentMessageId.
	name      string
	hasName   bool
	role      string
	parent    string
	hasParent bool
}

func (l *lane) openerTag() tag {
	if !l.opTagged {
		return tag{}
	}
	return tag{id: []byte(l.opTagID), ok: true}
}

// laneIndex returns the index of own's lane, or -1.
func (s *Stream) laneIndex(own owner) int {
	for i := range s.lanes {
		if s.lanes[i].own == own {
			return i
		}
	}
	return -1
}

func (s *Stream) laneIndexTag(t tag) int {
	for i := range s.lanes {
		if t.is(s.lanes[i].own) {
			return i
		}
	}
	return -1
}

// closeLane closes the stream lane i holds: the consumer synthesises the END,
// and that END goes through the sequence rules like any other.
func (s *Stream) closeLane(i int) *violation {
	l := s.lanes[i]
	s.hold.closed = true
	s.lanes = append(s.lanes[:i], s.lanes[i+1:]...)
	t := l.openerTag()
	id := []byte(l.id)
	switch l.kind {
	case laneText:
		return s.run.textCont(tTextEnd, id, t, true)
	case laneTool:
		return s.run.toolCont(tToolEnd, id, nil, t, true)
	default:
		return s.run.reasoningCont(tReasoningMsgEnd, false, id, t, true)
	}
}

// closeLaneOf closes the lane of the owner an explicit event's tag names:
// "An explicit event closes only ITS OWN lane's pending stream" (transformChunks).
func (s *Stream) closeLaneOf(t tag) *violation {
	if len(s.lanes) == 0 {
		return nil
	}
	if i := s.laneIndexTag(t); i >= 0 {
		return s.closeLane(i)
	}
	return nil
}

// closeAllLanes closes every lane, in the order they opened (run-level events
// and MESSAGES_SNAPSHOT).
func (s *Stream) closeAllLanes() *violation {
	for len(s.lanes) > 0 {
		if v := s.closeLane(0); v != nil {
			return v
		}
	}
	return nil
}

// resolveLane decides which lane a chunk belongs to; the result is the lane's
// owner.
func (s *Stream) resolveLane(kind laneKind, typ string, id []byte, hasID bool, t tag) (owner, *violation) {
	if hasID {
		// A named id continues wherever it is already open.
		for i := range s.lanes {
			l := &s.lanes[i]
			if l.kind == kind && l.id == string(id) {
				if t.ok && !t.is(l.own) {
					return owner{}, viol("owner_mismatch", string(id), typ+" for "+kind.String()+" "+q(id)+": subagentRunId "+q(t.id)+" does not match the open stream's owner "+l.own.String())
				}
				return l.own, nil
			}
		}
		return t.owner(), nil
	}
	if t.ok {
		return t.owner(), nil
	}
	if i := s.laneIndex(owner{}); i >= 0 && s.lanes[i].kind == kind {
		return owner{}, nil
	}
	if s.hold.ghost {
		// An event aguard kept from the consumer closed a chunked item
		// the consumer still has open: it would resolve this chunk by its
		// own lanes, not aguard's (hold.go).
		return owner{}, viol("ambiguous_chunk", "", typ+" carries neither an id nor a subagentRunId while a chunked item the consumer still sees open was closed by an event aguard holds back or hides; the consumer could not tell which item it continues")
	}
	found, n := owner{}, 0
	for i := range s.lanes {
		if s.lanes[i].kind == kind {
			found = s.lanes[i].own
			n++
		}
	}
	if n > 1 {
		return owner{}, viol("ambiguous_chunk", "", typ+" carries neither an id nor a subagentRunId, but several subagent lanes have an open "+kind.String())
	}
	return found, nil
}

// chunk is what a *_CHUNK event carries, as read by the Stream.
type chunk struct {
	kind      laneKind
	typ       string
	id        []byte
	hasID     bool
	name      []byte // toolCallName / text name
	hasName   bool
	role      []byte
	hasRole   bool
	parent    []byte
	hasParent bool
	delta     []byte
	hasDelta  bool
	rawEvent  bool // rawEvent present and not null
	metadata  bool
	unknown   bool // members the chunk schema does not describe
	t         tag
	// Set by expandChunk: the id of the item the chunk continues or opens
	// (laneID), and the tool call it opened, if it opened one (call).
	laneID string
	call   *call
}

// expandChunk applies one chunk the way transformChunks expands it.
func (s *Stream) expandChunk(c *chunk) *violation {
	laneOwn, v := s.resolveLane(c.kind, c.typ, c.id, c.hasID, c.t)
	if v != nil {
		return v
	}
	li := s.laneIndex(laneOwn)
	var l *lane
	if li >= 0 {
		l = &s.lanes[li]
	}
	synthesised := false
	var id []byte
	if l != nil && l.kind == c.kind && (!c.hasID || string(c.id) == l.id) {
		// A continuation. It may repeat a field its opener established,
		// but only with the same value.
		switch c.kind {
		case laneTool:
			if c.hasName && string(c.name) != l.name {
				return viol("chunk_conflict", l.id, "TOOL_CALL_CHUNK continuing tool call '"+l.id+"' has toolCallName "+q(c.name)+", but the open stream's is '"+l.name+"'")
			}
			if c.hasParent && (!l.hasParent || string(c.parent) != l.parent) {
				return viol("chunk_conflict", l.id, "TOOL_CALL_CHUNK continuing tool call '"+l.id+"' has parentMessageId "+q(c.parent)+", but the open stream's is "+optQ([]byte(l.parent), l.hasParent))
			}
		case laneText:
			if c.hasRole && string(c.role) != l.role {
				return viol("chunk_conflict", l.id, "TEXT_MESSAGE_CHUNK continuing text message '"+l.id+"' has role "+q(c.role)+", but the open stream's is '"+l.role+"'")
			}
			if c.hasName && (!l.hasName || string(c.name) != l.name) {
				return viol("chunk_conflict", l.id, "TEXT_MESSAGE_CHUNK continuing text message '"+l.id+"' has name "+q(c.name)+", but the open stream's is "+optQ([]byte(l.name), l.hasName))
			}
		}
		id = []byte(l.id)
	} else {
		if li >= 0 {
			if v := s.closeLane(li); v != nil {
				return v
			}
		}
		if !c.hasID {
			if c.kind == laneTool {
				return viol("chunk_missing_id", "", "first TOOL_CALL_CHUNK of a tool call must have a toolCallId")
			}
			return viol("chunk_missing_id", "", "first "+c.typ+" of a message must have a messageId")
		}
		if c.kind == laneTool && !c.hasName {
			return viol("chunk_missing_name", string(c.id), "first TOOL_CALL_CHUNK of tool call "+q(c.id)+" must have a toolCallName")
		}
		nl := lane{own: laneOwn, kind: c.kind, id: string(c.id), opTagged: c.t.ok, opTagID: string(c.t.id)}
		switch c.kind {
		case laneTool:
			nl.name, nl.hasName = string(c.name), true
			nl.parent, nl.hasParent = string(c.parent), c.hasParent
			call, v := s.run.toolStart(c.id, c.name, c.parent, c.hasParent, c.t)
			if v != nil {
				return v
			}
			c.call = call
		case laneText:
			nl.role = "assistant"
			if c.hasRole {
				nl.role = string(c.role)
			}
			nl.name, nl.hasName = string(c.name), c.hasName
			s.run.keep(len(nl.name))
			if v := s.run.textStart(c.id, c.t); v != nil {
				return v
			}
		default:
			if v := s.run.reasoningStart(tReasoningMsgStart, false, c.id, c.t); v != nil {
				return v
			}
		}
		s.lanes = append(s.lanes, nl)
		l = &s.lanes[len(s.lanes)-1]
		synthesised = true
		id = c.id
	}
	c.laneID = l.id
	// The content/args event: synthesised for a delta or a rawEvent, or, when
	// the chunk produced nothing else, for metadata or unknown members.
	if c.hasDelta || c.rawEvent || (!synthesised && (c.metadata || c.unknown)) {
		t := c.t
		if !t.ok {
			t = l.openerTag()
		}
		switch c.kind {
		case laneTool:
			return s.run.toolCont(tToolArgs, id, c.delta, t, false)
		case laneText:
			return s.run.textCont(tTextContent, id, t, false)
		default:
			return s.run.reasoningCont(tReasoningMsgCont, false, id, t, false)
		}
	}
	return nil
}

// mixedForms rejects an explicit END for an item another lane is still
// assembling from chunks. The consumer would close the item, and the lane's
// synthesised END — at the latest when the run ends, even with aguard's own
// RUN_ERROR — would then close an item that is not open, which the 1.0 client
// rejects. The streaming pattern says a producer MUST NOT mix the explicit
// and the chunked form inside one item.
func (s *Stream) mixedForms(kind laneKind, typ string, id []byte) *violation {
	for i := range s.lanes {
		if s.lanes[i].kind == kind && s.lanes[i].id == string(id) {
			return viol("chunk_form_mixed", string(id), typ+" for "+kind.String()+" "+q(id)+", which "+s.lanes[i].own.String()+" is still assembling from chunks")
		}
	}
	return nil
}

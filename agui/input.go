package agui

import (
	"github.com/valyala/fastjson"
)

// RunInput is what aguard reads from a RunAgentInput (the POST body a
// consumer sends to start a run). It is immutable once parsed and
// may be shared by the Streams of one request.
type RunInput struct {
	// ThreadID and RunID are the input's threadId and runId.
	ThreadID, RunID string
	// ProtocolVersion is the consumer's declared version, "" when absent.
	ProtocolVersion string
	// Tools are the advertised (frontend) tools, in input order: "The tools
	// list in run input is the application's: the agent proposes a call, the
	// application executes it" (https://docs.ag-ui.com, Tool Calls, Frontend
	// tools).
	Tools []Tool
	// ToolMessages are the tool messages in messages, in order: the
	// consumer's answers to earlier calls.
	ToolMessages []ToolMessage
	// Resume are the resume entries, in order.
	Resume []ResumeEntry

	tools map[string]int // name -> index in Tools (first wins)
	// answers maps a toolCallId to the indexes in ToolMessages of the tool
	// messages answering it: the application's own answers.
	answers map[string][]int
	// calls holds the ids of the assistant toolCalls in messages: the
	// thread's history. The value reports that the call names an advertised
	// tool.
	calls map[string]bool
	// callMsgs maps each of those ids to the id of the assistant message
	// that carries it (the first, if several do).
	callMsgs map[string]string
}

// ToolMessage is a tool message of the input: "a tool message per call, keyed
// by toolCallId — a failure is still an answer, as a tool message with error
// set" (https://docs.ag-ui.com, Tool Calls, Frontend tools).
type ToolMessage struct {
	ID, ToolCallID string
	// Content is the raw JSON of its content: a string or a list of parts.
	Content []byte
	// Error is its error, when HasError.
	Error    string
	HasError bool
}

// ResumeEntry is one entry of the input's resume list.
type ResumeEntry struct {
	InterruptID string
	Status      string // "resolved" or "cancelled"
}

// Tool is one advertised tool.
type Tool struct {
	Name        string
	Description string
	// Parameters is the raw JSON Schema of the arguments, or nil when absent.
	Parameters []byte
}

// InputError reports a request body that is not a RunAgentInput. The proxy
// answers it with HTTP 400 invalid_run_input.
type InputError struct {
	// Path locates the offending value, e.g. "messages[2].role"; "" for the
	// body as a whole.
	Path string
	// Reason says what is wrong with it.
	Reason string
}

// Error implements error.
func (e *InputError) Error() string {
	if e.Path == "" {
		return "invalid run input: " + e.Reason
	}
	return "invalid run input: " + e.Path + ": " + e.Reason
}

// inputParsers recycles the parsers of ParseRunInput: a parser's value cache
// is a few KiB for a small input, garbage once per run otherwise. Nothing
// of a parse outlives ParseRunInput (every field is copied out).
var inputParsers fastjson.ParserPool

// ParseRunInput checks that body is a RunAgentInput — a JSON object with
// string threadId and runId, a messages array of messages each with a string
// id and role and the fields of that role, optional tools (each with a string
// name), context, resume and protocolVersion of the right shapes — and returns
// what aguard needs from it. Unknown members are ignored. A failure is an
// *InputError.
func ParseRunInput(body []byte) (*RunInput, error) {
	var sc scanner
	compact, serr := sc.scan(body)
	if serr != nil {
		return nil, &InputError{Reason: "not valid JSON: " + serr.Error()}
	}
	// A large input is parsed as events are (hollow.go): without what
	// nothing reads, its messages one at a time.
	src, msgs := body, messageList{}
	if len(body) >= hollowAbove {
		if !compact {
			body = appendCompact(nil, body)
		}
		src, msgs.text = hollowInput(body)
		if treeTooLarge(src, msgs.text) {
			return nil, &InputError{Reason: msgInputTreeTooLarge}
		}
		if msgs.text != nil {
			msgs.p = inputParsers.Get()
			defer inputParsers.Put(msgs.p)
		}
	}
	p := inputParsers.Get()
	defer inputParsers.Put(p)
	v, err := p.ParseBytes(src)
	if err != nil {
		return nil, &InputError{Reason: "JSON nested too deeply"}
	}
	if v.Type() != fastjson.TypeObject {
		return nil, &InputError{Reason: "expected a JSON object, got " + typeName(v.Type())}
	}
	o, _ := v.Object()
	if _, fe := checkObject(o, inputFields, msgs); fe != nil {
		return nil, &InputError{Path: fe.path(), Reason: fe.reason}
	}
	in := &RunInput{
		ThreadID:        string(v.GetStringBytes("threadId")),
		RunID:           string(v.GetStringBytes("runId")),
		ProtocolVersion: string(v.GetStringBytes("protocolVersion")),
		tools:           map[string]int{},
		answers:         map[string][]int{},
		calls:           map[string]bool{},
		callMsgs:        map[string]string{},
	}
	for _, t := range v.GetArray("tools") {
		tool := Tool{Name: string(t.GetStringBytes("name")), Description: string(t.GetStringBytes("description"))}
		if ps := t.Get("parameters"); ps != nil && ps.Type() != fastjson.TypeNull {
			tool.Parameters = ps.MarshalTo(nil)
		}
		if _, dup := in.tools[tool.Name]; !dup {
			in.tools[tool.Name] = len(in.Tools)
		}
		in.Tools = append(in.Tools, tool)
	}
	if msgs.text == nil {
		msgs.tree = v.GetArray("messages")
	}
	msgs.each(func(_ int, m *fastjson.Value) {
		switch string(m.GetStringBytes("role")) {
		case "tool":
			tm := ToolMessage{ID: string(m.GetStringBytes("id")), ToolCallID: string(m.GetStringBytes("toolCallId"))}
			in.answers[tm.ToolCallID] = append(in.answers[tm.ToolCallID], len(in.ToolMessages))
			if c := m.Get("content"); c != nil {
				tm.Content = c.MarshalTo(nil)
			}
			if ev := m.Get("error"); ev != nil && ev.Type() == fastjson.TypeString {
				tm.Error, tm.HasError = string(ev.GetStringBytes()), true
			}
			in.ToolMessages = append(in.ToolMessages, tm)
		case "assistant":
			for _, tc := range m.GetArray("toolCalls") {
				_, frontend := in.tools[string(tc.GetStringBytes("function", "name"))]
				id := string(tc.GetStringBytes("id"))
				in.calls[id] = in.calls[id] || frontend
				if _, ok := in.callMsgs[id]; !ok {
					in.callMsgs[id] = string(m.GetStringBytes("id"))
				}
			}
		}
	})
	for _, r := range v.GetArray("resume") {
		in.Resume = append(in.Resume, ResumeEntry{InterruptID: string(r.GetStringBytes("interruptId")), Status: string(r.GetStringBytes("status"))})
	}
	return in, nil
}

// Legacy reports whether the consumer declared no protocolVersion: a 0.x
// consumer, or a 1.0 client pinned below its own version
// (https://docs.ag-ui.com, Versioning).
func (in *RunInput) Legacy() bool { return in.ProtocolVersion == "" }

// HasToolHistory reports whether the input carries tool history: a tool
// message, or an assistant message with tool calls. An input without any
// cannot answer, or fail to answer, calls an earlier run left pending.
func (in *RunInput) HasToolHistory() bool {
	return in != nil && (len(in.ToolMessages) > 0 || len(in.calls) > 0)
}

// Tool returns the advertised tool called name.
func (in *RunInput) Tool(name string) (Tool, bool) {
	if in == nil {
		return Tool{}, false
	}
	i, ok := in.tools[name]
	if !ok {
		return Tool{}, false
	}
	return in.Tools[i], true
}

// isFrontend reports whether name is an advertised tool. name may alias a
// parser buffer; the lookup does not allocate.
func (in *RunInput) isFrontend(name []byte) bool {
	if in == nil {
		return false
	}
	_, ok := in.tools[string(name)]
	return ok
}

// isFrontendName is isFrontend for a string.
func (in *RunInput) isFrontendName(name string) bool {
	if in == nil {
		return false
	}
	_, ok := in.tools[name]
	return ok
}

// hasCall reports whether the input's history carries the call id, and
// whether that call names an advertised tool.
func (in *RunInput) hasCall(id []byte) (known, frontend bool) {
	if in == nil {
		return false, false
	}
	frontend, known = in.calls[string(id)]
	return known, frontend
}

// ownCall reports whether the assistant message msgID carrying call id is
// the application's own: its history has that call in that message.
func (in *RunInput) ownCall(id, msgID []byte) bool {
	if in == nil {
		return false
	}
	m, ok := in.callMsgs[string(id)]
	return ok && m == string(msgID)
}

// ownToolMessage reports whether the tool message msgID answering call id
// is one of the application's own.
func (in *RunInput) ownToolMessage(id, msgID []byte) bool {
	if in == nil {
		return false
	}
	for _, i := range in.answers[string(id)] {
		if in.ToolMessages[i].ID == string(msgID) {
			return true
		}
	}
	return false
}

// ownAnswer reports whether a tool message answering call — with message id
// msgID and content (nil when absent) — is one the application sent in this
// run's input: one of its tool messages for that call with the same id or,
// where either id is absent (empty), the same content. scratch is reused for
// the content's text and returned.
func (in *RunInput) ownAnswer(call, msgID []byte, content *fastjson.Value, scratch []byte) (bool, []byte) {
	if in == nil {
		return false, scratch
	}
	idx := in.answers[string(call)]
	text := scratch[:0]
	haveText := false
	for _, i := range idx {
		tm := &in.ToolMessages[i]
		if len(msgID) > 0 && tm.ID != "" {
			if tm.ID == string(msgID) {
				return true, text
			}
			continue
		}
		if !haveText && content != nil {
			text, haveText = content.MarshalTo(text), true
		}
		if haveText && string(text) == string(tm.Content) {
			return true, text
		}
	}
	return false, text
}

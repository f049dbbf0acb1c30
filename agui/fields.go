package agui

import (
	"math"
	"strconv"
	"strings"

	"github.com/valyala/fastjson"
)

// This file is the event schema table: for each of the 31 AG-UI 1.0 event
// types (https://docs.ag-ui.com, the 1.0 schema), and for the retired
// THINKING_* events the 1.0 client still translates, the top-level fields the
// protocol defines and the shape each must have. The official client's
// enforcement stage (enforceEvents) treats "a known field holding a wrong value" as fatal — a number id,
// a null optional, a missing required field, a wrong enum value — and so does
// the Stream. Unknown fields are not checked: they pass through.

// kind is the shape a field must have.
type kind uint8

const (
	kString     kind = iota // JSON string
	kEnum                   // JSON string, one of field.enum
	kAny                    // any JSON value, null included (presence is what counts)
	kAnyNonNil              // any JSON value except null
	kObject                 // JSON object
	kInt                    // integer within ±(2^53-1)
	kUint                   // integer within [0, 2^53-1]
	kBool                   // true or false
	kStrings                // array of strings
	kPatch                  // RFC 6902 JSON Patch array
	kUsage                  // TokenUsage[]
	kRunOutcome             // RUN_FINISHED.outcome union
	kSubOutcome             // SUBAGENT_FINISHED.outcome union
	kContent                // string | ContentPart[]
	kMessages               // Message[]
	kInput                  // RunAgentInput (the RUN_STARTED echo)
	kTools                  // Tool[]
	kContexts               // Context[]
	kResume                 // ResumeEntry[]
	kToolCalls              // ToolCall[] on an assistant message
	kFunction               // FunctionCall {name, arguments}
	kInterrupts             // Interrupt[] (min 1)
	kSource                 // PartSource union
	kMsgContent             // content inside a message: as kContent, compat nulls tolerated
)

// field is one known member of an object.
type field struct {
	name string
	kind kind
	req  bool
	// nullOK: a null here is tolerated and means "absent" (the compat nulls
	// of the 1.0 client's compatibility layer).
	nullOK bool
	enum   []string
}

// eventSpec describes one event type.
type eventSpec struct {
	typ    string
	fields []field
}

func f(name string, k kind) field            { return field{name: name, kind: k} }
func req(name string, k kind) field          { return field{name: name, kind: k, req: true} }
func nullable(name string, k kind) field     { return field{name: name, kind: k, nullOK: true} }
func enum(name string, vals ...string) field { return field{name: name, kind: kEnum, enum: vals} }

// base is the envelope every event has (BaseEvent); attributable events
// add subagentRunId, which is never null.
func base(attributable bool, fs ...field) []field {
	out := []field{req("type", kString), f("timestamp", kInt), nullable("rawEvent", kAnyNonNil), f("metadata", kObject)}
	if attributable {
		out = append(out, f("subagentRunId", kString))
	}
	return append(out, fs...)
}

// Event type names.
const (
	tRunStarted         = "RUN_STARTED"
	tRunFinished        = "RUN_FINISHED"
	tRunError           = "RUN_ERROR"
	tStepStarted        = "STEP_STARTED"
	tStepFinished       = "STEP_FINISHED"
	tTextStart          = "TEXT_MESSAGE_START"
	tTextContent        = "TEXT_MESSAGE_CONTENT"
	tTextEnd            = "TEXT_MESSAGE_END"
	tTextChunk          = "TEXT_MESSAGE_CHUNK"
	tToolStart          = "TOOL_CALL_START"
	tToolArgs           = "TOOL_CALL_ARGS"
	tToolEnd            = "TOOL_CALL_END"
	tToolChunk          = "TOOL_CALL_CHUNK"
	tToolResult         = "TOOL_CALL_RESULT"
	tStateSnapshot      = "STATE_SNAPSHOT"
	tStateDelta         = "STATE_DELTA"
	tMessagesSnapshot   = "MESSAGES_SNAPSHOT"
	tActivitySnapshot   = "ACTIVITY_SNAPSHOT"
	tActivityDelta      = "ACTIVITY_DELTA"
	tReasoningStart     = "REASONING_START"
	tReasoningMsgStart  = "REASONING_MESSAGE_START"
	tReasoningMsgCont   = "REASONING_MESSAGE_CONTENT"
	tReasoningMsgEnd    = "REASONING_MESSAGE_END"
	tReasoningMsgChunk  = "REASONING_MESSAGE_CHUNK"
	tReasoningEnd       = "REASONING_END"
	tReasoningEncrypted = "REASONING_ENCRYPTED_VALUE"
	tRaw                = "RAW"
	tCustom             = "CUSTOM"
	tSubagentStarted    = "SUBAGENT_STARTED"
	tSubagentFinished   = "SUBAGENT_FINISHED"
	tSubagentError      = "SUBAGENT_ERROR"
	// Retired 0.x events the 1.0 client translates to REASONING_*.
	tThinkingStart     = "THINKING_START"
	tThinkingEnd       = "THINKING_END"
	tThinkingTextStart = "THINKING_TEXT_MESSAGE_START"
	tThinkingTextCont  = "THINKING_TEXT_MESSAGE_CONTENT"
	tThinkingTextEnd   = "THINKING_TEXT_MESSAGE_END"
)

var textRoles = []string{"developer", "system", "assistant", "user"}

// eventSpecs is read-only after package initialisation.
var eventSpecs = []eventSpec{
	{tRunStarted, base(false, req("threadId", kString), req("runId", kString), f("protocolVersion", kString), f("parentRunId", kString), f("input", kInput))},
	{tRunFinished, base(false, req("threadId", kString), req("runId", kString), nullable("result", kAnyNonNil), nullable("outcome", kRunOutcome), f("usage", kUsage))},
	{tRunError, base(false, req("message", kString), f("code", kString), f("usage", kUsage))},
	{tStepStarted, base(true, req("stepName", kString))},
	{tStepFinished, base(true, req("stepName", kString))},
	{tTextStart, base(true, req("messageId", kString), enum("role", textRoles...), f("name", kString))},
	{tTextContent, base(true, req("messageId", kString), req("delta", kString))},
	{tTextEnd, base(true, req("messageId", kString))},
	{tTextChunk, base(true, f("messageId", kString), enum("role", textRoles...), f("delta", kString), f("name", kString))},
	{tToolStart, base(true, req("toolCallId", kString), req("toolCallName", kString), nullable("parentMessageId", kString))},
	{tToolArgs, base(true, req("toolCallId", kString), req("delta", kString))},
	{tToolEnd, base(true, req("toolCallId", kString))},
	{tToolChunk, base(true, f("toolCallId", kString), f("toolCallName", kString), nullable("parentMessageId", kString), f("delta", kString))},
	{tToolResult, base(true, req("messageId", kString), req("toolCallId", kString), req("content", kContent), enum("role", "tool"))},
	{tStateSnapshot, base(true, req("snapshot", kAny))},
	{tStateDelta, base(true, req("delta", kPatch))},
	{tMessagesSnapshot, base(false, req("messages", kMessages))},
	{tActivitySnapshot, base(true, req("messageId", kString), req("activityType", kString), req("content", kObject), f("replace", kBool))},
	{tActivityDelta, base(true, req("messageId", kString), req("activityType", kString), req("patch", kPatch))},
	{tReasoningStart, base(true, req("messageId", kString))},
	{tReasoningMsgStart, base(true, req("messageId", kString), field{name: "role", kind: kEnum, req: true, enum: []string{"reasoning"}})},
	{tReasoningMsgCont, base(true, req("messageId", kString), req("delta", kString))},
	{tReasoningMsgEnd, base(true, req("messageId", kString))},
	{tReasoningMsgChunk, base(true, f("messageId", kString), f("delta", kString))},
	{tReasoningEnd, base(true, req("messageId", kString))},
	{tReasoningEncrypted, base(true, field{name: "subtype", kind: kEnum, req: true, enum: []string{"tool-call", "message"}}, req("entityId", kString), req("encryptedValue", kString))},
	{tRaw, base(true, req("event", kAny), f("source", kString))},
	{tCustom, base(true, req("name", kString), req("value", kAny))},
	{tSubagentStarted, base(false, req("subagentRunId", kString), req("name", kString), f("description", kString), f("parentSubagentRunId", kString), f("parentToolCallId", kString), f("parentMessageId", kString))},
	{tSubagentFinished, base(false, req("subagentRunId", kString), nullable("result", kAnyNonNil), f("outcome", kSubOutcome))},
	{tSubagentError, base(false, req("subagentRunId", kString), req("message", kString), f("code", kString))},
	{tThinkingStart, base(true)},
	{tThinkingEnd, base(true)},
	{tThinkingTextStart, base(true)},
	{tThinkingTextCont, base(true, req("delta", kString))},
	{tThinkingTextEnd, base(true)},
}

// specFor returns the spec of the event type named by typ, or nil for a type
// the protocol does not know.
func specFor(typ []byte) *eventSpec {
	for i := range eventSpecs {
		if eventSpecs[i].typ == string(typ) {
			return &eventSpecs[i]
		}
	}
	return nil
}

// Nested shapes: outcomes, interrupts, messages, parts, tools (the 1.0 schema).
var (
	usageFields = []field{f("provider", kString), f("model", kString), f("inputTokens", kUint), f("outputTokens", kUint),
		f("totalTokens", kUint), f("reasoningTokens", kUint), f("cachedInputTokens", kUint), f("cacheWriteInputTokens", kUint)}
	successOutcomeFields   = []field{f("type", kString), f("pendingToolCallIds", kStrings)}
	interruptOutcomeFields = []field{f("type", kString), req("interrupts", kInterrupts)}
	interruptFields        = []field{f("subagentRunId", kString), req("id", kString), req("reason", kString), f("message", kString),
		f("toolCallId", kString), f("responseSchema", kObject), f("expiresAt", kString), f("metadata", kObject)}
	suspendedOutcomeFields = []field{f("type", kString), f("interruptIds", kStrings)}
	textPartFields         = []field{f("type", kString), f("id", kString), req("text", kString), f("metadata", kAnyNonNil)}
	mediaPartFields        = []field{f("type", kString), f("id", kString), req("source", kSource), f("metadata", kAnyNonNil)}
	// Inside messages, the 1.0 client's compat layer removes a null media
	// metadata.
	mediaPartFieldsCompat = []field{f("type", kString), f("id", kString), req("source", kSource), nullable("metadata", kAnyNonNil)}
	dataSourceFields      = []field{f("type", kString), req("value", kString), req("mimeType", kString)}
	urlSourceFields       = []field{f("type", kString), req("value", kString), f("mimeType", kString)}
	fileSourceFields      = []field{f("type", kString), req("value", kString), f("provider", kString), f("mimeType", kString)}
	patchOpFields         = map[string][]field{
		"add":     {f("op", kString), req("path", kString), req("value", kAny)},
		"remove":  {f("op", kString), req("path", kString)},
		"replace": {f("op", kString), req("path", kString), req("value", kAny)},
		"move":    {f("op", kString), req("from", kString), req("path", kString)},
		"copy":    {f("op", kString), req("from", kString), req("path", kString)},
		"test":    {f("op", kString), req("path", kString), req("value", kAny)},
	}
	msgCommon    = []field{f("subagentRunId", kString), req("id", kString), f("role", kString), f("metadata", kObject)}
	messageShape = map[string][]field{
		"developer": append(append([]field{}, msgCommon...), f("name", kString), f("encryptedValue", kString), req("content", kString)),
		"system":    append(append([]field{}, msgCommon...), f("name", kString), f("encryptedValue", kString), req("content", kString)),
		"assistant": append(append([]field{}, msgCommon...), f("name", kString), f("encryptedValue", kString), f("content", kString), f("toolCalls", kToolCalls)),
		"user":      append(append([]field{}, msgCommon...), f("name", kString), f("encryptedValue", kString), req("content", kMsgContent)),
		"tool":      append(append([]field{}, msgCommon...), req("content", kMsgContent), req("toolCallId", kString), f("error", kString), f("encryptedValue", kString)),
		"activity":  append(append([]field{}, msgCommon...), req("activityType", kString), req("content", kObject)),
		"reasoning": append(append([]field{}, msgCommon...), req("content", kString), f("encryptedValue", kString)),
	}
	toolCallFields = []field{req("id", kString), field{name: "type", kind: kEnum, req: true, enum: []string{"function"}},
		req("function", kFunction), f("encryptedValue", kString), f("metadata", kObject)}
	functionFields = []field{req("name", kString), req("arguments", kString)}
	toolFields     = []field{req("name", kString), f("description", kString), nullable("parameters", kAnyNonNil), f("metadata", kObject)}
	contextFields  = []field{req("description", kString), req("value", kString)}
	resumeFields   = []field{req("interruptId", kString), field{name: "status", kind: kEnum, req: true, enum: []string{"resolved", "cancelled"}},
		nullable("payload", kAnyNonNil), f("metadata", kObject)}
	subOutcomeArms = map[string][]field{"success": {f("type", kString)}, "suspended": suspendedOutcomeFields}
	sourceArms     = map[string][]field{"data": dataSourceFields, "url": urlSourceFields, "file": fileSourceFields}
	runOutcomeArms = map[string][]field{"success": successOutcomeFields, "interrupt": interruptOutcomeFields, "cancelled": {f("type", kString)}}
	// inputFields is RunAgentInput as aguard reads it, with the whole-value
	// nulls the 1.0 client's compatibility layer tolerates on the echo.
	inputFields = []field{req("threadId", kString), req("runId", kString), f("protocolVersion", kString), f("parentRunId", kString),
		nullable("state", kAny), req("messages", kMessages), f("tools", kTools), f("context", kContexts),
		nullable("forwardedProps", kAnyNonNil), f("resume", kResume)}
)

// fieldError is a malformed value: where (path segments, innermost first
// while it is being built) and why.
type fieldError struct {
	segs   []string
	reason string
}

func (e *fieldError) at(seg string) *fieldError { e.segs = append(e.segs, seg); return e }
func (e *fieldError) atIndex(i int) *fieldError { return e.at("[" + strconv.Itoa(i) + "]") }

// path renders the location as in "messages[2].role".
func (e *fieldError) path() string {
	var sb strings.Builder
	for i := len(e.segs) - 1; i >= 0; i-- {
		s := e.segs[i]
		if sb.Len() > 0 && s[0] != '[' {
			sb.WriteByte('.')
		}
		sb.WriteString(s)
	}
	return sb.String()
}

func (e *fieldError) Error() string {
	if p := e.path(); p != "" {
		return p + ": " + e.reason
	}
	return e.reason
}

func ferr(reason string) *fieldError { return &fieldError{reason: reason} }

// checkObject checks the members of o against fs: each known member has its
// shape, appears once, and every required member is present. unknown reports
// whether o has members fs does not describe.
func checkObject(o *fastjson.Object, fs []field, msgs messageList) (unknown bool, err *fieldError) {
	var seen uint64 // fs never has more than 64 entries
	o.Visit(func(key []byte, v *fastjson.Value) {
		if err != nil {
			return
		}
		for i := range fs {
			if fs[i].name != string(key) {
				continue
			}
			if seen&(1<<uint(i)) != 0 {
				err = ferr("duplicate member").at(fs[i].name)
				return
			}
			seen |= 1 << uint(i)
			if e := checkValue(v, &fs[i], msgs); e != nil {
				err = e.at(fs[i].name)
			}
			return
		}
		unknown = true
	})
	if err != nil {
		return unknown, err
	}
	for i := range fs {
		if fs[i].req && seen&(1<<uint(i)) == 0 {
			return unknown, ferr("required member missing").at(fs[i].name)
		}
	}
	return unknown, nil
}

func typeName(t fastjson.Type) string {
	switch t {
	case fastjson.TypeNull:
		return "null"
	case fastjson.TypeObject:
		return "object"
	case fastjson.TypeArray:
		return "array"
	case fastjson.TypeString:
		return "string"
	case fastjson.TypeNumber:
		return "number"
	default:
		return "boolean"
	}
}

func expected(what string, v *fastjson.Value) *fieldError {
	return ferr("expected " + what + ", got " + typeName(v.Type()))
}

const maxSafeInt = 1<<53 - 1

// checkValue checks one value against its field description. msgs are the
// messages of a history a hollow copy left out, read in their place
// (hollow.go).
func checkValue(v *fastjson.Value, fd *field, msgs messageList) *fieldError {
	t := v.Type()
	if t == fastjson.TypeNull {
		if fd.nullOK || fd.kind == kAny {
			return nil
		}
		return ferr("null is not allowed here (omit the member instead)")
	}
	switch fd.kind {
	case kString:
		if t != fastjson.TypeString {
			return expected("string", v)
		}
	case kEnum:
		if t != fastjson.TypeString {
			return expected("string", v)
		}
		s := v.GetStringBytes()
		for _, e := range fd.enum {
			if e == string(s) {
				return nil
			}
		}
		return ferr("value " + strconv.Quote(string(s)) + " is not one of " + strings.Join(fd.enum, ", "))
	case kAny, kAnyNonNil:
	case kObject:
		if t != fastjson.TypeObject {
			return expected("object", v)
		}
	case kInt, kUint:
		if t != fastjson.TypeNumber {
			return expected("integer", v)
		}
		x, _ := v.Float64()
		min := float64(-maxSafeInt)
		if fd.kind == kUint {
			min = 0
		}
		if x != math.Trunc(x) || x < min || x > maxSafeInt {
			return ferr("expected an integer in range, got " + v.String())
		}
	case kBool:
		if t != fastjson.TypeTrue && t != fastjson.TypeFalse {
			return expected("boolean", v)
		}
	case kStrings:
		return checkArray(v, func(e *fastjson.Value) *fieldError {
			if e.Type() != fastjson.TypeString {
				return expected("string", e)
			}
			return nil
		})
	case kPatch:
		return checkArray(v, checkPatchOp)
	case kUsage:
		return checkArray(v, objectOf(usageFields))
	case kRunOutcome:
		return checkRunOutcome(v)
	case kSubOutcome:
		return checkUnion(v, subOutcomeArms)
	case kContent:
		return checkContent(v, mediaPartFields)
	case kMsgContent:
		return checkContent(v, mediaPartFieldsCompat)
	case kMessages:
		if msgs.text != nil {
			return msgs.check()
		}
		return checkArray(v, checkMessage)
	case kInput:
		if t != fastjson.TypeObject {
			return expected("object", v)
		}
		o, _ := v.Object()
		_, err := checkObject(o, inputFields, msgs)
		return err
	case kTools:
		return checkArray(v, objectOf(toolFields))
	case kContexts:
		return checkArray(v, objectOf(contextFields))
	case kResume:
		return checkArray(v, objectOf(resumeFields))
	case kToolCalls:
		return checkArray(v, objectOf(toolCallFields))
	case kFunction:
		return objectOf(functionFields)(v)
	case kInterrupts:
		if t == fastjson.TypeArray && len(v.GetArray()) == 0 {
			return ferr("expected at least one interrupt")
		}
		return checkArray(v, objectOf(interruptFields))
	case kSource:
		return checkUnion(v, sourceArms)
	}
	return nil
}

func checkArray(v *fastjson.Value, each func(*fastjson.Value) *fieldError) *fieldError {
	if v.Type() != fastjson.TypeArray {
		return expected("array", v)
	}
	for i, e := range v.GetArray() {
		if err := each(e); err != nil {
			return err.atIndex(i)
		}
	}
	return nil
}

func objectOf(fs []field) func(*fastjson.Value) *fieldError {
	return func(v *fastjson.Value) *fieldError {
		if v.Type() != fastjson.TypeObject {
			return expected("object", v)
		}
		o, _ := v.Object()
		_, err := checkObject(o, fs, messageList{})
		return err
	}
}

// checkUnion checks a union discriminated by "type". As in the 1.0 client's
// enforceEvents, a member whose type is unknown or missing is unrecognised material,
// not an error; a value that is not an object is.
func checkUnion(v *fastjson.Value, arms map[string][]field) *fieldError {
	if v.Type() != fastjson.TypeObject {
		return expected("object", v)
	}
	if err := uniqueType(v); err != nil {
		return err
	}
	fs, ok := arms[string(v.GetStringBytes("type"))]
	if !ok || v.Get("type").Type() != fastjson.TypeString {
		return nil
	}
	return objectOf(fs)(v)
}

func checkRunOutcome(v *fastjson.Value) *fieldError {
	if v.Type() != fastjson.TypeObject {
		return expected("object", v)
	}
	return checkUnion(v, runOutcomeArms)
}

// checkPatchOp checks one JSON Patch operation. Operations are spec-open:
// extra members are preserved; an unknown op is unrecognised, not malformed.
func checkPatchOp(v *fastjson.Value) *fieldError {
	if v.Type() != fastjson.TypeObject {
		return expected("object", v)
	}
	op := v.Get("op")
	if op == nil || op.Type() != fastjson.TypeString {
		return nil
	}
	fs, ok := patchOpFields[string(op.GetStringBytes())]
	if !ok {
		return nil
	}
	if err := objectOf(fs)(v); err != nil {
		return err
	}
	for _, k := range [...]string{"path", "from"} {
		if p := v.GetStringBytes(k); p != nil && !isJSONPointer(p) {
			return ferr("not a JSON Pointer").at(k)
		}
	}
	return nil
}

// isJSONPointer matches ^(/([^/~]|~[01])*)*$.
func isJSONPointer(p []byte) bool {
	if len(p) > 0 && p[0] != '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '~' {
			if i+1 >= len(p) || (p[i+1] != '0' && p[i+1] != '1') {
				return false
			}
			i++
		}
	}
	return true
}

// checkContent checks a tool result's or message's content: a string or an
// array of content parts, each an object with a string type
// (https://docs.ag-ui.com, Tool Calls, Result content).
func checkContent(v *fastjson.Value, media []field) *fieldError {
	if v.Type() == fastjson.TypeString {
		return nil
	}
	if v.Type() != fastjson.TypeArray {
		return expected("string or array of content parts", v)
	}
	return checkArray(v, func(p *fastjson.Value) *fieldError {
		if p.Type() != fastjson.TypeObject {
			return expected("object", p)
		}
		if err := uniqueType(p); err != nil {
			return err
		}
		pt := p.Get("type")
		if pt == nil || pt.Type() != fastjson.TypeString {
			return ferr("content part has no string type").at("type")
		}
		switch string(pt.GetStringBytes()) {
		case "text":
			return objectOf(textPartFields)(p)
		case "image", "audio", "video", "document":
			return objectOf(media)(p)
		}
		return nil
	})
}

// checkMessage checks one message of a history (RunAgentInput.messages, the
// RUN_STARTED echo, MESSAGES_SNAPSHOT): an object with a string id and role,
// and the fields of its role (the 1.0 schema's Message). An unknown role is unrecognised
// material for the 1.0 client; its members are not checked.
func checkMessage(v *fastjson.Value) *fieldError {
	if v.Type() != fastjson.TypeObject {
		return expected("object", v)
	}
	role := v.Get("role")
	if role == nil {
		return ferr("required member missing").at("role")
	}
	if role.Type() != fastjson.TypeString {
		return expected("string", role).at("role")
	}
	fs, ok := messageShape[string(role.GetStringBytes())]
	if !ok {
		fs = msgCommon
	}
	o, _ := v.Object()
	_, err := checkObject(o, fs, messageList{})
	return err
}

// uniqueType rejects an object whose "type" discriminator is given more than
// once: fastjson reads the first, the official client's JSON.parse the last,
// so the object would be checked as one arm and read as another, even where
// the first names a type the Stream does not check.
func uniqueType(v *fastjson.Value) *fieldError {
	o, _ := v.Object()
	if countKey(o, "type") > 1 {
		return ferr("duplicate member").at("type")
	}
	return nil
}

// countKey counts the members of o named key.
func countKey(o *fastjson.Object, key string) int {
	n := 0
	o.Visit(func(k []byte, _ *fastjson.Value) {
		if string(k) == key {
			n++
		}
	})
	return n
}

// Package aguicheck is a test-support checker of AG-UI 1.0 event sequences:
// what a consumer's stream must satisfy for the official client's chunk
// expansion and verifier to accept it. It is written independently of package
// agui (a second opinion for fuzz and end-to-end tests), decodes with
// encoding/json, and favours clarity over speed.
//
// It checks: the first event; what may follow RUN_FINISHED and RUN_ERROR; no
// nested RUN_STARTED; open/close discipline of text messages, tool calls,
// reasoning messages and spans and (per owner) steps; that RUN_FINISHED finds
// nothing open; and the first-chunk rules of chunk expansion. Event types the
// 1.0 client does not know are ignored, as the client drops them.
package aguicheck

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// known is the 1.0 event types; read-only.
var known = func() map[string]bool {
	m := map[string]bool{}
	for _, t := range strings.Fields(`RUN_STARTED RUN_FINISHED RUN_ERROR STEP_STARTED STEP_FINISHED
		TEXT_MESSAGE_START TEXT_MESSAGE_CONTENT TEXT_MESSAGE_END TEXT_MESSAGE_CHUNK
		TOOL_CALL_START TOOL_CALL_ARGS TOOL_CALL_END TOOL_CALL_CHUNK TOOL_CALL_RESULT
		STATE_SNAPSHOT STATE_DELTA MESSAGES_SNAPSHOT ACTIVITY_SNAPSHOT ACTIVITY_DELTA
		REASONING_START REASONING_MESSAGE_START REASONING_MESSAGE_CONTENT REASONING_MESSAGE_END
		REASONING_MESSAGE_CHUNK REASONING_END REASONING_ENCRYPTED_VALUE RAW CUSTOM
		SUBAGENT_STARTED SUBAGENT_FINISHED SUBAGENT_ERROR`) {
		m[t] = true
	}
	for t := range thinking {
		m[t] = true
	}
	return m
}()

// thinking maps the deprecated THINKING_* events, which the 1.0 client's
// compatibility layer still converts before chunk expansion, to the
// reasoning events they become; read-only.
var thinking = map[string]string{
	"THINKING_START":                "REASONING_START",
	"THINKING_END":                  "REASONING_END",
	"THINKING_TEXT_MESSAGE_START":   "REASONING_MESSAGE_START",
	"THINKING_TEXT_MESSAGE_CONTENT": "REASONING_MESSAGE_CONTENT",
	"THINKING_TEXT_MESSAGE_END":     "REASONING_MESSAGE_END",
}

type pend struct {
	kind string // "text", "tool", "reasoning"
	id   string
}

type checker struct {
	started, finished, errored, seen bool

	text, tool, rmsg, rspan map[string]bool
	steps                   map[string]bool // owner + "\x00" + name
	lanes                   map[string]*pend
	laneOrder               []string

	// The converted THINKING_* events carry no ids: the client mints one
	// at each start and forgets it at the end (not per run).
	minted              int
	thinkSpan, thinkMsg string
}

func (c *checker) resetRun() {
	c.text, c.tool, c.rmsg, c.rspan = map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	c.steps = map[string]bool{}
	c.lanes = map[string]*pend{}
	c.laneOrder = nil
	c.finished, c.errored = false, false
}

// Check reports the first rule the sequence of events (each the JSON text of
// one event) breaks, or nil.
func Check(events [][]byte) error {
	c := &checker{}
	c.resetRun()
	for i, raw := range events {
		var ev map[string]any
		if err := json.Unmarshal(raw, &ev); err != nil {
			return fmt.Errorf("event %d: not a JSON object: %w", i, err)
		}
		typ, ok := ev["type"].(string)
		if !ok {
			return fmt.Errorf("event %d: no string type", i)
		}
		if !known[typ] {
			continue
		}
		if err := c.event(typ, ev); err != nil {
			return fmt.Errorf("event %d (%s): %w", i, typ, err)
		}
	}
	return nil
}

func str(ev map[string]any, k string) (string, bool) {
	s, ok := ev[k].(string)
	return s, ok
}

func laneOf(ev map[string]any) string {
	if s, ok := str(ev, "subagentRunId"); ok {
		return "s:" + s
	}
	return "p"
}

// run-level rules, applied to every event the consumer's verifier sees,
// synthesised ones included.
func (c *checker) verifyRun(typ string) error {
	if c.errored && typ != "RUN_STARTED" {
		return fmt.Errorf("%s after RUN_ERROR", typ)
	}
	if c.finished && typ != "RUN_STARTED" && typ != "RUN_ERROR" {
		return fmt.Errorf("%s after RUN_FINISHED", typ)
	}
	if !c.seen {
		c.seen = true
		if typ != "RUN_STARTED" && typ != "RUN_ERROR" {
			return fmt.Errorf("first event must be RUN_STARTED or RUN_ERROR")
		}
	}
	return nil
}

func (c *checker) open(set map[string]bool, what, id string) error {
	if set[id] {
		return fmt.Errorf("%s %q opened while open", what, id)
	}
	set[id] = true
	return nil
}

func (c *checker) cont(set map[string]bool, what, id string, close bool) error {
	if !set[id] {
		return fmt.Errorf("%s %q continued or closed while not open", what, id)
	}
	if close {
		delete(set, id)
	}
	return nil
}

func (c *checker) closeLane(l string) error {
	p := c.lanes[l]
	if p == nil {
		return nil
	}
	delete(c.lanes, l)
	for i, k := range c.laneOrder {
		if k == l {
			c.laneOrder = append(c.laneOrder[:i], c.laneOrder[i+1:]...)
			break
		}
	}
	switch p.kind {
	case "text":
		return c.cont(c.text, "text message", p.id, true)
	case "tool":
		return c.cont(c.tool, "tool call", p.id, true)
	default:
		return c.cont(c.rmsg, "reasoning message", p.id, true)
	}
}

func (c *checker) closeAll() error {
	for len(c.laneOrder) > 0 {
		if err := c.closeLane(c.laneOrder[0]); err != nil {
			return err
		}
	}
	return nil
}

func (c *checker) event(typ string, ev map[string]any) error {
	switch typ {
	case "TEXT_MESSAGE_CHUNK":
		return c.chunk("text", "messageId", typ, ev)
	case "TOOL_CALL_CHUNK":
		return c.chunk("tool", "toolCallId", typ, ev)
	case "REASONING_MESSAGE_CHUNK":
		return c.chunk("reasoning", "messageId", typ, ev)
	case "RUN_STARTED", "RUN_FINISHED", "RUN_ERROR", "MESSAGES_SNAPSHOT":
		if err := c.closeAll(); err != nil {
			return err
		}
	case "THINKING_START", "THINKING_END", "THINKING_TEXT_MESSAGE_START", "THINKING_TEXT_MESSAGE_CONTENT", "THINKING_TEXT_MESSAGE_END":
		if err := c.closeLane(laneOf(ev)); err != nil {
			return err
		}
		return c.verify(thinking[typ], map[string]any{"messageId": c.thinkingID(typ)})
	case "RAW", "ACTIVITY_SNAPSHOT", "ACTIVITY_DELTA", "REASONING_ENCRYPTED_VALUE", "SUBAGENT_STARTED":
	case "SUBAGENT_FINISHED", "SUBAGENT_ERROR":
		if s, ok := str(ev, "subagentRunId"); ok {
			if err := c.closeLane("s:" + s); err != nil {
				return err
			}
		}
	default:
		if err := c.closeLane(laneOf(ev)); err != nil {
			return err
		}
	}
	return c.verify(typ, ev)
}

// thinkingID is the id the client gives a converted THINKING_* event: a new
// one at a start; the current one, then none, at an end.
func (c *checker) thinkingID(typ string) string {
	cur := &c.thinkMsg
	if typ == "THINKING_START" || typ == "THINKING_END" {
		cur = &c.thinkSpan
	}
	switch typ {
	case "THINKING_START", "THINKING_TEXT_MESSAGE_START":
		c.minted++
		*cur = fmt.Sprintf("(thinking %d)", c.minted)
	case "THINKING_END", "THINKING_TEXT_MESSAGE_END":
		id := *cur
		*cur = ""
		if id == "" {
			c.minted++
			id = fmt.Sprintf("(thinking %d)", c.minted)
		}
		return id
	}
	if *cur == "" {
		c.minted++
		*cur = fmt.Sprintf("(thinking %d)", c.minted)
	}
	return *cur
}

func (c *checker) verify(typ string, ev map[string]any) error {
	if err := c.verifyRun(typ); err != nil {
		return err
	}
	mid, _ := str(ev, "messageId")
	tid, _ := str(ev, "toolCallId")
	switch typ {
	case "RUN_STARTED":
		if c.started && !c.finished && !c.errored {
			return fmt.Errorf("RUN_STARTED inside an active run")
		}
		c.resetRun()
		c.started = true
	case "RUN_ERROR":
		c.errored = true
	case "RUN_FINISHED":
		var open []string
		for _, set := range []map[string]bool{c.text, c.tool, c.rmsg, c.rspan, c.steps} {
			for id := range set {
				open = append(open, id)
			}
		}
		if len(open) > 0 {
			sort.Strings(open)
			return fmt.Errorf("RUN_FINISHED with open items %q", open)
		}
		c.finished = true
	case "TEXT_MESSAGE_START":
		return c.open(c.text, "text message", mid)
	case "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END":
		return c.cont(c.text, "text message", mid, typ == "TEXT_MESSAGE_END")
	case "TOOL_CALL_START":
		return c.open(c.tool, "tool call", tid)
	case "TOOL_CALL_ARGS", "TOOL_CALL_END":
		return c.cont(c.tool, "tool call", tid, typ == "TOOL_CALL_END")
	case "REASONING_START":
		return c.open(c.rspan, "reasoning span", mid)
	case "REASONING_END":
		return c.cont(c.rspan, "reasoning span", mid, true)
	case "REASONING_MESSAGE_START":
		return c.open(c.rmsg, "reasoning message", mid)
	case "REASONING_MESSAGE_CONTENT", "REASONING_MESSAGE_END":
		return c.cont(c.rmsg, "reasoning message", mid, typ == "REASONING_MESSAGE_END")
	case "STEP_STARTED", "STEP_FINISHED":
		name, _ := str(ev, "stepName")
		key := laneOf(ev) + "\x00" + name
		if typ == "STEP_STARTED" {
			return c.open(c.steps, "step", key)
		}
		return c.cont(c.steps, "step", key, true)
	}
	return nil
}

// chunk expands one chunk: the lane is the chunk's owner; an id-less,
// untagged continuation goes to the parent's stream of its kind, else to the
// only open stream of its kind.
func (c *checker) chunk(kind, idKey, typ string, ev map[string]any) error {
	id, hasID := str(ev, idKey)
	l := laneOf(ev)
	if hasID {
		for k, p := range c.lanes {
			if p.kind == kind && p.id == id {
				l = k
			}
		}
	} else if _, tagged := str(ev, "subagentRunId"); !tagged {
		if p := c.lanes["p"]; p == nil || p.kind != kind {
			var cands []string
			for k, p := range c.lanes {
				if p.kind == kind {
					cands = append(cands, k)
				}
			}
			if len(cands) > 1 {
				return fmt.Errorf("ambiguous id-less %s", typ)
			}
			if len(cands) == 1 {
				l = cands[0]
			}
		}
	}
	p := c.lanes[l]
	if p != nil && p.kind == kind && (!hasID || id == p.id) {
		if _, ok := ev["delta"]; ok || ev["rawEvent"] != nil {
			return c.synth(kind, "content", p.id)
		}
		return nil
	}
	if err := c.closeLane(l); err != nil {
		return err
	}
	if !hasID {
		return fmt.Errorf("first %s without %s", typ, idKey)
	}
	if _, ok := str(ev, "toolCallName"); kind == "tool" && !ok {
		return fmt.Errorf("first TOOL_CALL_CHUNK without toolCallName")
	}
	c.lanes[l] = &pend{kind: kind, id: id}
	c.laneOrder = append(c.laneOrder, l)
	if err := c.synth(kind, "start", id); err != nil {
		return err
	}
	if _, ok := ev["delta"]; ok || ev["rawEvent"] != nil {
		return c.synth(kind, "content", id)
	}
	return nil
}

func (c *checker) synth(kind, what, id string) error {
	types := map[string][2]string{
		"text":      {"TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"},
		"tool":      {"TOOL_CALL_START", "TOOL_CALL_ARGS"},
		"reasoning": {"REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT"},
	}[kind]
	ev := map[string]any{"messageId": id, "toolCallId": id}
	if what == "start" {
		return c.verify(types[0], ev)
	}
	return c.verify(types[1], ev)
}

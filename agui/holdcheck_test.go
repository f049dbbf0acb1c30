package agui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"testing"

	"github.com/aguard/aguard/internal/aguicheck"
)

// holdDecider answers every phase at random, as its seed says: at
// tool_call_start stream, hold, hide or an action it does not know; at the
// end allow, deny or require approval; at run end allow or deny. It records
// what it answered, and when, for checkHeld.
type holdDecider struct {
	seed []byte
	step int // the index of the event being fed
	run  int // RUN_STARTED events fed so far
	log  map[holdKey]*holdRecord
}

type holdKey struct {
	run int
	id  string
}

type holdRecord struct {
	vis       string // the tool_call_start answer, as the Stream applies it
	allowedAt int    // the step it was first allowed at; -1 if never
	// denied: withdrawn after it was allowed (denied past --max-held, or
	// declined at run end while it waited for its result)
	denied   bool
	frontend bool
}

// shown reports whether the consumer sees the call for certain by now:
// streamed, or a frontend call held and allowed (released at once; an
// agent-side call allowed waits for its result, and is withdrawn if the run
// ends first).
func (r *holdRecord) shown() bool {
	return r == nil || r.vis == ActionStream || (r.vis == ActionHold && r.frontend && r.allowedAt >= 0 && !r.denied)
}

func (d *holdDecider) pick(c *Call, n uint32) uint32 {
	h := fnv.New32a()
	h.Write(d.seed)
	h.Write([]byte{byte(d.run)}) // a call of the same id in another run: another answer
	h.Write([]byte(c.ID))
	h.Write([]byte(c.Phase))
	return h.Sum32() % n
}

func (d *holdDecider) Decide(_ context.Context, c *Call) Verdict {
	k := holdKey{d.run, c.ID}
	if c.Phase == PhaseToolCallStart {
		action := []string{ActionStream, ActionHold, ActionHide, "bogus"}[d.pick(c, 4)]
		vis := action
		switch {
		case action == "bogus", action == ActionHide && c.Frontend:
			vis = ActionHold
		}
		d.log[k] = &holdRecord{vis: vis, allowedAt: -1, frontend: c.Frontend}
		return Verdict{Action: action, DecisionID: "s"}
	}
	var action string
	if c.Phase == PhaseRunFinished {
		action = []string{ActionAllow, ActionDeny}[d.pick(c, 2)]
	} else {
		action = []string{ActionAllow, ActionDeny, ActionRequireApproval}[d.pick(c, 3)]
	}
	allowed := action == ActionAllow || (action == ActionRequireApproval && c.Frontend && c.Phase == PhaseToolCallEnd)
	if r := d.log[k]; r != nil && allowed && r.allowedAt < 0 {
		r.allowedAt = d.step
	} else if r != nil && !allowed && c.Phase == PhaseRunFinished {
		r.denied = true // a held call allowed at its end, then declined: withdrawn
	}
	return Verdict{Action: action, Reason: "r", DecisionID: "d", RequiresApprovalAt: "2026-01-01T00:00:00Z"}
}

// record returns what the decider answered for call id as of run run: the
// latest run that screened it.
func (d *holdDecider) record(run int, id string) *holdRecord {
	for r := run; r >= 0; r-- {
		if rec := d.log[holdKey{r, id}]; rec != nil {
			return rec
		}
	}
	return nil
}

// checkHeld feeds events through an enforcing Stream whose Decider holds
// and hides calls at random, as seed says (and whose hold bound is small,
// so that it is reached), and checks, beyond checkRun's invariants, what the consumer
// must not see: no event of a held call before the step it was allowed at,
// none of a denied or hidden call ever — in the stream or in replayed
// messages — and no denial naming a hidden call.
func checkHeld(t *testing.T, in *RunInput, events [][]byte, seed []byte) {
	d := &holdDecider{seed: seed, log: map[holdKey]*holdRecord{}}
	maxHeld := 0
	if len(seed) > 0 {
		maxHeld = 200 + 40*int(seed[0]) // 200 B … 10 KiB: the bound is reached
	}
	s := NewStream(in, Options{Decider: d, MaxHeld: maxHeld})
	var b Batch
	var outs [][]byte
	// expect holds, for each replayed-messages event fed (a snapshot, an
	// input echo), the calls its assistant messages carry: those the
	// consumer may see must still be there when it goes out.
	var expect [][]string
	// answeredEarly holds, in the same order, the calls a replayed tool
	// message answers before anything started them in the run: like an
	// encrypted value fed early (below), nothing said yet that they would
	// be held, and the message may go out while they are.
	var answeredEarly [][]string
	run := 0                     // output RUN_STARTED events seen
	lanes := map[string]string{} // owner -> tool call id of its open chunk lane
	var echoed map[string]bool   // calls the current run's input echo carries
	// early counts, per run and call, the REASONING_ENCRYPTED_VALUE events
	// about a call fed before the call started: nothing yet said it would
	// be held, so they may go out (events keep their order, so they are the
	// first ones out about that call).
	early := map[holdKey]int{}
	started := map[holdKey]bool{}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nin:\n%s\nout:\n%s", append(args, bytes.Join(events, []byte("\n")), bytes.Join(outs, []byte("\n")))...)
	}
	keep := func(step int, ids []string, where string) {
		if len(expect) == 0 {
			fail("step %d: %s that was never fed", step, where)
		}
		want := expect[0]
		expect = expect[1:]
		for _, id := range want {
			if _, history := in.calls[id]; history {
				continue // by id alone, the history's call and this run's are one
			}
			if rec := d.record(run, id); (rec.shown() || echoed[id]) && !slices.Contains(ids, id) {
				fail("step %d: %s lost the call %q, which the consumer may see", step, where, id)
			}
		}
	}
	see := func(step int, id, where string) {
		rec := d.record(run, id)
		if rec == nil {
			return
		}
		if _, history := in.calls[id]; history && (where == tMessagesSnapshot || where == tRunStarted || d.log[holdKey{run, id}] == nil) {
			// Agents number calls per run: the application's own history
			// may carry a call of that id, which replayed messages keep;
			// and in a run that started no call of that id, an event
			// about it (the application's answer, replayed) is about the
			// history's call, not one an earlier run held.
			return
		}
		switch rec.vis {
		case ActionHide:
			fail("step %d: hidden call %q reached the consumer (%s)", step, id, where)
		case ActionHold:
			if echoed[id] {
				return // the input echo cannot wait: such a call streams
			}
			if rec.allowedAt < 0 || rec.allowedAt > step {
				fail("step %d: held call %q reached the consumer (%s) before it was allowed (at %d)", step, id, where, rec.allowedAt)
			}
		}
	}
	collect := func(step int) {
		for _, e := range b.Out {
			outs = append(outs, bytes.Clone(e.JSON))
			var ev struct {
				Type          string
				ToolCallID    *string
				EntityID      string
				Subtype       string
				SubagentRunID *string
				Name          string
				Value         struct{ ToolCallID string }
				Messages      replayedList
				Input         *struct{ Messages replayedList }
			}
			if err := json.Unmarshal(e.JSON, &ev); err != nil {
				fail("output %q: %v", e.JSON, err)
			}
			owner := "p"
			if ev.SubagentRunID != nil {
				owner = "s:" + *ev.SubagentRunID
			}
			switch ev.Type {
			case tRunStarted:
				run++
				clear(lanes)
				echoed = map[string]bool{}
				if ev.Input != nil {
					for _, m := range ev.Input.Messages {
						for _, tc := range m.ToolCalls {
							echoed[tc.ID] = true
						}
					}
					if len(answeredEarly) > 0 {
						answeredEarly = answeredEarly[1:]
					}
					for _, id := range ev.Input.Messages.ids() {
						see(step, id, "RUN_STARTED")
					}
					keep(step, ev.Input.Messages.calls(), "RUN_STARTED")
				}
			case tMessagesSnapshot:
				clear(lanes)
				var early []string
				if len(answeredEarly) > 0 {
					early, answeredEarly = answeredEarly[0], answeredEarly[1:]
				}
				for _, id := range ev.Messages.ids() {
					if !slices.Contains(early, id) {
						see(step, id, "MESSAGES_SNAPSHOT")
					}
				}
				keep(step, ev.Messages.calls(), "MESSAGES_SNAPSHOT")
			case tToolChunk:
				id := ""
				if ev.ToolCallID != nil {
					id = *ev.ToolCallID
					lanes[owner] = id
				} else if l, ok := lanes[owner]; ok {
					id = l
				} else if ev.SubagentRunID == nil && len(lanes) == 1 {
					for _, l := range lanes {
						id = l
					}
				}
				see(step, id, ev.Type)
			case tToolStart, tToolArgs, tToolEnd, tToolResult:
				delete(lanes, owner)
				if ev.ToolCallID != nil {
					see(step, *ev.ToolCallID, ev.Type)
				}
			case tReasoningEncrypted:
				if ev.Subtype != "tool-call" {
					break
				}
				if k := (holdKey{run, ev.EntityID}); early[k] > 0 {
					early[k]--
					break
				}
				see(step, ev.EntityID, ev.Type)
			case tCustom:
				delete(lanes, owner)
				if ev.Name == "aguard.tool_call_denied" {
					if rec := d.record(run, ev.Value.ToolCallID); rec != nil && rec.vis == ActionHide {
						fail("step %d: the denial of hidden call %q reached the consumer", step, ev.Value.ToolCallID)
					}
				}
			case tRunFinished, tRunError:
				clear(lanes)
			}
		}
	}
	for i, e := range events {
		d.step = i
		if bytes.Contains(e, []byte(`"RUN_STARTED"`)) {
			d.run++
		}
		var in struct {
			Type       string
			ToolCallID *string
			Subtype    string
			EntityID   string
			Messages   replayedList
			Input      *struct{ Messages replayedList }
		}
		if json.Unmarshal(e, &in) == nil {
			switch {
			case (in.Type == tToolStart || in.Type == tToolChunk) && in.ToolCallID != nil:
				started[holdKey{d.run, *in.ToolCallID}] = true
			case in.Type == tReasoningEncrypted && in.Subtype == "tool-call" && !started[holdKey{d.run, in.EntityID}]:
				early[holdKey{d.run, in.EntityID}]++
			case in.Type == tMessagesSnapshot:
				expect = append(expect, in.Messages.calls())
				var early []string
				for _, m := range in.Messages {
					if m.Role == "tool" && !started[holdKey{d.run, m.ToolCallID}] && !slices.Contains(in.Messages.calls(), m.ToolCallID) {
						early = append(early, m.ToolCallID)
					}
				}
				answeredEarly = append(answeredEarly, early)
			case in.Type == tRunStarted && in.Input != nil:
				expect = append(expect, in.Input.Messages.calls())
				answeredEarly = append(answeredEarly, nil)
			}
		}
		s.Feed(context.Background(), e, &b)
		if err := holdQueueInvariants(s); err != nil {
			fail("after event %d: %v", i, err)
		}
		for _, c := range b.Calls {
			if c.Kind == CallDecided && strings.HasPrefix(c.Verdict.DecisionID, "max-held-") {
				if rec := d.log[holdKey{d.run, c.ID}]; rec != nil {
					rec.denied = true
				}
			}
		}
		collect(i)
		if b.Done {
			break
		}
	}
	d.step = len(events)
	s.End(nil, &b)
	collect(len(events))
	if err := checkConsumerView(in, outs); err != nil {
		fail("%v", err)
	}
	if err := aguicheck.Check(outs); err != nil {
		fail("output rejected: %v", err)
	}
	if s.hold.held != 0 || s.hold.q.n != 0 {
		fail("the stream ended with %d calls and %d events held", s.hold.held, s.hold.q.n)
	}
}

// replayed is a message of replayed messages, as far as checkHeld reads it.
type replayed struct {
	Role       string
	ToolCallID string
	ToolCalls  []struct{ ID string }
}

type replayedList []replayed

// calls lists the calls of the messages' assistant messages.
func (ms replayedList) calls() []string {
	var ids []string
	for _, m := range ms {
		for _, tc := range m.ToolCalls {
			ids = append(ids, tc.ID)
		}
	}
	return ids
}

// ids lists the calls the messages show: their toolCalls and the calls
// their tool messages answer.
func (ms replayedList) ids() []string {
	var ids []string
	for _, m := range ms {
		for _, tc := range m.ToolCalls {
			ids = append(ids, tc.ID)
		}
		if m.Role == "tool" {
			ids = append(ids, m.ToolCallID)
		}
	}
	return ids
}

// holdQueueInvariants checks what the hold queue's judgments rely on
// (holdqueue.go): the front holds only events of held calls, and is empty
// unless the back starts with a barrier that waits; the counts agree with
// the events; the parents held are those of the held calls.
func holdQueueInvariants(s *Stream) error {
	q := &s.hold.q
	n, bytes := 0, 0
	for c, evs := range q.front {
		if c.show != held {
			return fmt.Errorf("call %q in the front is not held", c.id)
		}
		if len(evs) == 0 {
			return fmt.Errorf("call %q in the front with no event", c.id)
		}
		for i := range evs {
			n++
			bytes += heldCost(&evs[i])
		}
	}
	if n != q.frontN {
		return fmt.Errorf("front counts %d events, holds %d", q.frontN, n)
	}
	for i := range q.back {
		n++
		bytes += heldCost(&q.back[i])
	}
	if n != q.n || bytes != q.bytes {
		return fmt.Errorf("queue counts %d events of %d bytes, holds %d of %d", q.n, q.bytes, n, bytes)
	}
	if s.hold.barrier != (len(q.back) > 0) {
		return fmt.Errorf("barrier %v with %d events in the back", s.hold.barrier, len(q.back))
	}
	if len(q.back) > 0 && q.frontN > 0 && !q.back[0].barrier {
		return fmt.Errorf("the back starts with a %s that is no barrier", q.back[0].typ)
	}
	parents := map[string]int{}
	heldN := 0
	for _, c := range s.run.calls {
		if c.show == held {
			heldN++
			if c.hasParent {
				parents[c.parent]++
			}
		}
	}
	if heldN != s.hold.held || fmt.Sprint(parents) != fmt.Sprint(s.hold.parents) && !(len(parents) == 0 && len(s.hold.parents) == 0) {
		return fmt.Errorf("held %d calls, parents %v; the calls say %d, %v", s.hold.held, s.hold.parents, heldN, parents)
	}
	return nil
}

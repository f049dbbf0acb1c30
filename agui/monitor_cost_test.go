package agui

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// checkOpenCounts fails unless the run's counts of open items, and its
// index of step openers, agree with the entities themselves: runFinished
// and stepFinished trust them instead of looking at every entity.
func checkOpenCounts(t testing.TB, r *runState) {
	t.Helper()
	var want openCounts
	for _, e := range r.msgs {
		if e.open {
			want.msgs++
		}
	}
	for _, m := range []map[string]*entity{r.reasoning} {
		for _, e := range m {
			if e.open {
				want.rmsgs++
			}
			if e.spanOpen {
				want.spans++
			}
		}
	}
	for _, m := range []map[int]*entity{r.thinkMsgs, r.thinkSpans} {
		for _, e := range m {
			if e.open {
				want.rmsgs++
			}
			if e.spanOpen {
				want.spans++
			}
		}
	}
	for _, c := range r.calls {
		if c.open {
			want.calls++
		}
	}
	if r.opened != want {
		t.Fatalf("open counts %+v, the entities say %+v", r.opened, want)
	}
	first := map[string]stepKey{}
	for k, seq := range r.steps {
		if f, ok := first[k.name]; !ok || seq < r.steps[f] {
			first[k.name] = k
		}
	}
	if len(first) != len(r.stepOpeners) {
		t.Fatalf("step openers kept for %d names, %d have open steps", len(r.stepOpeners), len(first))
	}
	for name, k := range first {
		o := r.stepOpeners[name]
		if got, ok := o.first(r.steps, name); !ok || got != k.own {
			t.Fatalf("first opener of step %q: %v %v, want %v", name, got, ok, k.own)
		}
	}
}

// TestRunFinishedNamesTenOpenItems: the violation names the first ten
// items still open, in the order they opened, and how many more there are,
// not every one of up to 100,000 (the RUN_ERROR message, and the note a
// monitor logs).
func TestRunFinishedNamesTenOpenItems(t *testing.T) {
	events := []string{runStarted}
	for i := range 25 {
		events = append(events, fmt.Sprintf(`{"type":"TEXT_MESSAGE_START","messageId":"m%02d"}`, i))
	}
	events = append(events, runFinished)
	r := feed(t, nil, Options{}, false, events...)
	wantViolation(t, r, "run_finished_with_open_messages")
	want := `RUN_FINISHED while text messages are still open: 'm00', 'm01', 'm02', 'm03', 'm04', 'm05', 'm06', 'm07', 'm08', 'm09' and 15 more`
	if !strings.Contains(r.last(), want) {
		t.Fatalf("last event %s, want its message to be %q", r.last(), want)
	}
}

// TestMonitorListsOpenItemsOnceARun: monitor mode goes on after a
// RUN_FINISHED that found items open; a second one in the same run says
// how many, without listing them again (each listing looks at every
// entity: an agent repeating RUN_FINISHED would cost aguard a look at up to
// 100,000 entities per event).
func TestMonitorListsOpenItemsOnceARun(t *testing.T) {
	s := NewStream(nil, Options{Monitor: true})
	var b Batch
	var notes []Note
	for _, e := range []string{runStarted, `{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"n"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"c2","toolCallName":"n"}`, runFinished,
		`{"type":"TOOL_CALL_END","toolCallId":"c1"}`, runFinished} {
		s.Feed(context.Background(), []byte(e), &b)
		notes = append(notes, b.Notes...)
	}
	if len(notes) != 2 {
		t.Fatalf("notes %+v, want two", notes)
	}
	for i, want := range []string{
		`RUN_FINISHED while tool calls are still open: 'c1', 'c2'`,
		`RUN_FINISHED while 1 tool calls are still open (listed at an earlier RUN_FINISHED of this run)`,
	} {
		if notes[i].Rule != "run_finished_with_open_tool_calls" || notes[i].Message != want {
			t.Fatalf("note %d: %+v, want %q", i, notes[i], want)
		}
	}
}

// TestStepOwnerMismatchNamesTheFirstOpener: a STEP_FINISHED from an owner
// that did not open the step names the earliest opener still open, however
// openers came and went before it.
func TestStepOwnerMismatchNamesTheFirstOpener(t *testing.T) {
	step := func(typ, sub string) string {
		if sub == "" {
			return `{"type":"` + typ + `","stepName":"s"}`
		}
		return `{"type":"` + typ + `","stepName":"s","subagentRunId":"` + sub + `"}`
	}
	events := []string{runStarted}
	// a..j open s; all but h and j finish; i opens and finishes again.
	for _, sub := range strings.Split("abcdefghij", "") {
		events = append(events, step("STEP_STARTED", sub))
	}
	for _, sub := range strings.Split("abcdefgi", "") {
		events = append(events, step("STEP_FINISHED", sub))
	}
	events = append(events, step("STEP_STARTED", "i"), step("STEP_FINISHED", "i"), step("STEP_FINISHED", ""))
	r := feed(t, nil, Options{}, false, events...)
	wantViolation(t, r, "step_owner_mismatch")
	if !strings.Contains(r.last(), `that step is open under 'h'`) {
		t.Fatalf("last event %s, want it to name 'h'", r.last())
	}
}

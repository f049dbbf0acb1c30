package agui

import (
	"context"
	"strings"
	"testing"
)

const (
	runStarted  = `{"type":"RUN_STARTED","threadId":"t1","runId":"r1"}`
	runFinished = `{"type":"RUN_FINISHED","threadId":"t1","runId":"r1"}`
)

// inputJSON is a RunAgentInput advertising the frontend tool "confirm".
const inputJSON = `{"threadId":"t1","runId":"r1","protocolVersion":"1.0","messages":[{"id":"u1","role":"user","content":"hi"}],` +
	`"tools":[{"name":"confirm","description":"ask the user","parameters":{"type":"object"}}]}`

func mustInput(t testing.TB, body string) *RunInput {
	t.Helper()
	in, err := ParseRunInput([]byte(body))
	if err != nil {
		t.Fatalf("ParseRunInput: %v", err)
	}
	return in
}

// result is everything a stream produced.
type result struct {
	out   []string
	notes []Note
	done  bool
	calls []CallEvent // byte slices copied
	runs  []RunEnd
}

// callKinds lists the calls reported, as "kind id" strings.
func (r result) callKinds() []string {
	var ks []string
	for _, c := range r.calls {
		ks = append(ks, string(c.Kind)+" "+c.ID)
	}
	return ks
}

func (r result) last() string {
	if len(r.out) == 0 {
		return ""
	}
	return r.out[len(r.out)-1]
}

func (r result) noteKinds() []string {
	var ks []string
	for _, n := range r.notes {
		ks = append(ks, n.Kind)
	}
	return ks
}

// feed runs events through a new Stream and, when end is true, ends it
// cleanly.
func feed(t testing.TB, in *RunInput, opts Options, end bool, events ...string) result {
	t.Helper()
	s := NewStream(in, opts)
	var r result
	var b Batch
	collect := func() {
		for _, e := range b.Out {
			r.out = append(r.out, string(e.JSON))
		}
		r.notes = append(r.notes, b.Notes...)
		for _, c := range b.Calls {
			c.Arguments = append([]byte(nil), c.Arguments...)
			c.Content = append([]byte(nil), c.Content...)
			r.calls = append(r.calls, c)
		}
		if b.Run.Kind != "" {
			run := b.Run
			run.Pending = append([]string(nil), run.Pending...)
			run.Interrupts = append([]Interrupt(nil), run.Interrupts...)
			r.runs = append(r.runs, run)
		}
		if b.Done {
			r.done = true
		}
	}
	for _, e := range events {
		s.Feed(context.Background(), []byte(e), &b)
		collect()
	}
	if end {
		s.End(nil, &b)
		collect()
	}
	return r
}

// wantViolation asserts the stream ended with aguard's RUN_ERROR for rule.
func wantViolation(t *testing.T, r result, rule string) {
	t.Helper()
	if !r.done {
		t.Fatalf("stream not done; out = %q", r.out)
	}
	last := r.last()
	if !strings.HasPrefix(last, `{"type":"RUN_ERROR","code":"AGUARD_PROTOCOL_VIOLATION","message":"`+rule+`: `) {
		t.Fatalf("last event = %s, want RUN_ERROR for rule %s", last, rule)
	}
	found := false
	for _, n := range r.notes {
		if n.Kind == "violation" && n.Rule == rule {
			found = true
		}
	}
	if !found {
		t.Fatalf("notes = %+v, want a violation note for %s", r.notes, rule)
	}
}

package agui

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestEndOnTruncation(t *testing.T) {
	tests := []struct {
		name   string
		events []string
		err    error
		want   string // substring of the RUN_ERROR, "" for no RUN_ERROR
	}{
		{"no event at all", nil, nil, "without any event"},
		{"broke before any event", nil, errors.New("connection reset"), "connection reset"},
		{"ended mid-run", []string{runStarted, `{"type":"TEXT_MESSAGE_START","messageId":"m"}`}, nil, "before the run finished"},
		{"broke mid-run", []string{runStarted}, errors.New("EOF in chunk"), "EOF in chunk"},
		{"only unknown events", []string{`{"type":"VENDOR"}`}, nil, "without any event"},
		{"finished run", []string{runStarted, runFinished}, nil, ""},
		{"errored run", []string{runStarted, `{"type":"RUN_ERROR","message":"x"}`}, errors.New("late break"), ""},
		{"second run truncated", []string{runStarted, runFinished, runStarted}, nil, "before the run finished"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStream(nil, Options{})
			var b Batch
			for _, e := range tt.events {
				s.Feed(context.Background(), []byte(e), &b)
			}
			s.End(tt.err, &b)
			if !b.Done {
				t.Fatal("End did not set Done")
			}
			if tt.want == "" {
				if len(b.Out) != 0 {
					t.Fatalf("out = %q", b.Out)
				}
				return
			}
			if len(b.Out) != 1 || !strings.HasPrefix(string(b.Out[0].JSON), `{"type":"RUN_ERROR","code":"AGUARD_UPSTREAM_LOST","message":"`) ||
				!strings.Contains(string(b.Out[0].JSON), tt.want) {
				t.Fatalf("out = %q", b.Out)
			}
		})
	}
}

func TestAbort(t *testing.T) {
	tests := []struct {
		name   string
		events []string
		emit   bool
	}{
		{"before any event", nil, true},
		{"mid-run", []string{runStarted}, true},
		{"after RUN_FINISHED", []string{runStarted, runFinished}, true},
		{"right after RUN_ERROR", []string{runStarted, `{"type":"RUN_ERROR","message":"x"}`}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStream(nil, Options{})
			var b Batch
			for _, e := range tt.events {
				s.Feed(context.Background(), []byte(e), &b)
			}
			s.Abort(CodeLimitExceeded, `event over "16MiB"`, &b)
			if !b.Done {
				t.Fatal("Abort did not set Done")
			}
			want := `{"type":"RUN_ERROR","code":"AGUARD_LIMIT_EXCEEDED","message":"event over \"16MiB\""}`
			if tt.emit && (len(b.Out) != 1 || string(b.Out[0].JSON) != want) {
				t.Fatalf("out = %q, want %s", b.Out, want)
			}
			if !tt.emit && len(b.Out) != 0 {
				t.Fatalf("out = %q, want nothing", b.Out)
			}
		})
	}
}

// TestMonitorMode: everything is noted, nothing changed, nothing ended — but
// End still reports a truncated run.
func TestMonitorMode(t *testing.T) {
	in := mustInput(t, inputJSON)
	events := []string{
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}`, // first event wrong, content not open
		runStarted,
		startConfirm,
		`{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"confirm"}`, // already open
		resultC1, // fabricated
		`{"type":"TOOL_CALL_START", "toolCallId":1}`, // malformed, not compact
		"not json",
		runFinished, // call open; pending omitted
	}
	r := feed(t, in, Options{Monitor: true}, false, events...)
	if r.done {
		t.Fatal("monitor mode ended the stream")
	}
	if len(r.out) != len(events) {
		t.Fatalf("out = %q", r.out)
	}
	for i, e := range events {
		want := e
		if i == 5 {
			want = `{"type":"TOOL_CALL_START","toolCallId":1}`
		}
		if r.out[i] != want {
			t.Fatalf("event %d changed: %s", i, r.out[i])
		}
	}
	kinds := strings.Join(r.noteKinds(), ",")
	for _, k := range []string{"violation", "fabricated_result"} {
		if !strings.Contains(kinds, k) {
			t.Fatalf("notes %s lack %s", kinds, k)
		}
	}
	s := NewStream(in, Options{Monitor: true})
	var b Batch
	s.Feed(context.Background(), []byte(runStarted), &b)
	s.End(nil, &b)
	if len(b.Out) != 1 || !strings.Contains(string(b.Out[0].JSON), CodeUpstreamLost) {
		t.Fatalf("End in monitor mode = %q", b.Out)
	}
}

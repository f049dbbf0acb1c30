package agui

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestStreamMemoryIsBounded pins the per-stream limits: an agent that opens
// calls without end, or sends runs without end, gets RUN_ERROR
// AGUARD_LIMIT_EXCEEDED instead of growing aguard's memory.
func TestStreamMemoryIsBounded(t *testing.T) {
	t.Run("tool calls per run", func(t *testing.T) {
		s := NewStream(nil, Options{})
		var b Batch
		s.Feed(context.Background(), []byte(runStarted), &b)
		for i := 0; i <= maxEntitiesPerRun && !b.Done; i++ {
			s.Feed(context.Background(), fmt.Appendf(nil, `{"type":"TOOL_CALL_START","toolCallId":"c%d","toolCallName":"x"}`, i), &b)
		}
		if !b.Done || !strings.Contains(string(b.Out[len(b.Out)-1].JSON), `"code":"AGUARD_LIMIT_EXCEEDED"`) {
			t.Fatalf("not ended by the limit: %q", b.Out)
		}
	})
	t.Run("tool calls across the runs of a response", func(t *testing.T) {
		s := NewStream(nil, Options{})
		var b Batch
		n := 0
		for run := 0; !b.Done && run < 4; run++ {
			s.Feed(context.Background(), []byte(runStarted), &b)
			for i := 0; i < 60_000 && !b.Done; i++ {
				s.Feed(context.Background(), fmt.Appendf(nil, `{"type":"TOOL_CALL_START","toolCallId":"c%d","toolCallName":"x"}`, n), &b)
				if !b.Done {
					s.Feed(context.Background(), fmt.Appendf(nil, `{"type":"TOOL_CALL_END","toolCallId":"c%d"}`, n), &b)
				}
				n++
			}
			if !b.Done {
				s.Feed(context.Background(), []byte(runFinished), &b)
			}
		}
		if !b.Done || !strings.Contains(string(b.Out[len(b.Out)-1].JSON), `"code":"AGUARD_LIMIT_EXCEEDED"`) || n > maxKnownCalls+1 {
			t.Fatalf("not ended by the limit after %d calls: %q", n, b.Out)
		}
	})
	t.Run("bytes of tool-call ids across the runs of a response", func(t *testing.T) {
		s := NewStream(nil, Options{})
		var b Batch
		id := strings.Repeat("i", 64<<10)
		n := 0
		for ; n < 200 && !b.Done; n++ {
			s.Feed(context.Background(), []byte(runStarted), &b)
			if !b.Done {
				s.Feed(context.Background(), fmt.Appendf(nil, `{"type":"TOOL_CALL_CHUNK","toolCallId":"%s%d","toolCallName":"x"}`, id, n), &b)
			}
			if !b.Done {
				s.Feed(context.Background(), []byte(runFinished), &b)
			}
		}
		if !b.Done || !strings.Contains(string(b.Out[len(b.Out)-1].JSON), `"code":"AGUARD_LIMIT_EXCEEDED"`) || n > maxKnownBytes/(64<<10)+2 {
			t.Fatalf("not ended by the limit after %d calls", n)
		}
	})
	// Whatever an event opens or answers counts, not only messages, calls
	// and steps: THINKING_* spans, active subagents, answered calls.
	for name, ev := range map[string]string{
		"thinking spans per run":      `{"type":"THINKING_START"}`,
		"active subagents per run":    `{"type":"SUBAGENT_STARTED","subagentRunId":"s%d","name":"n"}`,
		"answered tool calls per run": `{"type":"TOOL_CALL_RESULT","messageId":"m","toolCallId":"c%d","content":"x"}`,
	} {
		t.Run(name, func(t *testing.T) {
			endsByTheLimit(t, func(i int) []byte {
				if strings.Contains(ev, "%d") {
					return fmt.Appendf(nil, ev, i)
				}
				return []byte(ev)
			}, maxEntitiesPerRun+1)
		})
	}
	// A run's ids, names and owners are bounded in bytes too: 64 KiB ones
	// pass 16 MiB after 256 entities, far below the count.
	big := strings.Repeat("i", 64<<10)
	for name, ev := range map[string]string{
		"bytes of text message ids":  `{"type":"TEXT_MESSAGE_START","messageId":"%s%d"}`,
		"bytes of subagent owners":   `{"type":"STEP_STARTED","stepName":"s","subagentRunId":"%s%d"}`,
		"bytes of tool names":        `{"type":"TOOL_CALL_CHUNK","toolCallId":"c%[2]d","toolCallName":"%[1]s","delta":"{}"}`,
		"bytes of reasoning ids":     `{"type":"REASONING_START","messageId":"%s%d"}`,
		"bytes of answered call ids": `{"type":"TOOL_CALL_RESULT","messageId":"m","toolCallId":"%s%d","content":"x"}`,
		"bytes of text chunk names":  `{"type":"TEXT_MESSAGE_CHUNK","messageId":"m%[2]d","name":"%[1]s","delta":"x","subagentRunId":"s%[2]d"}`,
	} {
		t.Run(name, func(t *testing.T) {
			endsByTheLimit(t, func(i int) []byte { return fmt.Appendf(nil, ev, big, i) }, maxRunKeyBytes/len(big)+2)
		})
	}
	t.Run("runs per stream", func(t *testing.T) {
		s := NewStream(nil, Options{})
		var b Batch
		for i := 0; i <= maxRunsPerStream && !b.Done; i++ {
			s.Feed(context.Background(), []byte(runStarted), &b)
			if !b.Done {
				s.Feed(context.Background(), []byte(runFinished), &b)
			}
		}
		if !b.Done || !strings.Contains(string(b.Out[len(b.Out)-1].JSON), `"code":"AGUARD_LIMIT_EXCEEDED"`) {
			t.Fatalf("not ended by the limit: %q", b.Out)
		}
	})
}

// TestArgumentMemoryIsBounded pins the argument budgets: past 1 MiB for a
// call, or 16 MiB for the run, arguments are not kept and the Decider is told
// they were truncated.
func TestArgumentMemoryIsBounded(t *testing.T) {
	d := &byName{verdicts: map[string]string{}}
	s := NewStream(nil, Options{Decider: d})
	var b Batch
	s.Feed(context.Background(), []byte(runStarted), &b)
	chunk := strings.Repeat("x", 256<<10)
	for i := range 20 { // 20 calls of 1 MiB: the run budget runs out at the 17th
		id := fmt.Sprintf("c%d", i)
		s.Feed(context.Background(), fmt.Appendf(nil, `{"type":"TOOL_CALL_START","toolCallId":%q,"toolCallName":"t"}`, id), &b)
		for range 4 {
			s.Feed(context.Background(), fmt.Appendf(nil, `{"type":"TOOL_CALL_ARGS","toolCallId":%q,"delta":%q}`, id, chunk), &b)
		}
		s.Feed(context.Background(), fmt.Appendf(nil, `{"type":"TOOL_CALL_ARGS","toolCallId":%q,"delta":"y"}`, id), &b)
		s.Feed(context.Background(), fmt.Appendf(nil, `{"type":"TOOL_CALL_END","toolCallId":%q}`, id), &b)
	}
	if len(d.asked) != 20 {
		t.Fatalf("asked %d times", len(d.asked))
	}
	for i, c := range d.asked {
		if !c.ArgumentsTruncated {
			t.Fatalf("call %d over 1 MiB not marked truncated", i)
		}
		if len(c.Arguments) > 1<<20 {
			t.Fatalf("call %d kept %d bytes", i, len(c.Arguments))
		}
	}
	if kept := len(d.asked[19].Arguments); kept != 0 {
		t.Fatalf("the 20th call kept %d bytes after the run budget ran out", kept)
	}
}

// endsByTheLimit feeds one run the events ev(0), ev(1), … and fails unless
// the stream ends with AGUARD_LIMIT_EXCEEDED within max of them.
func endsByTheLimit(t *testing.T, ev func(i int) []byte, max int) {
	t.Helper()
	s := NewStream(nil, Options{})
	var b Batch
	s.Feed(context.Background(), []byte(runStarted), &b)
	n := 0
	for ; n < max && !b.Done; n++ {
		s.Feed(context.Background(), ev(n), &b)
	}
	if !b.Done {
		t.Fatalf("not ended after %d events", n)
	}
	if last := b.Out[len(b.Out)-1].JSON; !strings.Contains(string(last), `"code":"AGUARD_LIMIT_EXCEEDED"`) {
		t.Fatalf("ended after %d events, not by the limit: %s", n, last)
	}
}

package agui

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
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
	wantLimitNote(t, &b)
}

// wantLimitNote fails unless b notes the bound that ended the stream, for
// the operator's log and metric.
func wantLimitNote(t *testing.T, b *Batch) {
	t.Helper()
	for _, n := range b.Notes {
		if n.Kind == "limit_exceeded" && n.Message != "" {
			return
		}
	}
	t.Fatalf("no limit_exceeded note: %+v", b.Notes)
}

// TestReplayedMessagesAreReadOneAtATime: a large MESSAGES_SNAPSHOT is
// checked one message at a time, so that what it costs follows its size,
// not the number of JSON values in it (a parse tree of the whole history
// took about 50 times its size), and the bound on a parse tree applies to
// each message, not to the history.
func TestReplayedMessagesAreReadOneAtATime(t *testing.T) {
	var sb strings.Builder
	sb.WriteString(`{"type":"MESSAGES_SNAPSHOT","messages":[`)
	for i := range 40_000 { // 160,000 values in all, past maxTreeValues
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"id":"m%d","role":"user","content":"a message of the conversation, as long as many are: %d"}`, i, i)
	}
	sb.WriteString(`]}`)
	ev := []byte(sb.String())
	s := NewStream(nil, Options{})
	var b Batch
	s.Feed(context.Background(), []byte(runStarted), &b)
	allocated := bytesAllocated(func() { s.Feed(context.Background(), ev, &b) })
	if b.Done || len(b.Out) != 1 || !bytes.Equal(b.Out[0].JSON, ev) {
		t.Fatalf("the snapshot was not forwarded as it came: done %v, %d events out", b.Done, len(b.Out))
	}
	if ratio := float64(allocated) / float64(len(ev)); ratio > 2 {
		t.Fatalf("a %d-byte snapshot allocated %d bytes, %.1f times its size; want at most 2", len(ev), allocated, ratio)
	} else {
		t.Logf("a %d-byte snapshot of %d messages allocated %.2f times its size", len(ev), 40_000, ratio)
	}
}

// TestParseTreeIsBounded: an event whose parse tree would hold more than
// maxTreeValues values, a STATE_DELTA of many empty patch operations or a
// replayed message of many empty content parts, ends the stream with
// AGUARD_LIMIT_EXCEEDED before it is parsed; one just under the bound is
// handled.
func TestParseTreeIsBounded(t *testing.T) {
	delta := func(ops int) []byte {
		return []byte(`{"type":"STATE_DELTA","delta":[` + strings.Repeat(`{"op":"add","path":"/a","value":0},`, ops-1) + `{"op":"add","path":"/a","value":0}]}`)
	}
	parts := func(n int) []byte {
		return []byte(`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u","role":"user","content":"hi"},{"id":"m","role":"user","content":[` +
			strings.Repeat(`{"type":"text","text":""},`, n-1) + `{"type":"text","text":""}]}]}`)
	}
	for _, tt := range []struct {
		name   string
		event  []byte
		values int
	}{
		{"a STATE_DELTA", delta(maxTreeValues/4 + 1), 4 * (maxTreeValues/4 + 1)},
		{"a replayed message", parts(maxTreeValues/3 + 1), 3 * (maxTreeValues/3 + 1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStream(nil, Options{})
			var b Batch
			s.Feed(context.Background(), []byte(runStarted), &b)
			allocated := bytesAllocated(func() { s.Feed(context.Background(), tt.event, &b) })
			if !b.Done || !strings.Contains(string(b.Out[len(b.Out)-1].JSON), `"code":"AGUARD_LIMIT_EXCEEDED"`) {
				t.Fatalf("an event of %d values (%d bytes) was not refused: %d events out", tt.values+1, len(tt.event), len(b.Out))
			}
			if allocated > int64(len(tt.event)) {
				t.Fatalf("refusing a %d-byte event allocated %d bytes", len(tt.event), allocated)
			}
			wantLimitNote(t, &b)
		})
	}
	for _, tt := range []struct {
		name  string
		event []byte
	}{
		{"a STATE_DELTA", delta(maxTreeValues/4 - 1)},
		{"a replayed message", parts(maxTreeValues/3 - 2)},
	} {
		t.Run(tt.name+" under the bound", func(t *testing.T) {
			s := NewStream(nil, Options{})
			var b Batch
			s.Feed(context.Background(), []byte(runStarted), &b)
			allocated := bytesAllocated(func() { s.Feed(context.Background(), tt.event, &b) })
			if b.Done || len(b.Out) != 1 {
				t.Fatalf("refused: %q", b.Out)
			}
			t.Logf("%d bytes allocated for a %d-byte event at the bound", allocated, len(tt.event))
		})
	}
}

// bytesAllocated returns the bytes the heap allocated while f ran.
func bytesAllocated(f func()) int64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return int64(after.TotalAlloc - before.TotalAlloc)
}

// TestRunInputMessagesAreReadOneAtATime: a large RunAgentInput is read as a
// large event is, its history one message at a time, and one message of
// more values than a parse tree may hold is refused as an invalid input.
func TestRunInputMessagesAreReadOneAtATime(t *testing.T) {
	var sb strings.Builder
	sb.WriteString(`{"threadId":"t","runId":"r","messages":[`)
	for i := range 40_000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"id":"m%d","role":"user","content":"a message of the conversation, as long as many are: %d"}`, i, i)
	}
	sb.WriteString(`,{"id":"a","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"confirm","arguments":"{}"}}]},{"id":"tm","role":"tool","toolCallId":"c1","content":"yes"}],"tools":[{"name":"confirm"}]}`)
	body := []byte(sb.String())
	var in *RunInput
	var err error
	allocated := bytesAllocated(func() { in, err = ParseRunInput(body) })
	if err != nil {
		t.Fatal(err)
	}
	if len(in.ToolMessages) != 1 || in.ToolMessages[0].ToolCallID != "c1" || !in.calls["c1"] {
		t.Fatalf("the history's call and answer not read: %+v", in)
	}
	if ratio := float64(allocated) / float64(len(body)); ratio > 1 {
		t.Fatalf("a %d-byte input allocated %d bytes, %.1f times its size; want at most 1", len(body), allocated, ratio)
	} else {
		t.Logf("a %d-byte input of 40,002 messages allocated %.2f times its size", len(body), ratio)
	}

	parts := `{"threadId":"t","runId":"r","messages":[{"id":"m","role":"user","content":[` +
		strings.Repeat(`{"type":"text","text":""},`, maxTreeValues/3) + `{"type":"text","text":""}]}]}`
	_, err = ParseRunInput([]byte(parts))
	if ie, ok := err.(*InputError); !ok || !strings.Contains(ie.Reason, "131072") {
		t.Fatalf("a message of %d values: %v", maxTreeValues+3, err)
	}
}

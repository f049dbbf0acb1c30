package agui

import (
	"context"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkFeedTextContent: the hot path — a compact ~100-byte
// TEXT_MESSAGE_CONTENT for an open message, forwarded unchanged.
func BenchmarkFeedTextContent(b *testing.B) {
	s := NewStream(nil, Options{})
	var batch Batch
	s.Feed(context.Background(), []byte(runStarted), &batch)
	s.Feed(context.Background(), []byte(`{"type":"TEXT_MESSAGE_START","messageId":"msg-1","role":"assistant"}`), &batch)
	ev := []byte(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"msg-1","delta":"The quick brown fox jumps over the lazy dog."}`)
	b.SetBytes(int64(len(ev)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		s.Feed(context.Background(), ev, &batch)
	}
	if len(batch.Out) != 1 || len(batch.Notes) != 0 {
		b.Fatalf("batch = %+v", batch)
	}
}

// BenchmarkFeedReasoningContent: what a reasoning model streams before it
// answers — a compact REASONING_MESSAGE_CONTENT for an open reasoning
// message, forwarded unchanged.
func BenchmarkFeedReasoningContent(b *testing.B) {
	s := NewStream(nil, Options{})
	var batch Batch
	s.Feed(context.Background(), []byte(runStarted), &batch)
	s.Feed(context.Background(), []byte(`{"type":"REASONING_START","messageId":"r-1"}`), &batch)
	s.Feed(context.Background(), []byte(`{"type":"REASONING_MESSAGE_START","messageId":"r-1","role":"reasoning"}`), &batch)
	ev := []byte(`{"type":"REASONING_MESSAGE_CONTENT","messageId":"r-1","delta":"The quick brown fox jumps over the lazy dog."}`)
	b.SetBytes(int64(len(ev)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		s.Feed(context.Background(), ev, &batch)
	}
	if len(batch.Out) != 1 || len(batch.Notes) != 0 {
		b.Fatalf("batch = %+v", batch)
	}
}

// BenchmarkFeedToolCall: a START / ARGS×16 / END group with ~1 KB of
// arguments, then its RESULT.
func BenchmarkFeedToolCall(b *testing.B) {
	s := NewStream(nil, Options{})
	var batch Batch
	s.Feed(context.Background(), []byte(runStarted), &batch)
	start := []byte(`{"type":"TOOL_CALL_START","toolCallId":"call-1","toolCallName":"search","parentMessageId":"msg-1"}`)
	args := []byte(`{"type":"TOOL_CALL_ARGS","toolCallId":"call-1","delta":"` + strings.Repeat(`x`, 64) + `"}`)
	end := []byte(`{"type":"TOOL_CALL_END","toolCallId":"call-1"}`)
	res := []byte(`{"type":"TOOL_CALL_RESULT","messageId":"tm-1","toolCallId":"call-1","content":"ok"}`)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		s.Feed(context.Background(), start, &batch)
		for range 16 {
			s.Feed(context.Background(), args, &batch)
		}
		s.Feed(context.Background(), end, &batch)
		s.Feed(context.Background(), res, &batch)
		if batch.Done {
			b.Fatal("stream ended")
		}
		s.run.calls["call-1"].args = s.run.calls["call-1"].args[:0]
	}
}

// BenchmarkRunFinishedRewrite: a whole run whose RUN_FINISHED needs its
// pending list added (two frontend calls left unanswered).
func BenchmarkRunFinishedRewrite(b *testing.B) {
	in := mustInput(b, inputJSON)
	evs := [][]byte{
		[]byte(runStarted),
		[]byte(`{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"confirm"}`),
		[]byte(`{"type":"TOOL_CALL_END","toolCallId":"c1"}`),
		[]byte(`{"type":"TOOL_CALL_START","toolCallId":"c2","toolCallName":"confirm"}`),
		[]byte(`{"type":"TOOL_CALL_END","toolCallId":"c2"}`),
	}
	fin := []byte(`{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"success","pendingToolCallIds":["c2"]}}`)
	s := NewStream(in, Options{})
	var batch Batch
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i > 0 && i%(maxRunsPerStream/2) == 0 {
			// One response carries at most maxRunsPerStream runs.
			b.StopTimer()
			s = NewStream(in, Options{})
			b.StartTimer()
		}
		for _, e := range evs {
			s.Feed(context.Background(), e, &batch)
		}
		s.Feed(context.Background(), fin, &batch)
		if len(batch.Out) != 1 || len(batch.Notes) != 1 {
			b.Fatalf("batch = %+v", batch)
		}
	}
}

// BenchmarkFeedHeldToolCall: BenchmarkFeedToolCall's group for a call held
// as it starts (a Decider answering hold, then allow), released whole when
// its result arrives.
func BenchmarkFeedHeldToolCall(b *testing.B) {
	// A new id for each group (a reopened call is not put to the start
	// phase), a new run every 1000.
	const perRun = 1000
	groups := make([][][]byte, perRun)
	for i := range groups {
		id := "call-" + strconv.Itoa(i)
		g := [][]byte{[]byte(`{"type":"TOOL_CALL_START","toolCallId":"` + id + `","toolCallName":"search","parentMessageId":"msg-1"}`)}
		for range 16 {
			g = append(g, []byte(`{"type":"TOOL_CALL_ARGS","toolCallId":"`+id+`","delta":"`+strings.Repeat(`x`, 64)+`"}`))
		}
		g = append(g, []byte(`{"type":"TOOL_CALL_END","toolCallId":"`+id+`"}`),
			[]byte(`{"type":"TOOL_CALL_RESULT","messageId":"tm-`+id+`","toolCallId":"`+id+`","content":"ok"}`))
		groups[i] = g
	}
	s := NewStream(nil, Options{Decider: &phaseHold{start: ActionHold}})
	var batch Batch
	s.Feed(context.Background(), []byte(runStarted), &batch)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		for _, e := range groups[i%perRun] {
			s.Feed(context.Background(), e, &batch)
		}
		if batch.Done || len(batch.Out) != 19 {
			b.Fatalf("batch = %d events, done %v", len(batch.Out), batch.Done)
		}
		if i%perRun == perRun-1 {
			s.Feed(context.Background(), []byte(runFinished), &batch)
			s.Feed(context.Background(), []byte(runStarted), &batch)
			s.opts.Decider.(*phaseHold).phases = nil
		}
	}
}

// BenchmarkMonitorRepeatedRunFinished: in monitor mode an agent repeats
// RUN_FINISHED while 50,000 text messages are open. Each must cost what
// one event costs, not a look at every message.
func BenchmarkMonitorRepeatedRunFinished(b *testing.B) {
	s := NewStream(nil, Options{Monitor: true})
	var batch Batch
	s.Feed(context.Background(), []byte(runStarted), &batch)
	for i := range 50_000 {
		s.Feed(context.Background(), []byte(`{"type":"TEXT_MESSAGE_START","messageId":"m`+strconv.Itoa(i)+`"}`), &batch)
	}
	ev := []byte(runFinished)
	s.Feed(context.Background(), ev, &batch)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		s.Feed(context.Background(), ev, &batch)
	}
	if len(batch.Notes) != 1 || batch.Done {
		b.Fatalf("batch = %+v", batch)
	}
}

// BenchmarkMonitorStepOwnerMismatch: in monitor mode an agent repeats a
// STEP_FINISHED the parent agent never started while 50,000 subagents
// have that step open.
func BenchmarkMonitorStepOwnerMismatch(b *testing.B) {
	s := NewStream(nil, Options{Monitor: true})
	var batch Batch
	s.Feed(context.Background(), []byte(runStarted), &batch)
	for i := range 50_000 {
		s.Feed(context.Background(), []byte(`{"type":"STEP_STARTED","stepName":"s","subagentRunId":"a`+strconv.Itoa(i)+`"}`), &batch)
	}
	ev := []byte(`{"type":"STEP_FINISHED","stepName":"s"}`)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		s.Feed(context.Background(), ev, &batch)
	}
	if len(batch.Notes) != 1 || batch.Notes[0].Rule != "step_owner_mismatch" {
		b.Fatalf("batch = %+v", batch)
	}
}

// BenchmarkJudgeOneOfManyHeld: 20,000 calls are held (a policy holds the
// tool they call); judging one lets its own events go, however many other
// calls wait. Each iteration starts, ends and releases one more call.
func BenchmarkJudgeOneOfManyHeld(b *testing.B) {
	d := &byName{start: map[string]string{"confirm": ActionHold}}
	s := NewStream(mustInput(b, inputJSON), Options{Decider: d, MaxHeld: 64 << 20})
	var batch Batch
	s.Feed(context.Background(), []byte(runStarted), &batch)
	for i := range 20_000 {
		s.Feed(context.Background(), []byte(`{"type":"TOOL_CALL_START","toolCallId":"w`+strconv.Itoa(i)+`","toolCallName":"confirm"}`), &batch)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		id := strconv.Itoa(i)
		s.Feed(context.Background(), []byte(`{"type":"TOOL_CALL_START","toolCallId":"j`+id+`","toolCallName":"confirm"}`), &batch)
		s.Feed(context.Background(), []byte(`{"type":"TOOL_CALL_END","toolCallId":"j`+id+`"}`), &batch)
		if len(batch.Out) != 2 || batch.Done { // its START and END
			b.Fatalf("batch = %+v", batch)
		}
	}
}

// BenchmarkResultWhileManyHeld: a TOOL_CALL_RESULT while 20,000 events of
// a held call wait asks whether it names a held call's parent message.
func BenchmarkResultWhileManyHeld(b *testing.B) {
	d := &byName{start: map[string]string{"confirm": ActionHold}}
	s := NewStream(mustInput(b, inputJSON), Options{Decider: d, MaxHeld: 64 << 20})
	var batch Batch
	s.Feed(context.Background(), []byte(runStarted), &batch)
	s.Feed(context.Background(), []byte(`{"type":"TOOL_CALL_START","toolCallId":"w","toolCallName":"confirm","parentMessageId":"p"}`), &batch)
	for range 20_000 {
		s.Feed(context.Background(), []byte(`{"type":"TOOL_CALL_ARGS","toolCallId":"w","delta":"x"}`), &batch)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		id := strconv.Itoa(i % 50_000)
		s.Feed(context.Background(), []byte(`{"type":"TOOL_CALL_RESULT","messageId":"m`+id+`","toolCallId":"r`+id+`","content":"x"}`), &batch)
		if len(batch.Out) != 1 || batch.Done {
			b.Fatalf("batch = %+v", batch)
		}
	}
}

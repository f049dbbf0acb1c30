package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/redistest"
	"github.com/aguard/aguard/state"
)

// BenchmarkLedgerFrontendCall is the ledger's part of one frontend tool call
// across two runs, as the proxy drives it: at run 1's RUN_FINISHED the
// dispatched call and its thread are written and waited for (PutCallsSync);
// run 2's input is checked (ReadThread) and its answer recorded
// (ApplyAnswers), then the thread is cleared (PutThread). On one Redis and
// on a Redis Cluster of three masters with a replica each, where the
// global indexes take a second round trip of their own.
//
//	go test ./bench -run '^$' -bench LedgerFrontendCall -benchtime 2000x
func BenchmarkLedgerFrontendCall(b *testing.B) {
	b.Run("redis=single", func(b *testing.B) {
		benchLedger(b, state.Options{RedisURL: redistest.Start(b).URL()})
	})
	b.Run("redis=cluster", func(b *testing.B) {
		c := redistest.StartCluster(b, 3, 1)
		benchLedger(b, state.Options{RedisURL: c.URL(), RedisMode: state.ModeCluster})
	})
}

func benchLedger(b *testing.B, opt state.Options) {
	s, err := state.Open(context.Background(), opt)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	args := json.RawMessage(`{"orderId":"A-1234","note":"deliver before noon"}`)
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		thread, id := fmt.Sprintf("thread-%d", i), "call-0"
		now := time.Now()
		deadline := now.Add(24 * time.Hour)
		c := &state.ToolCall{ID: id, ThreadID: thread, RunID: "run-1", Name: "confirm_order", ArgumentsJSON: args,
			Status: state.StatusExecuting, IsClientTool: true, CreatedAt: now, ClientToolDeadlineAt: &deadline}
		if err := s.PutCallsSync(ctx, []*state.ToolCall{c}, &state.Thread{ID: thread, LastRunID: "run-1", PendingCalls: []string{id}}); err != nil {
			b.Fatal(err)
		}
		v, err := s.ReadThread(ctx, thread, []string{id})
		if err != nil {
			b.Fatal(err)
		}
		res := s.ApplyAnswers(ctx, v, []state.Change{{ID: id, Transition: state.Answer([]byte(`"confirmed"`), "", false, now)}})
		if res[0].Err != nil {
			b.Fatal(res[0].Err)
		}
		if err := s.PutThread(ctx, &state.Thread{ID: thread, LastRunID: "run-2"}); err != nil {
			b.Fatal(err)
		}
	}
}

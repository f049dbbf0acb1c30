package proxy

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/syncbuf"
	"github.com/aguard/aguard/policy"
	"github.com/aguard/aguard/state"
)

// slowPolicy allows every call, but at tool_call_end only after an
// evaluation that takes OPA many seconds; it prints as it starts it.
const slowPolicy = `package aguard

default decision := {"action": "allow", "reason": "fast"}

decision := {"action": "allow", "reason": "slow evaluation completed"} if {
	input.phase == "tool_call_end"
	print("evaluating", input.call.id)
	count([1 | some i in numbers.range(1, 4000); some j in numbers.range(1, 4000); i * j < 0]) == 0
}
`

// logLine finds the first JSON line in log whose msg is msg and whose
// attributes hold every key and value of kv (pairs).
func logLine(log, msg string, kv ...string) map[string]any {
	for line := range strings.Lines(log) {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != msg {
			continue
		}
		match := true
		for i := 0; i+1 < len(kv); i += 2 {
			match = match && m[kv[i]] == kv[i+1]
		}
		if match {
			return m
		}
	}
	return nil
}

// TestAConsumerLeavingCancelsTheDecisionItWaitsFor pins that a stream's
// policy decisions run under the stream's context: when the consumer
// disconnects while the policy evaluates one of its calls, OPA's evaluation
// is cancelled at once (not left to finish, nor to its timeout), and the
// cancelled decision denies — recorded as such in the ledger — rather than
// letting the call through.
func TestAConsumerLeavingCancelsTheDecisionItWaitsFor(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, slowPolicy)
	var log syncbuf.Buffer
	logger := slog.New(slog.NewJSONHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	engine, err := policy.New(context.Background(), policy.Options{Dir: dir, Logger: logger, Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	store := openStore(t, "")
	agentGone := make(chan struct{})
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range []string{
			`{"type":"RUN_STARTED","threadId":"thread-c","runId":"r1"}`,
			`{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"lookup"}`,
			`{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"{}"}`,
			`{"type":"TOOL_CALL_END","toolCallId":"c1"}`,
		} {
			w.Write([]byte(frame(e)))
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
		close(agentGone)
	}, func(o *Options) { o.Policy, o.State = engine, store })

	resp := h.post(t, context.Background(), "/", runInput("thread-c", "r1"))
	await.Within(t, time.Minute, "the policy to start evaluating the call", func() bool {
		return logLine(log.String(), "policy print") != nil
	})
	resp.Body.Close() // the consumer leaves mid-evaluation

	var decision map[string]any
	await.Within(t, time.Minute, "the decision", func() bool {
		decision = logLine(log.String(), "policy decision", "phase", "tool_call_end")
		return decision != nil
	})
	if decision["action"] != "deny" || decision["reason"] != "policy evaluation was cancelled" {
		t.Fatalf("decision after the consumer left: %v, want a deny because the evaluation was cancelled", decision)
	}
	if e, _ := decision["error"].(string); !strings.Contains(e, errConsumerGone.Error()) {
		t.Errorf("decision error %q does not name the consumer leaving", e)
	}
	<-agentGone
	var c *state.ToolCall
	await.For(t, "the ledger to record the call's end", func() bool {
		c, err = store.GetCall(context.Background(), state.Ref{ThreadID: "thread-c", ID: "c1"})
		return err == nil && c.Status.Terminal()
	})
	if c.Status != state.StatusFailed || c.EndReason != "denied by policy: policy evaluation was cancelled" {
		t.Fatalf("ledger record %s %q, want FAILED, denied because the evaluation was cancelled", c.Status, c.EndReason)
	}
}

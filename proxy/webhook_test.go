package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/redistest"
	"github.com/aguard/aguard/policy"
	"github.com/aguard/aguard/state"
	"github.com/aguard/aguard/webhook"
	goredis "github.com/redis/go-redis/v9"
)

// TestWebhooksFollowTheCalls runs calls through the proxy with webhooks on:
// a receiver verifies each Standard Webhooks signature and sees started,
// approval_required and completed events with the records in snake_case,
// each stamped with the time of its change (updated_at, never the zero
// time).
func TestWebhooksFollowTheCalls(t *testing.T) {
	var mu sync.Mutex
	var got []string
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify("hook-secret", r.Header, body, time.Now(), time.Minute); err != nil {
			t.Errorf("signature: %v", err)
			w.WriteHeader(400)
			return
		}
		var ev struct {
			Type     string `json:"type"`
			ToolCall struct {
				ID           string    `json:"id"`
				Status       string    `json:"status"`
				EndReason    string    `json:"end_reason"`
				IsClientTool bool      `json:"is_client_tool"`
				CreatedAt    time.Time `json:"created_at"`
				UpdatedAt    time.Time `json:"updated_at"`
			} `json:"tool_call"`
		}
		json.Unmarshal(body, &ev)
		if tc := ev.ToolCall; tc.UpdatedAt.IsZero() || tc.UpdatedAt.Before(tc.CreatedAt) || time.Since(tc.UpdatedAt) > time.Minute {
			t.Errorf("%s %s: updated_at %v, created_at %v", ev.Type, tc.ID, tc.UpdatedAt, tc.CreatedAt)
		}
		mu.Lock()
		got = append(got, ev.Type+" "+ev.ToolCall.ID+" "+strings.TrimPrefix(ev.ToolCall.Status, "TOOL_EXECUTION_STATUS_"))
		mu.Unlock()
	}))
	defer receiver.Close()
	hooks, err := webhook.New(webhook.Options{URLs: []string{receiver.URL}, Secret: "hook-secret"})
	if err != nil {
		t.Fatal(err)
	}
	defer hooks.Close(context.Background())

	dir := t.TempDir()
	writePolicy(t, dir, `package aguard
default decision := {"action": "allow"}
decision := {"action": "require_approval", "reason": "review"} if input.call.name == "confirm_order"
decision := {"action": "deny", "reason": "no"} if input.call.name == "rm_rf"
`)
	engine, err := policy.New(context.Background(), policy.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	agent := &recordingAgent{runs: map[string][]string{"run-1": {
		`{"type":"RUN_STARTED","threadId":"thread-x","runId":"run-1"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"w-ok","toolCallName":"lookup"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"w-ok"}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"m","toolCallId":"w-ok","content":"found"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"w-pay","toolCallName":"confirm_order"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"w-pay","delta":"{}"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"w-pay"}`,
		`{"type":"RUN_FINISHED","threadId":"thread-x","runId":"run-1"}`,
	}}}
	h := newHarness(t, agent.ServeHTTP, func(o *Options) {
		o.State = openStore(t, "")
		o.Notifier = hooks
		o.Policy = engine
	})
	if status, _, _ := postRun(t, h, threadInput("run-1", "", "")); status != 200 {
		t.Fatal(status)
	}
	want := []string{
		"llm.tool_call_started w-ok PENDING",
		"llm.tool_call_completed w-ok COMPLETED",
		"llm.tool_call_started w-pay PENDING",
		"llm.tool_call_approval_required w-pay REQUIRES_CONFIRMATION",
	}
	await.Within(t, 5*time.Second, "the webhooks", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= len(want) })
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("webhooks:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestAWebhookLeavesOnceItsRecordIsInRedis: with the ledger in Redis, a
// webhook reaches its receiver only once the record it names is in Redis,
// so that the receiver can read it from any replica; the record's write
// is not sent early for it: it gathers (for an hour here) until the run's
// end sends what waits, and the webhook follows.
func TestAWebhookLeavesOnceItsRecordIsInRedis(t *testing.T) {
	srv := redistest.Start(t)
	opt, err := goredis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	raw := goredis.NewClient(opt)
	defer raw.Close()
	started := make(chan bool, 1) // whether the record was in Redis when the webhook came
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"llm.tool_call_started"`) {
			select {
			case started <- raw.Exists(context.Background(), "aguard:{thread-x}:call:w-1").Val() == 1:
			default:
			}
		}
	}))
	defer receiver.Close()
	hooks, err := webhook.New(webhook.Options{URLs: []string{receiver.URL}, Secret: "hook-secret"})
	if err != nil {
		t.Fatal(err)
	}
	defer hooks.Close(context.Background())
	release := make(chan struct{})
	agent := &recordingAgent{runs: map[string][]string{"run-1": {
		`{"type":"RUN_STARTED","threadId":"thread-x","runId":"run-1"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"w-1","toolCallName":"lookup"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"w-1"}`,
		`{"type":"RUN_FINISHED","threadId":"thread-x","runId":"run-1"}`,
	}}, hold: map[string]chan struct{}{"run-1": release}}
	st := openStoreOpt(t, state.Options{RedisURL: srv.URL(), WriteDelay: time.Hour})
	// A Store that first meets Redis's primary sends at once what it
	// queued before (so that it is in that primary): let it meet the
	// primary with nothing queued, or a slow first heartbeat sends the
	// call's record on, webhook or not.
	await.For(t, "the ledger to note Redis's primary", func() bool {
		return raw.HLen(context.Background(), "aguard:primary").Val() == 1
	})
	h := newHarness(t, agent.ServeHTTP, func(o *Options) {
		o.State = st
		o.Notifier = hooks
	})
	// Released on a failure too, before the agent's server closes: its
	// handler waits for it, and the server's Close for the handler.
	releaseRun := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseRun)
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp := h.post(t, context.Background(), "/agent", threadInput("run-1", "", ""))
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}()
	await.For(t, "the ledger to record the started call", func() bool {
		_, err := st.GetCall(context.Background(), state.Ref{ThreadID: "thread-x", ID: "w-1"})
		return err == nil
	})
	if n := raw.Exists(context.Background(), "aguard:{thread-x}:call:w-1").Val(); n != 0 {
		t.Fatalf("the started call's record reached Redis while the write gathers: the webhook sent it early")
	}
	releaseRun()
	<-done
	select {
	case inRedis := <-started:
		if !inRedis {
			t.Fatal("the llm.tool_call_started webhook came before its record was in Redis")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no llm.tool_call_started webhook")
	}
}

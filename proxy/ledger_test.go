package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/redistest"
	"github.com/aguard/aguard/policy"
	"github.com/aguard/aguard/state"
)

// recordingAgent serves scripted runs by runId and records each request body.
type recordingAgent struct {
	mu    sync.Mutex
	runs  map[string][]string
	hold  map[string]chan struct{} // runs that wait before their last event
	seen  []string
	calls int
}

func (a *recordingAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	run := between(string(b), `"runId":"`, `"`)
	a.mu.Lock()
	a.seen = append(a.seen, string(b))
	a.calls++
	events, hold := a.runs[run], a.hold[run]
	a.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	for i, e := range events {
		if hold != nil && i == len(events)-1 {
			<-hold
		}
		io.WriteString(w, frame(e))
		w.(http.Flusher).Flush()
	}
}

func (a *recordingAgent) last() (string, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.seen) == 0 {
		return "", 0
	}
	return a.seen[len(a.seen)-1], a.calls
}

func openStore(t *testing.T, url string) *state.Store {
	t.Helper()
	s, err := state.Open(context.Background(), state.Options{RedisURL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// awaitRunEnd waits until Redis holds the end of run on thread: the write
// its RUN_FINISHED waits for only up to the store's RedisTimeout, after
// which the event goes out and the write lands later. A test whose next
// step reads Redis (through another replica, or itself) waits for it
// here, as a slow machine may take longer than that. reader must be a
// Store that wrote nothing of the thread, so that what it reads is Redis.
func awaitRunEnd(t *testing.T, reader *state.Store, thread, run string) {
	t.Helper()
	await.For(t, "the end of run "+run+" of "+thread+" in Redis", func() bool {
		th, err := reader.GetThread(context.Background(), thread)
		return err == nil && th.LastRunID == run
	})
}

// threadInput is a 1.0 RunAgentInput for thread-x advertising confirm_order,
// with the given extra messages and resume list.
func threadInput(run, messages, resume string) string {
	s := `{"threadId":"thread-x","runId":"` + run + `","protocolVersion":"1.0","messages":[{"id":"u1","role":"user","content":"go"}` + messages + `],` +
		`"tools":[{"name":"confirm_order","description":"Ask the user","parameters":{"type":"object","properties":{"orderId":{"type":"string"}}}}]`
	if resume != "" {
		s += `,"resume":` + resume
	}
	return s + `}`
}

func answer(call, content string) string {
	return `,{"id":"a-` + call + `","role":"assistant","toolCalls":[{"id":"` + call + `","type":"function","function":{"name":"confirm_order","arguments":"{}"}}]},` +
		`{"id":"t-` + call + `","role":"tool","toolCallId":"` + call + `","content":"` + content + `"}`
}

func textRun(run string) []string {
	return []string{`{"type":"RUN_STARTED","threadId":"thread-x","runId":"` + run + `"}`,
		`{"type":"RUN_FINISHED","threadId":"thread-x","runId":"` + run + `"}`}
}

func pendingRun(run, call string) []string {
	return []string{`{"type":"RUN_STARTED","threadId":"thread-x","runId":"` + run + `"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"` + call + `","toolCallName":"confirm_order"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"` + call + `","delta":"{\"orderId\":\"A\"}"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"` + call + `"}`,
		`{"type":"RUN_FINISHED","threadId":"thread-x","runId":"` + run + `"}`}
}

func postRun(t *testing.T, h *harness, body string) (int, []string, errorBody) {
	t.Helper()
	resp := h.post(t, context.Background(), "/agent", body)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return resp.StatusCode, nil, decodeErrorIDs(t, resp)
	}
	return 200, readAll(t, resp.Body), errorBody{}
}

type errorBodyIDs struct {
	Error struct {
		Code         string
		Message      string
		ToolCallIDs  []string `json:"toolCallIds"`
		InterruptIDs []string `json:"interruptIds"`
	}
}

func decodeErrorIDs(t *testing.T, resp *http.Response) errorBody {
	t.Helper()
	var e errorBodyIDs
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("error body: %v", err)
	}
	var out errorBody
	out.Error.Code = e.Error.Code
	out.Error.Message = strings.Join(append(e.Error.ToolCallIDs, e.Error.InterruptIDs...), ",")
	return out
}

// TestPendingCallsEnforcedAcrossReplicas pins the ledger through Redis: run 1
// through replica A leaves a frontend call pending; run 2 through replica B
// that does not answer it is refused with 409 before reaching the agent;
// once answered, it is forwarded and the call recorded as completed.
func TestPendingCallsEnforcedAcrossReplicas(t *testing.T) {
	redis := redistest.Start(t)
	agent := &recordingAgent{runs: map[string][]string{"run-1": pendingRun("run-1", "call-1"), "run-2": textRun("run-2")}}
	a := newHarness(t, agent.ServeHTTP, func(o *Options) { o.State = openStore(t, redis.URL()) })
	b := newHarness(t, agent.ServeHTTP, func(o *Options) { o.State = openStore(t, redis.URL()) })

	status, got, _ := postRun(t, a, threadInput("run-1", "", ""))
	if status != 200 || !strings.Contains(got[len(got)-1], `"pendingToolCallIds":["call-1"]`) {
		t.Fatalf("run 1: %d %q", status, got)
	}
	_, calls := agent.last()
	awaitRunEnd(t, openStore(t, redis.URL()), "thread-x", "run-1")

	status, _, e := postRun(t, b, threadInput("run-2", "", ""))
	if status != 409 || e.Error.Code != "unanswered_tool_calls" || e.Error.Message != "call-1" {
		t.Fatalf("run 2 without the answer: %d %+v", status, e)
	}
	if _, n := agent.last(); n != calls {
		t.Fatal("the refused run reached the agent")
	}

	status, got, _ = postRun(t, b, threadInput("run-2", answer("call-1", "confirmed"), ""))
	if status != 200 || len(got) != 2 {
		t.Fatalf("run 2 with the answer: %d %q", status, got)
	}
	rec, err := openStore(t, redis.URL()).GetCall(context.Background(), state.Ref{ThreadID: "thread-x", ID: "call-1"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != state.StatusCompleted || rec.ThreadID != "thread-x" || !rec.IsClientTool ||
		string(rec.ResultJSON) != `{"content":"confirmed"}` || rec.ArgumentsDigest == "" || rec.ExecutionDuration == "" ||
		string(rec.ArgumentsJSON) != `{"orderId":"A"}` || rec.ArgumentsText != "" { // an object's text is kept once, as argumentsJson
		t.Fatalf("record = %+v", rec)
	}
}

// TestApprovalStatesOnTheNextRun pins the approval states the next run meets:
// undecided → 409 awaiting_approval; rejected → the answer is rewritten to a
// decline with error set; expired → rewritten and recorded TIMED_OUT.
func TestApprovalStatesOnTheNextRun(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, `package aguard
decision := {"action": "require_approval", "reason": "review", "approvalTimeout": "1h"} if input.call.name == "confirm_order"
default decision := {"action": "allow"}
`)
	engine, err := policy.New(context.Background(), policy.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	redis := redistest.Start(t)
	store := openStore(t, redis.URL())
	agent := &recordingAgent{runs: map[string][]string{
		"run-1": pendingRun("run-1", "pay-1"), "run-2": textRun("run-2"), "run-3": textRun("run-3"),
		"run-4": pendingRun("run-4", "pay-2"), "run-5": textRun("run-5")}}
	h := newHarness(t, agent.ServeHTTP, func(o *Options) { o.State = store; o.Policy = engine })
	ctx := context.Background()

	if status, got, _ := postRun(t, h, threadInput("run-1", "", "")); status != 200 || !strings.Contains(strings.Join(got, ""), "aguard.approval_required") {
		t.Fatalf("run 1: %d %q", status, got)
	}
	rec, _ := store.GetCall(ctx, state.Ref{ThreadID: "thread-x", ID: "pay-1"})
	if rec.Status != state.StatusRequiresConfirmation || rec.RequiresApprovalAt == nil || time.Until(*rec.RequiresApprovalAt) < 50*time.Minute {
		t.Fatalf("record after run 1: %+v", rec)
	}
	if status, _, e := postRun(t, h, threadInput("run-2", answer("pay-1", "paid"), "")); status != 409 || e.Error.Code != "awaiting_approval" || e.Error.Message != "pay-1" {
		t.Fatalf("answer while undecided: %d %+v", status, e)
	}
	// A reviewer rejects it (what POST /v1/tool-calls/pay-1/reject records).
	if _, err := store.Apply(ctx, state.Ref{ThreadID: "thread-x", ID: "pay-1"}, state.Reject("alice", time.Now())); err != nil {
		t.Fatal(err)
	}
	if status, _, _ := postRun(t, h, threadInput("run-2", answer("pay-1", "paid"), "")); status != 200 {
		t.Fatalf("answer after rejection: %d", status)
	}
	sent, _ := agent.last()
	if !strings.Contains(sent, `"toolCallId":"pay-1","content":"Declined by aguard: approval rejected.","error":"approval rejected"`) {
		t.Fatalf("the agent received the rejected call's answer unrewritten: %s", sent)
	}

	// A second call whose approval deadline passes.
	if status, _, _ := postRun(t, h, threadInput("run-4", answer("pay-1", "paid"), "")); status != 200 {
		t.Fatalf("run 4: %d", status)
	}
	// Its deadline passes (the record rewritten as if held a while ago).
	rec, _ = store.GetCall(ctx, state.Ref{ThreadID: "thread-x", ID: "pay-2"})
	past := time.Now().Add(-time.Second)
	rec.RequiresApprovalAt = &past
	if err := store.PutCall(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if status, _, _ := postRun(t, h, threadInput("run-5", answer("pay-1", "paid")+answer("pay-2", "paid"), "")); status != 200 {
		t.Fatalf("answer after expiry: %d", status)
	}
	sent, _ = agent.last()
	if !strings.Contains(sent, `"toolCallId":"pay-2","content":"Declined by aguard: approval timeout.","error":"approval timeout"`) {
		t.Fatalf("expired approval not rewritten: %s", sent)
	}
	if rec, _ := store.GetCall(ctx, state.Ref{ThreadID: "thread-x", ID: "pay-2"}); rec.Status != state.StatusTimedOut || rec.EndReason != "approval timeout" {
		t.Fatalf("expired record: %+v", rec)
	}
}

// TestInterruptCoverage pins uncovered_interrupts: after an interrupted run,
// resume must cover every interrupt and may not resolve an expired one.
func TestInterruptCoverage(t *testing.T) {
	agent := &recordingAgent{runs: map[string][]string{
		"run-1": {`{"type":"RUN_STARTED","threadId":"thread-x","runId":"run-1"}`,
			`{"type":"RUN_FINISHED","threadId":"thread-x","runId":"run-1","outcome":{"type":"interrupt","interrupts":[{"id":"i-1","reason":"confirmation"},{"id":"i-2","reason":"input_required","expiresAt":"2020-01-01T00:00:00Z"}]}}`},
		"run-2": textRun("run-2")}}
	h := newHarness(t, agent.ServeHTTP, func(o *Options) { o.State = openStore(t, "") })
	if status, _, _ := postRun(t, h, threadInput("run-1", "", "")); status != 200 {
		t.Fatal(status)
	}
	tests := []struct {
		resume string
		status int
		ids    string
	}{
		{"", 409, "i-1,i-2"},
		{`[{"interruptId":"i-1","status":"resolved"}]`, 409, "i-2"},
		{`[{"interruptId":"i-1","status":"resolved"},{"interruptId":"i-2","status":"resolved"}]`, 409, "i-2"},
		{`[{"interruptId":"i-1","status":"resolved"},{"interruptId":"i-2","status":"cancelled"}]`, 200, ""},
	}
	for _, tt := range tests {
		status, _, e := postRun(t, h, threadInput("run-2", "", tt.resume))
		if status != tt.status || (status == 409 && (e.Error.Code != "uncovered_interrupts" || e.Error.Message != tt.ids)) {
			t.Errorf("resume %s: got %d %+v, want %d %s", tt.resume, status, e, tt.status, tt.ids)
		}
	}
}

// TestLateAnswerAfterClientDeadline pins clientToolDeadlineAt: an answer that
// arrives after it is rewritten to a decline and the call recorded TIMED_OUT.
func TestLateAnswerAfterClientDeadline(t *testing.T) {
	var clock atomic.Int64 // the store's clock, in unix ns
	clock.Store(time.Now().UnixNano())
	store := openStoreOpt(t, state.Options{Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	agent := &recordingAgent{runs: map[string][]string{"run-1": pendingRun("run-1", "call-9"), "run-2": textRun("run-2")}}
	h := newHarness(t, agent.ServeHTTP, func(o *Options) { o.State = store; o.ClientToolTimeout = time.Minute })
	postRun(t, h, threadInput("run-1", "", ""))
	clock.Add(int64(time.Minute + time.Second))
	if status, _, _ := postRun(t, h, threadInput("run-2", answer("call-9", "done"), "")); status != 200 {
		t.Fatal(status)
	}
	sent, _ := agent.last()
	if !strings.Contains(sent, `"content":"Declined by aguard: client tool deadline passed.","error":"client tool deadline passed"`) {
		t.Fatalf("late answer forwarded as is: %s", sent)
	}
	if rec, _ := store.GetCall(context.Background(), state.Ref{ThreadID: "thread-x", ID: "call-9"}); rec.Status != state.StatusTimedOut {
		t.Fatalf("record: %+v", rec)
	}
}

// TestRedisDownMidRunLosesNothing kills Redis while a run is streaming: the
// run still finishes for the consumer with its pending list, and once Redis
// is back the pending call is there for every replica.
func TestRedisDownMidRunLosesNothing(t *testing.T) {
	redis := redistest.Start(t)
	store := openStore(t, redis.URL())
	release := make(chan struct{})
	agent := &recordingAgent{runs: map[string][]string{"run-1": pendingRun("run-1", "call-7")},
		hold: map[string]chan struct{}{"run-1": release}}
	h := newHarness(t, agent.ServeHTTP, func(o *Options) { o.State = store })

	type result struct {
		status int
		got    []string
	}
	done := make(chan result, 1)
	go func() {
		status, got, _ := postRun(t, h, threadInput("run-1", "", ""))
		done <- result{status, got}
	}()
	await.Within(t, 5*time.Second, "the run to start", func() bool { _, n := agent.last(); return n == 1 })
	redis.Stop()
	close(release)
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not finish while Redis was down")
	}
	if r.status != 200 || !strings.Contains(r.got[len(r.got)-1], `"pendingToolCallIds":["call-7"]`) {
		t.Fatalf("stream while Redis was down: %d %q", r.status, r.got)
	}
	if ok, reason := store.Ready(); !ok || !strings.Contains(reason, "degraded") {
		t.Fatalf("Ready while Redis is down = %v %q, want degraded", ok, reason)
	}
	redis.Restart()
	other := openStore(t, redis.URL())
	await.Within(t, 15*time.Second, "the queued writes to reach Redis", func() bool {
		th, err := other.GetThread(context.Background(), "thread-x")
		return err == nil && strings.Join(th.PendingCalls, ",") == "call-7"
	})
}

// TestAnAgentSideCallNeedingApprovalIsRecordedAsTheDenialItGets: aguard
// cannot hold a call the agent executes itself, so a require_approval for
// one ends the run with AGUARD_POLICY_DENIED; the ledger records that denial
// (FAILED, endCause denied, the policy's reason), not an allow that the run
// then happened to fail.
func TestAnAgentSideCallNeedingApprovalIsRecordedAsTheDenialItGets(t *testing.T) {
	store := openStore(t, "")
	engine := approvalPolicy(t, `package aguard
default decision := {"action": "allow"}
decision := {"action": "require_approval", "reason": "shell needs a human"} if input.call.name == "shell"
`)
	agent := &recordingAgent{runs: map[string][]string{"run-1": {
		`{"type":"RUN_STARTED","threadId":"thread-x","runId":"run-1"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"s1","toolCallName":"shell"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"s1","delta":"{\"cmd\":\"ls\"}"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"s1"}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"m1","toolCallId":"s1","content":"ok"}`,
		`{"type":"RUN_FINISHED","threadId":"thread-x","runId":"run-1"}`,
	}}}
	h := newHarness(t, agent.ServeHTTP, func(o *Options) { o.State, o.Policy = store, engine })
	_, events, _ := postRun(t, h, threadInput("run-1", "", ""))
	if last := events[len(events)-1]; !strings.Contains(last, `"code":"AGUARD_POLICY_DENIED"`) {
		t.Fatalf("the run ended with %s, want AGUARD_POLICY_DENIED", last)
	}
	rec, err := store.GetCall(context.Background(), state.Ref{ThreadID: "thread-x", ID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != state.StatusFailed || rec.Cause != state.CauseDenied || !strings.Contains(rec.EndReason, "shell needs a human") || rec.DecisionID == "" {
		t.Fatalf("record: status %s, endCause %s, endReason %q, decisionId %q; want FAILED, denied, the policy's reason and its decision",
			rec.Status, rec.Cause, rec.EndReason, rec.DecisionID)
	}
}

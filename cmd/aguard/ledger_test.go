package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/redistest"
)

// hookRecord is what a webhook receiver keeps of one delivery.
type hookRecord struct {
	Type     string `json:"type"`
	ToolCall struct {
		ID        string `json:"id"`
		ThreadID  string `json:"thread_id"`
		Status    string `json:"status"`
		EndReason string `json:"end_reason"`
	} `json:"tool_call"`
}

// hookReceiver collects webhook deliveries.
func hookReceiver(t *testing.T) (*httptest.Server, chan hookRecord) {
	t.Helper()
	got := make(chan hookRecord, 64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var h hookRecord
		json.NewDecoder(r.Body).Decode(&h)
		got <- h
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// waitHook waits for a delivery that matches, for at most d.
func waitHook(t *testing.T, hooks chan hookRecord, d time.Duration, match func(hookRecord) bool) hookRecord {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case h := <-hooks:
			if match(h) {
				return h
			}
		case <-deadline:
			t.Fatalf("no matching webhook within %v", d)
		}
	}
}

// adminGet is a GET of the admin API of a, with the token "tok".
func adminGet(t *testing.T, a *started, path string) (int, string) {
	t.Helper()
	return adminDo(t, a.admin, "tok", "GET", path, "")
}

// TestServeEndsTheCallsOfARunWhoseReplicaWasKilled runs two aguard processes
// on one Redis. A run streams through the first, which is killed (-9) with
// the run's call open: the second ends the call (CANCELLED, endReason
// naming the lost run) within --drain-timeout + 30 s, and sends its
// webhook.
func TestServeEndsTheCallsOfARunWhoseReplicaWasKilled(t *testing.T) {
	bin := buildAguard(t)
	redis := redistest.Start(t)
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range []string{
			`{"type":"RUN_STARTED","threadId":"t-kill","runId":"run-k1"}`,
			`{"type":"TOOL_CALL_START","toolCallId":"call-k1","toolCallName":"confirm_order"}`,
			`{"type":"TOOL_CALL_ARGS","toolCallId":"call-k1","delta":"{}"}`,
		} {
			io.WriteString(w, "data: "+e+"\n\n")
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the run never ends on its own
	}))
	defer agent.Close()
	receiver, hooks := hookReceiver(t)
	args := []string{"--upstream", agent.URL, "--redis", redis.URL(), "--admin-token", "tok", "--drain-timeout", "1s"}
	doomed := startAguard(t, bin, args...)
	survivor := startAguard(t, bin, append(args, "--webhook", receiver.URL)...)

	input := `{"threadId":"t-kill","runId":"run-k1","protocolVersion":"1.0","messages":[],` +
		`"tools":[{"name":"confirm_order","description":"ask","parameters":{"type":"object"}}]}`
	resp, err := http.Post("http://"+doomed.listen+"/agent", "application/json", strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended before the call started: %v", err)
		}
		if strings.Contains(line, "TOOL_CALL_START") {
			break
		}
	}
	// The ledger writes behind the stream (no event waits for Redis): the
	// call reaches Redis, and the other replica, just after the consumer
	// saw it. What a replica killed before that had not written is gone
	// with it.
	await.For(t, "the open call to be seen from the survivor", func() bool {
		status, body := adminGet(t, survivor, "/v1/tool-calls/call-k1?threadId=t-kill")
		return status == 200 && strings.Contains(body, "TOOL_EXECUTION_STATUS_PENDING")
	})
	doomed.cmd.Process.Kill()
	killed := time.Now()

	h := waitHook(t, hooks, 31*time.Second, func(h hookRecord) bool {
		return h.Type == "llm.tool_call_completed" && h.ToolCall.ID == "call-k1"
	})
	if h.ToolCall.Status != "TOOL_EXECUTION_STATUS_CANCELLED" || h.ToolCall.ThreadID != "t-kill" || !strings.HasPrefix(h.ToolCall.EndReason, "run lost: run-k1") {
		t.Fatalf("webhook for the lost run's call: %+v", h)
	}
	t.Logf("the lost run's call ended %v after the kill", time.Since(killed).Round(time.Millisecond))
	status, body := adminGet(t, survivor, "/v1/tool-calls/call-k1?threadId=t-kill")
	if status != 200 || !strings.Contains(body, `"status":"TOOL_EXECUTION_STATUS_CANCELLED"`) || !strings.Contains(body, `"endReason":"run lost: run-k1`) {
		t.Fatalf("the lost run's call afterwards: %d %s", status, body)
	}
}

// TestServeTimesOutAnApprovalByItself: a call held for approval that nobody
// decides becomes TIMED_OUT within 5 s of its deadline, with its webhook,
// without any request touching it.
func TestServeTimesOutAnApprovalByItself(t *testing.T) {
	bin := buildAguard(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.rego"), []byte(`package aguard
decision := {"action": "require_approval", "reason": "review", "approvalTimeout": "1s"}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range []string{
			`{"type":"RUN_STARTED","threadId":"t-late","runId":"run-1"}`,
			`{"type":"TOOL_CALL_START","toolCallId":"pay-1","toolCallName":"confirm_order"}`,
			`{"type":"TOOL_CALL_END","toolCallId":"pay-1"}`,
			`{"type":"RUN_FINISHED","threadId":"t-late","runId":"run-1"}`,
		} {
			io.WriteString(w, "data: "+e+"\n\n")
		}
	}))
	defer agent.Close()
	receiver, hooks := hookReceiver(t)
	a := startAguard(t, bin, "--upstream", agent.URL, "--policy", dir, "--admin-token", "tok", "--webhook", receiver.URL)
	input := `{"threadId":"t-late","runId":"run-1","protocolVersion":"1.0","messages":[],` +
		`"tools":[{"name":"confirm_order","description":"ask","parameters":{"type":"object"}}]}`
	resp, err := http.Post("http://"+a.listen+"/agent", "application/json", strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "aguard.approval_required") {
		t.Fatalf("run: %s", b)
	}
	h := waitHook(t, hooks, 1*time.Second+5*time.Second+2*time.Second, func(h hookRecord) bool {
		return h.Type == "llm.tool_call_completed" && h.ToolCall.ID == "pay-1"
	})
	if h.ToolCall.Status != "TOOL_EXECUTION_STATUS_TIMED_OUT" || h.ToolCall.EndReason != "approval timeout" {
		t.Fatalf("webhook: %+v", h)
	}
	if status, body := adminGet(t, a, "/v1/tool-calls/pay-1"); status != 200 || !strings.Contains(body, `"status":"TOOL_EXECUTION_STATUS_TIMED_OUT"`) {
		t.Fatalf("record: %d %s", status, body)
	}
}

package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/redistest"
)

// scaleAgent is an agent for runs spread over replicas. A run whose input
// carries no tool message starts one frontend call, call-<runId>, to
// transfer_funds on threads named held-*, to confirm_order otherwise, and
// finishes with it left to the application; a run whose input answers a
// call just finishes. It keeps the content of every tool message it gets.
type scaleAgent struct {
	*httptest.Server
	mu      sync.Mutex
	answers map[string]string // tool call id -> content the agent got
}

func newScaleAgent(t *testing.T) *scaleAgent {
	a := &scaleAgent{answers: map[string]string{}}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			ThreadID string `json:"threadId"`
			RunID    string `json:"runId"`
			Messages []struct {
				Role       string `json:"role"`
				ToolCallID string `json:"toolCallId"`
				Content    string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		answered := false
		for _, m := range in.Messages {
			if m.Role == "tool" {
				a.mu.Lock()
				a.answers[m.ToolCallID] = m.Content
				a.mu.Unlock()
				answered = true
			}
		}
		w.Header().Set("Content-Type", "text/event-stream")
		ids := fmt.Sprintf(`"threadId":%q,"runId":%q`, in.ThreadID, in.RunID)
		events := []string{`{"type":"RUN_STARTED",` + ids + `}`}
		if !answered {
			call, tool := "call-"+in.RunID, toolOf(in.ThreadID)
			events = append(events,
				`{"type":"TOOL_CALL_START","toolCallId":"`+call+`","toolCallName":"`+tool+`"}`,
				`{"type":"TOOL_CALL_ARGS","toolCallId":"`+call+`","delta":"{\"amount\":5}"}`,
				`{"type":"TOOL_CALL_END","toolCallId":"`+call+`"}`)
		}
		events = append(events, `{"type":"RUN_FINISHED",`+ids+`}`)
		for _, e := range events {
			io.WriteString(w, "data: "+e+"\n\n")
		}
	}))
	t.Cleanup(a.Close)
	return a
}

// answer is the content of the tool message the agent got for call, if any.
func (a *scaleAgent) answer(call string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.answers[call]
}

// toolOf is the tool scaleAgent calls on thread.
func toolOf(thread string) string {
	if strings.HasPrefix(thread, "held-") {
		return "transfer_funds"
	}
	return "confirm_order"
}

// approvalPolicy holds every call to transfer_funds for a reviewer and
// allows the rest.
const approvalPolicy = `package aguard

default decision := {"action": "allow", "reason": "no rule objected"}

decision := {"action": "require_approval", "reason": "transfers need a reviewer", "approvalTimeout": "10m"} if {
	input.call.name == "transfer_funds"
	input.phase == "tool_call_end"
}
`

// runInput is a RunAgentInput for run on thread; with answer, it carries
// the assistant message of call and the application's tool message
// answering it.
func runInput(thread, run, call, answer string) string {
	msgs := `{"id":"u-` + run + `","role":"user","content":"go"}`
	if answer != "" {
		msgs += `,{"id":"a-` + run + `","role":"assistant","toolCalls":[{"id":"` + call + `","type":"function","function":{"name":"` +
			toolOf(thread) + `","arguments":"{\"amount\":5}"}}]},{"id":"t-` + run + `","role":"tool","toolCallId":"` + call + `","content":"` + answer + `"}`
	}
	return `{"threadId":"` + thread + `","runId":"` + run + `","protocolVersion":"1.0","messages":[` + msgs + `],` +
		`"tools":[{"name":"confirm_order","description":"ask","parameters":{"type":"object"}},` +
		`{"name":"transfer_funds","description":"pay","parameters":{"type":"object"}}]}`
}

// postRun posts a run to a data plane and reads the whole answer.
func postRun(t *testing.T, listen, input string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+listen+"/agent", "application/json", strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read the run's answer: %v", err)
	}
	return resp.StatusCode, string(b)
}

// adminDo sends an admin API request with token.
func adminDo(t *testing.T, admin, token, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+admin+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// recordStatus is the status of the record the admin API returns for call
// on thread ("" when it does not answer 200).
func recordStatus(t *testing.T, admin, token, thread, call string) string {
	t.Helper()
	code, body := adminDo(t, admin, token, "GET", "/v1/tool-calls/"+call+"?threadId="+thread, "")
	if code != 200 {
		return ""
	}
	var rec struct{ Status string }
	json.Unmarshal([]byte(body), &rec)
	return rec.Status
}

// runEnded reports whether Redis, read through rc, holds run as thread's
// last: the write a RUN_FINISHED waits for only up to --redis-timeout,
// after which the event goes out and the write lands later. A test whose
// next run goes through another replica waits for it, as a slow machine
// may take longer than that.
func runEnded(rc redis.Cmdable, thread, run string) bool {
	d, err := rc.HGet(context.Background(), "aguard:{"+thread+"}:thread", "d").Result()
	var th struct {
		LastRunID string `json:"lastRunId"`
	}
	return err == nil && json.Unmarshal([]byte(d), &th) == nil && th.LastRunID == run
}

// reviewerTokens writes an --admin-tokens file naming alice a reviewer with
// token, and returns its path.
func reviewerTokens(t *testing.T, token string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(token))
	return writeTree(t, map[string]string{"tokens.yaml": fmt.Sprintf("- {name: alice, tokenSha256: %x, role: reviewer}\n", sum)}) + "/tokens.yaml"
}

// TestServeReplicasShareThreadsAndApprovalsOnARedisCluster runs two aguard
// processes with --redis-mode cluster on a real Redis Cluster (three
// masters, a replica each), on threads whose keys live on every master. A
// run through A leaves a frontend call pending; the thread's next run
// through B is refused (409 unanswered_tool_calls) without the answer and
// goes through with it, and both admin APIs show the call COMPLETED. A
// call A holds for approval is listed by B's /v1/approvals, refused while
// undecided (409 awaiting_approval), approved through B's admin API, and
// the next run answering it, through A or B, reaches the agent unchanged
// and completes it.
func TestServeReplicasShareThreadsAndApprovalsOnARedisCluster(t *testing.T) {
	bin := buildAguard(t)
	c := redistest.SharedCluster(t)
	agent := newScaleAgent(t)
	const token = "alice-token"
	args := []string{"--upstream", agent.URL, "--redis-mode", "cluster", "--redis", c.URL(),
		"--policy", writeTree(t, map[string]string{"policy.rego": approvalPolicy}), "--admin-tokens", reviewerTokens(t, token)}
	a, b := startAguard(t, bin, args...), startAguard(t, bin, args...)
	replicas := map[string]*started{"A": a, "B": b}

	// Thread names picked so that each kind lives on every master: the
	// slot of {plain-0} is 3889, {plain-1} 7952, {plain-2} 12147,
	// {held-3} 3856, {held-2} 7985, {held-1} 12114 (CRC16 mod 16384).
	plain := []string{"plain-0", "plain-1", "plain-2"}
	held := []string{"held-1", "held-2", "held-3"}
	rc := c.Client(t)
	ctx := context.Background()

	for _, th := range append(plain, held...) {
		call := "call-" + th + "-r1"
		code, body := postRun(t, a.listen, runInput(th, th+"-r1", "", ""))
		if code != 200 || !strings.Contains(body, `"pendingToolCallIds":["`+call+`"]`) {
			t.Fatalf("%s: first run through A: %d %s", th, code, body)
		}
		if strings.HasPrefix(th, "held-") && !strings.Contains(body, "aguard.approval_required") {
			t.Fatalf("%s: first run through A holds no call for approval: %s", th, body)
		}
		await.For(t, th+"'s first run's end in Redis", func() bool { return runEnded(rc, th, th+"-r1") })
		code, body = postRun(t, b.listen, runInput(th, th+"-r2", "", ""))
		if code != 409 || !strings.Contains(body, `"unanswered_tool_calls"`) || !strings.Contains(body, call) {
			t.Fatalf("%s: next run through B without the answer: %d %s", th, code, body)
		}
	}
	masters := map[string]bool{}
	for _, th := range append(plain, held...) {
		key := "aguard:{" + th + "}:thread"
		slot, err := rc.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		m, _ := c.MasterOf(t, int(slot))
		if n, err := c.Node(t, m).Exists(ctx, key).Result(); err != nil || n != 1 {
			t.Fatalf("%s is not on %s, the master of its slot %d: %v", key, m.Addr(), slot, err)
		}
		masters[m.Addr()] = true
	}
	if len(masters) != 3 {
		t.Fatalf("the threads live on %d masters, want 3", len(masters))
	}

	// Plain threads: B answers what A left pending.
	for _, th := range plain {
		call := "call-" + th + "-r1"
		code, body := postRun(t, b.listen, runInput(th, th+"-r3", call, "yes-"+th))
		if code != 200 || !strings.Contains(body, "RUN_FINISHED") || strings.Contains(body, "pendingToolCallIds") {
			t.Fatalf("%s: run through B with the answer: %d %s", th, code, body)
		}
		if got := agent.answer(call); got != "yes-"+th {
			t.Fatalf("%s: the agent got the answer %q, want %q", th, got, "yes-"+th)
		}
	}

	// Held threads: B lists A's holds, refuses an answer while they are
	// undecided, and approves them.
	code, body := adminDo(t, b.admin, token, "GET", "/v1/approvals", "")
	for _, th := range held {
		if code != 200 || !strings.Contains(body, `"id":"call-`+th+`-r1"`) {
			t.Fatalf("B's /v1/approvals lacks %s's call: %d %s", th, code, body)
		}
	}
	for _, th := range held {
		call := "call-" + th + "-r1"
		code, body := postRun(t, b.listen, runInput(th, th+"-r3", call, "early"))
		if code != 409 || !strings.Contains(body, `"awaiting_approval"`) {
			t.Fatalf("%s: an answer through B before the approval: %d %s", th, code, body)
		}
		code, body = adminDo(t, b.admin, token, "POST", "/v1/tool-calls/"+call+"/approve?threadId="+th, `{"reason":"checked"}`)
		if code != 200 || !strings.Contains(body, `"status":"TOOL_EXECUTION_STATUS_EXECUTING"`) || !strings.Contains(body, `"approvedBy":"alice"`) {
			t.Fatalf("%s: approve through B: %d %s", th, code, body)
		}
	}
	// The approvals are honoured by A, whose memory held the calls, and
	// by B.
	for i, th := range held {
		call := "call-" + th + "-r1"
		via := []string{"A", "B", "A"}[i]
		code, body := postRun(t, replicas[via].listen, runInput(th, th+"-r4", call, "paid-"+th))
		if code != 200 || !strings.Contains(body, "RUN_FINISHED") || strings.Contains(body, "pendingToolCallIds") {
			t.Fatalf("%s: the answer through %s after B's approval: %d %s", th, via, code, body)
		}
		if got := agent.answer(call); got != "paid-"+th {
			t.Fatalf("%s: the agent got the answer %q through %s, want %q", th, got, via, "paid-"+th)
		}
	}

	for _, th := range append(plain, held...) {
		call := "call-" + th + "-r1"
		for name, r := range replicas {
			await.For(t, fmt.Sprintf("%s's admin API to show %s COMPLETED", name, call), func() bool {
				return recordStatus(t, r.admin, token, th, call) == "TOOL_EXECUTION_STATUS_COMPLETED"
			})
		}
	}
	// The lists and the id index read every master.
	for name, r := range replicas {
		code, body := adminDo(t, r.admin, token, "GET", "/v1/tool-calls?status=TOOL_EXECUTION_STATUS_COMPLETED", "")
		for _, th := range append(plain, held...) {
			if code != 200 || !strings.Contains(body, `"id":"call-`+th+`-r1"`) {
				t.Fatalf("%s's list of completed calls lacks %s's: %d %s", name, th, code, body)
			}
		}
		if code, body := adminDo(t, r.admin, token, "GET", "/v1/tool-calls/call-held-2-r1", ""); code != 200 || !strings.Contains(body, `"threadId":"held-2"`) {
			t.Fatalf("%s finds a call by its id alone: %d %s", name, code, body)
		}
	}
	t.Logf("%d threads on %d masters: each call recorded through A, refused and answered across replicas, COMPLETED in both admin APIs; %d approved through B", len(plain)+len(held), len(masters), len(held))
}

// readyWatch polls a replica's /readyz every 25 ms until stopped, and keeps
// the stretches it answered "degraded", and any answer other than 200.
type readyWatch struct {
	mu      sync.Mutex
	since   time.Time       // start of the current degraded stretch; zero while ok
	longest time.Duration   // the longest stretch that ended
	spans   int             // stretches begun
	reasons map[string]bool // why, as /readyz said
	bad     []string        // answers other than 200
	stop    chan struct{}
	done    chan struct{}
}

func watchReady(t *testing.T, admin string) *readyWatch {
	w := &readyWatch{reasons: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(25 * time.Millisecond):
			}
			now := time.Now()
			var r struct{ Status, Reason string }
			resp, err := http.Get("http://" + admin + "/readyz")
			if err == nil {
				err = json.NewDecoder(resp.Body).Decode(&r)
				resp.Body.Close()
			}
			w.mu.Lock()
			switch {
			case err != nil || resp.StatusCode != 200:
				w.bad = append(w.bad, fmt.Sprint(err, r))
			case r.Status == "degraded":
				if w.since.IsZero() {
					w.since, w.spans = now, w.spans+1
				}
				// "… 3s ago" changes each second: keep the reason's kind.
				kind, _, _ := strings.Cut(r.Reason, ")")
				w.reasons[kind+")"] = true
			case !w.since.IsZero():
				w.longest = max(w.longest, now.Sub(w.since))
				w.since = time.Time{}
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.halt)
	return w
}

// ok reports whether the last answer was 200 "ok".
func (w *readyWatch) ok() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.spans > 0 && w.since.IsZero()
}

func (w *readyWatch) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// TestServeRunsThroughASentinelFailover runs two aguard processes with
// --redis-mode sentinel, on a primary and its replica watched by three real
// redis-sentinel processes, and fails the primary over (SENTINEL FAILOVER)
// while runs go on: on each of four threads, a run through one replica
// leaves a call pending and the next, through the other, answers it. Every
// run is served (a 503 ledger_unavailable, which asks the client to retry,
// would be retried and counted), none is refused for a call it answered;
// each replica counts the failover as one loss and no other; /readyz
// answers 200 throughout, "degraded" from the failover until the replicas
// have written back what the old primary took after the promotion (at
// least the 10 s every loss holds), then "ok"; and a replica started
// afterwards, with nothing in memory, reads every call COMPLETED.
func TestServeRunsThroughASentinelFailover(t *testing.T) {
	bin := buildAguard(t)
	ss := redistest.StartSentinels(t)
	agent := newScaleAgent(t)
	args := []string{"--upstream", agent.URL, "--redis-mode", "sentinel", "--redis", ss.URL(), "--admin-token", "tok"}
	replicas := []*started{startAguard(t, bin, args...), startAguard(t, bin, args...)}
	rc := ss.Client(t) // the primary the sentinels name, before and after the failover
	const lost = `aguard_state_redis_data_lost_total{cause="restart"}`

	var retried atomic.Int64
	var slowest atomic.Int64 // ns
	post := func(r *started, input string) (string, bool) {
		for {
			began := time.Now()
			code, body := postRun(t, r.listen, input)
			if d := int64(time.Since(began)); d > slowest.Load() {
				slowest.Store(d) // racy max, good enough for a report
			}
			if code == 503 && strings.Contains(body, `"ledger_unavailable"`) {
				retried.Add(1)
				continue
			}
			if code != 200 {
				t.Errorf("%s: %d %s", time.Now().Format("15:04:05.000"), code, body)
				return body, false
			}
			return body, true
		}
	}
	threads := []string{"s-0", "s-1", "s-2", "s-3"}
	stop := make(chan struct{})
	var done atomic.Int64
	var mu sync.Mutex
	calls := map[string]string{} // call -> thread
	var workers sync.WaitGroup
	for i, th := range threads {
		workers.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				first, second := replicas[(i+k)%2], replicas[(i+k+1)%2]
				run := fmt.Sprintf("%s-r%d", th, k)
				call := "call-" + run
				body, ok := post(first, runInput(th, run, "", ""))
				if !ok {
					return
				}
				if !strings.Contains(body, `"pendingToolCallIds":["`+call+`"]`) {
					t.Errorf("%s: no call left pending: %s", run, body)
					return
				}
				mu.Lock()
				calls[call] = th
				mu.Unlock()
				// The answer goes through the other replica once Redis
				// holds the run's end: landing after the answer's own
				// write, it would list the answered call pending again.
				if !await.Until(30*time.Second, func() bool { return runEnded(rc, th, run) }) {
					t.Errorf("%s: its end did not reach Redis", run)
					return
				}
				if body, ok = post(second, runInput(th, run+"-answer", call, "yes")); !ok {
					return
				}
				if strings.Contains(body, "pendingToolCallIds") || !strings.Contains(body, "RUN_FINISHED") {
					t.Errorf("%s: the answer: %s", run, body)
					return
				}
				done.Add(1)
			}
		})
	}
	var once sync.Once
	halt := func() { once.Do(func() { close(stop) }); workers.Wait() }
	t.Cleanup(halt)

	await.For(t, "runs before the failover", func() bool { return done.Load() >= 20 })
	for i, r := range replicas {
		if n := metric(t, r.admin, lost); n > 0 {
			t.Fatalf("replica %d counted %v losses before the failover", i, n)
		}
	}
	watches := []*readyWatch{watchReady(t, replicas[0].admin), watchReady(t, replicas[1].admin)}
	old := ss.Primary.Addr()
	asked := time.Now()
	ss.Failover(t)
	tookOver := time.Since(asked)
	before := done.Load()
	await.Within(t, 30*time.Second, "runs to go on against the new primary", func() bool { return done.Load() >= before+20 })
	halt()
	if t.Failed() {
		return
	}
	for i, w := range watches {
		await.Within(t, 30*time.Second, fmt.Sprintf("replica %d's /readyz to say ok again", i), w.ok)
		w.halt()
		if len(w.bad) > 0 {
			t.Errorf("replica %d's /readyz did not answer 200: %q", i, w.bad)
		}
		if n := metric(t, replicas[i].admin, lost); n != 1 {
			t.Errorf("replica %d counted %v losses by the failover, want 1", i, n)
		}
	}

	fresh := startAguard(t, bin, args...)
	missing := 0
	for call, th := range calls {
		if got := recordStatus(t, fresh.admin, "tok", th, call); got != "TOOL_EXECUTION_STATUS_COMPLETED" {
			if missing++; missing <= 3 {
				t.Errorf("%s on %s, read by a fresh replica after the failover: %q", call, th, got)
			}
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d calls are not COMPLETED in redis", missing, len(calls))
	}
	for i, w := range watches {
		t.Logf("replica %d: /readyz degraded %d time(s), for %v (%v)", i, w.spans, w.longest.Round(time.Millisecond), slices.Sorted(maps.Keys(w.reasons)))
	}
	t.Logf("sentinels failed the primary over from %s to %s in %v; %d calls on %d threads, each recorded through one replica and answered through the other, %d of them after the failover; slowest run %v; %d runs retried after 503 ledger_unavailable; none lost",
		old, ss.Primary.Addr(), tookOver.Round(time.Millisecond), len(calls), len(threads), int64(len(calls))-before,
		time.Duration(slowest.Load()).Round(time.Millisecond), retried.Load())
}

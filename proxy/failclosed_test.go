package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/aguard/aguard/admin"
	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/redistest"
	"github.com/aguard/aguard/policy"
	"github.com/aguard/aguard/state"
)

// The request-side and ledger guarantees of the README's threat model, over
// real sockets, a real redis-server and the real policy engine.

// inThread is a 1.0 RunAgentInput for thread advertising confirm_order,
// with the given extra messages.
func inThread(thread, run, messages string) string {
	return `{"threadId":"` + thread + `","runId":"` + run + `","protocolVersion":"1.0","messages":[{"id":"u1","role":"user","content":"go"}` + messages + `],` +
		`"tools":[{"name":"confirm_order","description":"Ask the user","parameters":{"type":"object"}}]}`
}

// callIn is a run of thread that starts the frontend call id and finishes,
// leaving it pending (or held, as the policy decides).
func callIn(thread, run, id string) []string {
	return []string{`{"type":"RUN_STARTED","threadId":"` + thread + `","runId":"` + run + `"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"` + id + `","toolCallName":"confirm_order"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"` + id + `","delta":"{\"orderId\":\"A\"}"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"` + id + `"}`,
		`{"type":"RUN_FINISHED","threadId":"` + thread + `","runId":"` + run + `"}`}
}

func textIn(thread, run string) []string {
	return []string{`{"type":"RUN_STARTED","threadId":"` + thread + `","runId":"` + run + `"}`,
		`{"type":"RUN_FINISHED","threadId":"` + thread + `","runId":"` + run + `"}`}
}

// runReply is a consumer's view of one request.
type runReply struct {
	status int
	events []string
	code   string
	ids    []string // error.toolCallIds
}

func send(t *testing.T, h *harness, body string) runReply {
	t.Helper()
	resp := h.post(t, context.Background(), "/agent", body)
	defer resp.Body.Close()
	if resp.StatusCode == 200 {
		return runReply{status: 200, events: readAll(t, resp.Body)}
	}
	var e errorBodyIDs
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("error body: %v", err)
	}
	return runReply{status: resp.StatusCode, code: e.Error.Code, ids: e.Error.ToolCallIDs}
}

// adminServer serves store's admin API and /readyz on a loopback socket.
func adminServer(t *testing.T, store *state.Store) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(admin.Handler(admin.Options{Token: "tok", Ready: []admin.Check{store.Ready},
		API: admin.API(admin.APIOptions{Store: store})}))
	t.Cleanup(srv.Close)
	return srv
}

func adminDo(t *testing.T, srv *httptest.Server, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// record is the admin API's view of a call.
func record(t *testing.T, srv *httptest.Server, thread, id string) state.ToolCall {
	t.Helper()
	status, body := adminDo(t, srv, "GET", "/v1/tool-calls/"+id+"?threadId="+thread, "")
	if status != 200 {
		t.Fatalf("GET %s of %s: %d %s", id, thread, status, body)
	}
	var c state.ToolCall
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func approvalPolicy(t *testing.T, rego string) *policy.Engine {
	t.Helper()
	dir := t.TempDir()
	writePolicy(t, dir, rego)
	engine, err := policy.New(context.Background(), policy.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return engine
}

func openStoreOpt(t *testing.T, opt state.Options) *state.Store {
	t.Helper()
	s, err := state.Open(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestACallBelongsToItsThreadAcrossReplicas: two threads whose agents both
// number their first call call_0, served by two replicas sharing Redis.
// Thread C's call is held for approval, thread D's is pending. Each stays
// its thread's: C's approval stays listed after D reuses the id, each
// answer is judged against its own thread's record, the admin API asks
// which thread is meant, and an answer forged in a third thread completes
// nothing.
func TestACallBelongsToItsThreadAcrossReplicas(t *testing.T) {
	redis := redistest.Start(t)
	engine := approvalPolicy(t, `package aguard
default decision := {"action": "allow"}
decision := {"action": "require_approval", "reason": "review"} if input.run.threadId == "thread-c"
`)
	agent := &recordingAgent{runs: map[string][]string{
		"c-1": callIn("thread-c", "c-1", "call_0"), "d-1": callIn("thread-d", "d-1", "call_0"),
		"c-2": textIn("thread-c", "c-2"), "c-3": textIn("thread-c", "c-3"), "d-2": textIn("thread-d", "d-2"), "e-1": textIn("thread-e", "e-1")}}
	storeA, storeB := openStore(t, redis.URL()), openStore(t, redis.URL())
	a := newHarness(t, agent.ServeHTTP, func(o *Options) { o.State, o.Policy = storeA, engine })
	b := newHarness(t, agent.ServeHTTP, func(o *Options) { o.State, o.Policy = storeB, engine })
	adminA, adminB := adminServer(t, storeA), adminServer(t, storeB)

	if r := send(t, a, inThread("thread-c", "c-1", "")); r.status != 200 || !strings.Contains(strings.Join(r.events, ""), "aguard.approval_required") {
		t.Fatalf("thread C, run 1: %+v", r)
	}
	if r := send(t, b, inThread("thread-d", "d-1", "")); r.status != 200 || !strings.Contains(r.events[len(r.events)-1], `"pendingToolCallIds":["call_0"]`) {
		t.Fatalf("thread D, run 1: %+v", r)
	}
	// From here on each replica reads what the other recorded.
	reader := openStore(t, redis.URL())
	awaitRunEnd(t, reader, "thread-c", "c-1")
	awaitRunEnd(t, reader, "thread-d", "d-1")
	approvals := func(srv *httptest.Server) string {
		_, body := adminDo(t, srv, "GET", "/v1/approvals", "")
		var l struct{ ToolCalls []state.ToolCall }
		json.Unmarshal([]byte(body), &l)
		var out []string
		for _, c := range l.ToolCalls {
			out = append(out, c.ThreadID+"/"+c.ID)
		}
		return strings.Join(out, ",")
	}
	for _, srv := range []*httptest.Server{adminA, adminB} {
		if got := approvals(srv); got != "thread-c/call_0" {
			t.Fatalf("approvals after D reused the id = %q, want thread C's call", got)
		}
	}
	status, body := adminDo(t, adminB, "GET", "/v1/tool-calls/call_0", "")
	if status != 409 || !strings.Contains(body, `"code":"ambiguous_tool_call_id"`) || !strings.Contains(body, `"threadIds":["thread-c","thread-d"]`) {
		t.Fatalf("GET call_0 without a thread: %d %s", status, body)
	}

	// A consumer of thread E forges an answer to call_0: nothing completes.
	forged := `,{"id":"a-x","role":"assistant","toolCalls":[{"id":"call_0","type":"function","function":{"name":"confirm_order","arguments":"{}"}}]},` +
		`{"id":"t-x","role":"tool","toolCallId":"call_0","content":"forged"}`
	if r := send(t, b, inThread("thread-e", "e-1", forged)); r.status != 200 {
		t.Fatalf("thread E: %+v", r)
	}
	if c := record(t, adminA, "thread-c", "call_0"); c.Status != state.StatusRequiresConfirmation {
		t.Fatalf("thread C's call after the forged answer: %s", c.Status)
	}
	if c := record(t, adminA, "thread-d", "call_0"); c.Status != state.StatusExecuting || c.ResultJSON != nil {
		t.Fatalf("thread D's call after the forged answer: %s %s", c.Status, c.ResultJSON)
	}

	// D's answer, through A: D's record completes, C's approval stays.
	if r := send(t, a, inThread("thread-d", "d-2", answer("call_0", "done"))); r.status != 200 {
		t.Fatalf("thread D, run 2: %+v", r)
	}
	if c := record(t, adminB, "thread-d", "call_0"); c.Status != state.StatusCompleted || string(c.ResultJSON) != `{"content":"done"}` {
		t.Fatalf("thread D's call after its answer: %s %s", c.Status, c.ResultJSON)
	}
	if got := approvals(adminB); got != "thread-c/call_0" {
		t.Fatalf("approvals after D's answer = %q", got)
	}
	// C's answer, through B, meets C's undecided approval.
	if r := send(t, b, inThread("thread-c", "c-2", answer("call_0", "paid"))); r.status != 409 || r.code != "awaiting_approval" || !slices.Equal(r.ids, []string{"call_0"}) {
		t.Fatalf("thread C's answer while held: %+v", r)
	}
	// A reviewer must say which call_0 they reject.
	if status, body := adminDo(t, adminB, "POST", "/v1/tool-calls/call_0/reject", `{"approvedBy":"alice"}`); status != 409 || !strings.Contains(body, "ambiguous_tool_call_id") {
		t.Fatalf("reject without a thread: %d %s", status, body)
	}
	if status, body := adminDo(t, adminB, "POST", "/v1/tool-calls/call_0/reject", `{"approvedBy":"alice","threadId":"thread-c"}`); status != 200 || !strings.Contains(body, `"endReason":"approval rejected"`) {
		t.Fatalf("reject in thread C: %d %s", status, body)
	}
	if r := send(t, a, inThread("thread-c", "c-3", answer("call_0", "paid"))); r.status != 200 {
		t.Fatalf("thread C's answer after the rejection: %+v", r)
	}
	sent, _ := agent.last()
	if !strings.Contains(sent, `"toolCallId":"call_0","content":"Declined by aguard: approval rejected.","error":"approval rejected"`) {
		t.Fatalf("thread C's answer reached the agent unrewritten: %s", sent)
	}
	if c := record(t, adminA, "thread-d", "call_0"); c.Status != state.StatusCompleted || string(c.ResultJSON) != `{"content":"done"}` {
		t.Fatalf("thread D's call after C's decline: %s %s", c.Status, c.ResultJSON)
	}
}

// TestRedisLossDuringHeldApprovalsFailsClosed loses Redis's data (FLUSHALL;
// kill -9 and a restart without persistence) while thread C has a call held
// for approval and thread P one pending: P's next run without the answer is
// refused, C's answer is declined (its approval cannot be vouched for),
// /readyz says degraded, and the records are back in Redis afterwards.
func TestRedisLossDuringHeldApprovalsFailsClosed(t *testing.T) {
	for _, loss := range []string{"flushall", "kill9"} {
		t.Run(loss, func(t *testing.T) {
			redis := redistest.Start(t)
			engine := approvalPolicy(t, `package aguard
default decision := {"action": "allow"}
decision := {"action": "require_approval", "reason": "review"} if input.run.threadId == "thread-c"
`)
			agent := &recordingAgent{runs: map[string][]string{
				"c-1": callIn("thread-c", "c-1", "h"), "p-1": callIn("thread-p", "p-1", "p"),
				"c-2": textIn("thread-c", "c-2"), "p-2": textIn("thread-p", "p-2")}}
			store := openStore(t, redis.URL())
			h := newHarness(t, agent.ServeHTTP, func(o *Options) { o.State, o.Policy = store, engine })
			adm := adminServer(t, store)
			if r := send(t, h, inThread("thread-c", "c-1", "")); r.status != 200 {
				t.Fatalf("thread C, run 1: %+v", r)
			}
			if r := send(t, h, inThread("thread-p", "p-1", "")); r.status != 200 {
				t.Fatalf("thread P, run 1: %+v", r)
			}
			rc := rawRedis(t, redis)
			ctx := context.Background()
			// The loss must take what the runs recorded: their ends may
			// still be on their way when RUN_FINISHED goes out.
			keys := []string{"aguard:{thread-c}:thread", "aguard:{thread-c}:call:h", "aguard:{thread-p}:thread", "aguard:{thread-p}:call:p"}
			await.For(t, "the runs' records to be in Redis", func() bool {
				return rc.Exists(ctx, keys...).Val() == int64(len(keys))
			})
			switch loss {
			case "flushall":
				if err := rc.FlushAll(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			case "kill9":
				redis.Stop()
				redis.Restart()
				await.Within(t, 10*time.Second, "the loss to be noticed", func() bool {
					_, body := adminDo(t, adm, "GET", "/readyz", "")
					return strings.Contains(body, "redis lost data")
				})
			}
			if r := send(t, h, inThread("thread-p", "p-2", "")); r.status != 409 || r.code != "unanswered_tool_calls" || !slices.Equal(r.ids, []string{"p"}) {
				t.Fatalf("thread P without its answer after the loss: %+v", r)
			}
			if r := send(t, h, inThread("thread-c", "c-2", answer("h", "paid"))); r.status != 200 {
				t.Fatalf("thread C's answer after the loss: %+v", r)
			}
			sent, _ := agent.last()
			if !strings.Contains(sent, `"toolCallId":"h","content":"Declined by aguard: approval lost.","error":"approval lost"`) {
				t.Fatalf("the held call's answer reached the agent unrewritten: %s", sent)
			}
			status, body := adminDo(t, adm, "GET", "/readyz", "")
			if status != 200 || !strings.Contains(body, `"status":"degraded"`) || !strings.Contains(body, "redis lost data") {
				t.Fatalf("/readyz after the loss: %d %s", status, body)
			}
			await.Within(t, 10*time.Second, "the records to be back in Redis", func() bool {
				return rc.Exists(ctx, keys...).Val() == int64(len(keys))
			})
			other := adminServer(t, openStore(t, redis.URL()))
			if c := record(t, other, "thread-p", "p"); c.Status != state.StatusExecuting || c.ClientToolDeadlineAt == nil {
				t.Fatalf("thread P's call after the loss: %+v", c)
			}
			if c := record(t, other, "thread-c", "h"); c.Status != state.StatusCancelled || c.EndReason != "approval lost" {
				t.Fatalf("thread C's call after the loss: %s %q", c.Status, c.EndReason)
			}
		})
	}
}

func rawRedis(t *testing.T, srv *redistest.Server) *goredis.Client {
	t.Helper()
	opt, err := goredis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestAnUnreadableThreadRefusesRunsWithToolHistory: while Redis is down, a
// thread this replica knows is held to its last known state (409 for the
// call it left pending); a thread it knows nothing of may hold anything: a
// run that carries tool history is refused with 503 ledger_unavailable
// instead of going through unchecked, and a run without any (a new
// conversation) goes through.
func TestAnUnreadableThreadRefusesRunsWithToolHistory(t *testing.T) {
	redis := redistest.Start(t)
	agent := &recordingAgent{runs: map[string][]string{"n-1": textIn("thread-new", "n-1"), "h-1": textIn("thread-old", "h-1"),
		"k-1": callIn("thread-known", "k-1", "k"), "k-2": textIn("thread-known", "k-2")}}
	h := newHarness(t, agent.ServeHTTP, func(o *Options) { o.State = openStore(t, redis.URL()) })
	if r := send(t, h, inThread("thread-known", "k-1", "")); r.status != 200 {
		t.Fatalf("thread-known, run 1: %+v", r)
	}
	_, calls := agent.last()
	redis.Stop()
	if r := send(t, h, inThread("thread-known", "k-2", answer("x", "done"))); r.status != 409 || r.code != "unanswered_tool_calls" || !slices.Equal(r.ids, []string{"k"}) {
		t.Fatalf("a known thread's run without its pending answer, Redis down: %+v", r)
	}
	if r := send(t, h, inThread("thread-old", "h-1", answer("call-9", "done"))); r.status != 503 || r.code != "ledger_unavailable" {
		t.Fatalf("a run with tool history on an unreadable thread: %+v", r)
	}
	if _, n := agent.last(); n != calls {
		t.Fatal("a refused run reached the agent")
	}
	if r := send(t, h, inThread("thread-new", "n-1", "")); r.status != 200 {
		t.Fatalf("a run without tool history: %+v", r)
	}
}

// TestAFloodDoesNotEvictAHeldApproval: without Redis, after a call is held
// for approval, another thread's 100,000 answered calls (past the whole
// --ledger-cache) are recorded in the same store; the held call is still
// held, and its answer still meets it.
func TestAFloodDoesNotEvictAHeldApproval(t *testing.T) {
	engine := approvalPolicy(t, `package aguard
default decision := {"action": "allow"}
decision := {"action": "require_approval", "reason": "review"} if input.run.threadId == "thread-c"
`)
	agent := &recordingAgent{runs: map[string][]string{"c-1": callIn("thread-c", "c-1", "h"), "c-2": textIn("thread-c", "c-2")}}
	store := openStore(t, "") // --ledger-cache 100000
	h := newHarness(t, agent.ServeHTTP, func(o *Options) { o.State, o.Policy = store, engine })
	if r := send(t, h, inThread("thread-c", "c-1", "")); r.status != 200 {
		t.Fatalf("thread C, run 1: %+v", r)
	}
	ctx := context.Background()
	for i := range 100_004 {
		now := time.Now()
		c := state.NewCall(state.Ref{ThreadID: "thread-flood", ID: fmt.Sprint("flood-", i)}, "run-flood", "lookup", false, now)
		if err := state.Answer([]byte(`"found"`), "", false, now).To(c); err != nil {
			t.Fatal(err)
		}
		if err := store.PutCall(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if r := send(t, h, inThread("thread-c", "c-2", answer("h", "paid"))); r.status != 409 || r.code != "awaiting_approval" {
		t.Fatalf("the held call's answer after the flood: %+v", r)
	}
	if _, err := store.GetCall(ctx, state.Ref{ThreadID: "thread-flood", ID: "flood-0"}); err == nil {
		t.Fatal("the flood did not fill the cache: its first record is still there")
	}
}

// TestAnApprovalTimeoutPastTheTTLKeepsTheRecord: a policy that gives
// reviewers 30 days (past the 7-day TTL) gets records, and a thread, that
// Redis keeps as long.
func TestAnApprovalTimeoutPastTheTTLKeepsTheRecord(t *testing.T) {
	redis := redistest.Start(t)
	engine := approvalPolicy(t, `package aguard
default decision := {"action": "allow"}
decision := {"action": "require_approval", "reason": "review", "approvalTimeout": "720h"} if input.call.name == "confirm_order"
`)
	agent := &recordingAgent{runs: map[string][]string{"c-1": callIn("thread-c", "c-1", "h"), "c-2": textIn("thread-c", "c-2")}}
	h := newHarness(t, agent.ServeHTTP, func(o *Options) { o.State, o.Policy = openStore(t, redis.URL()), engine })
	if r := send(t, h, inThread("thread-c", "c-1", "")); r.status != 200 {
		t.Fatalf("run 1: %+v", r)
	}
	awaitRunEnd(t, openStore(t, redis.URL()), "thread-c", "c-1")
	rc := rawRedis(t, redis)
	ctx := context.Background()
	var checked int
	for _, k := range rc.Keys(ctx, "*").Val() {
		if !strings.Contains(k, "thread-c") && !strings.HasSuffix(k, ":h") {
			continue
		}
		checked++
		if ttl := rc.PTTL(ctx, k).Val(); ttl < 719*time.Hour {
			t.Errorf("PTTL(%s) = %v, shorter than the 720h the reviewers have", k, ttl)
		}
	}
	if checked < 2 {
		t.Fatalf("found %d keys of the thread and its call", checked)
	}
	if r := send(t, h, inThread("thread-c", "c-2", answer("h", "paid"))); r.status != 409 || r.code != "awaiting_approval" {
		t.Fatalf("the held call's answer: %+v", r)
	}
}

// TestAFullLedgerDeniesNewHolds: when the protected ledger memory is full, a
// call the policy holds for approval is denied instead (the consumer sees
// aguard.tool_call_denied), so no hold exists that memory cannot keep.
func TestAFullLedgerDeniesNewHolds(t *testing.T) {
	engine := approvalPolicy(t, `package aguard
decision := {"action": "require_approval", "reason": "review"}
`)
	agent := &recordingAgent{runs: map[string][]string{"c-1": callIn("thread-c", "c-1", "h1"), "d-1": callIn("thread-d", "d-1", "h2")}}
	store := openStoreOpt(t, state.Options{CacheSize: 2}) // one held call and its thread
	h := newHarness(t, agent.ServeHTTP, func(o *Options) { o.State, o.Policy = store, engine })
	if r := send(t, h, inThread("thread-c", "c-1", "")); r.status != 200 || !strings.Contains(strings.Join(r.events, ""), "aguard.approval_required") {
		t.Fatalf("first hold: %+v", r)
	}
	r := send(t, h, inThread("thread-d", "d-1", ""))
	all := strings.Join(r.events, "\n")
	if r.status != 200 || strings.Contains(all, "aguard.approval_required") || !strings.Contains(all, "aguard.tool_call_denied") ||
		!strings.Contains(all, "cannot hold more calls for approval") {
		t.Fatalf("a hold with the ledger full: %d\n%s", r.status, all)
	}
	if c, err := store.GetCall(context.Background(), state.Ref{ThreadID: "thread-d", ID: "h2"}); err != nil || c.Status != state.StatusFailed {
		t.Fatalf("the refused hold's record: %+v, %v", c, err)
	}
}

// roundTrips counts the Redis round trips (a command or a pipeline) that
// touch a tool-call record or the thread named mark, whatever the key
// layout.
type roundTrips struct {
	mark string
	n    chan struct{}
}

func (h *roundTrips) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *roundTrips) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.count([]goredis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.count(cmds)
		return next(ctx, cmds)
	}
}

func (h *roundTrips) count(cmds []goredis.Cmder) {
	for _, c := range cmds {
		for _, a := range c.Args() {
			if s, ok := a.(string); ok && strings.HasPrefix(s, "aguard:") && (strings.Contains(s, h.mark) || strings.Contains(s, ":call:")) {
				h.n <- struct{}{}
				return
			}
		}
	}
}

func (h *roundTrips) take() (n int) {
	for {
		select {
		case <-h.n:
			n++
		default:
			return n
		}
	}
}

// TestSixtyThousandToolMessagesAreCheckedInTwoRoundTrips: a RunAgentInput
// answering 60,000 pending calls is checked against the ledger, and every
// answer recorded, in one round trip for the reads and one for the writes.
func TestSixtyThousandToolMessagesAreCheckedInTwoRoundTrips(t *testing.T) {
	const n = 60_000
	redis := redistest.Start(t)
	ctx := context.Background()
	seed := openStore(t, redis.URL())
	ids := make([]string, n)
	var batch []*state.ToolCall
	for i := range ids {
		ids[i] = fmt.Sprint("call_", i)
		c := state.NewCall(state.Ref{ThreadID: "thread-big", ID: ids[i]}, "run-1", "confirm_order", true, time.Now())
		if err := state.Dispatch(time.Now(), time.Hour).To(c); err != nil {
			t.Fatal(err)
		}
		if batch = append(batch, c); len(batch) == 1000 {
			if err := seed.PutCallsSync(ctx, batch, nil); err != nil {
				t.Fatal(err)
			}
			batch = nil
		}
	}
	if err := seed.PutCallsSync(ctx, nil, &state.Thread{ID: "thread-big", LastRunID: "run-1", PendingCalls: ids}); err != nil {
		t.Fatal(err)
	}

	rt := &roundTrips{mark: "thread-big", n: make(chan struct{}, 1<<20)}
	store := openStoreOpt(t, state.Options{RedisURL: redis.URL(), Hooks: []goredis.Hook{rt}})
	checked := make(chan int, 1)
	agent := func(w http.ResponseWriter, r *http.Request) {
		checked <- rt.take()
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range textIn("thread-big", "run-2") {
			io.WriteString(w, frame(e))
		}
	}
	h := newHarness(t, agent, func(o *Options) { o.State, o.MaxBody = store, 64<<20 })
	// The calls in assistant messages of 1,000 each: one message of
	// 60,000 would hold more JSON values than aguard parses at once
	// (README, "Limits").
	var msgs strings.Builder
	for i, id := range ids {
		switch {
		case i%1000 == 0:
			msgs.WriteString(`,{"id":"a` + fmt.Sprint(i) + `","role":"assistant","toolCalls":[`)
		default:
			msgs.WriteByte(',')
		}
		msgs.WriteString(`{"id":"` + id + `","type":"function","function":{"name":"confirm_order","arguments":"{}"}}`)
		if i%1000 == 999 || i == len(ids)-1 {
			msgs.WriteString(`]}`)
		}
	}
	for _, id := range ids {
		msgs.WriteString(`,{"id":"t-` + id + `","role":"tool","toolCallId":"` + id + `","content":"ok"}`)
	}
	rt.take()
	if r := send(t, h, inThread("thread-big", "run-2", msgs.String())); r.status != 200 {
		t.Fatalf("the run answering %d calls: %+v", n, r)
	}
	if got := <-checked; got > 2 {
		t.Errorf("checking %d tool messages took %d round trips to Redis before the agent got the run, want at most 2", n, got)
	}
	for _, id := range []string{ids[0], ids[n-1]} {
		c, err := store.GetCall(ctx, state.Ref{ThreadID: "thread-big", ID: id})
		if err != nil || c.Status != state.StatusCompleted || string(c.ResultJSON) != `{"content":"ok"}` {
			t.Fatalf("%s after the run: %+v, %v", id, c, err)
		}
	}
}

package proxy

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aguard/aguard/auth"
	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/jwttest"
	"github.com/aguard/aguard/internal/syncbuf"
	"github.com/aguard/aguard/policy"
	"github.com/aguard/aguard/state"
)

// identityPolicy hides agent-side lookups from viewers as they start, and
// holds confirm_order for approval unless the caller is an admin, naming
// the caller: every rule reads input.identity, none a header.
const identityPolicy = `package aguard

default decision := {"action": "allow", "reason": "ok"}

decision := {"action": "hide", "reason": "viewers do not see lookups"} if {
	input.phase == "tool_call_start"
	input.call.name == "lookup"
	input.identity.claims.role == "viewer"
}

decision := {"action": "require_approval", "reason": sprintf("%s is not an admin", [input.identity.subject])} if {
	input.phase == "tool_call_end"
	input.call.name == "confirm_order"
	input.identity.claims.role != "admin"
}
`

// headerAgent serves every run the same way (an agent-side lookup it
// answers, then a frontend confirm_order) and records what reaches it.
type headerAgent struct {
	mu     sync.Mutex
	calls  int
	authz  []string
	bodies []string
}

func (a *headerAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	a.calls++
	a.authz = append(a.authz, r.Header.Get("Authorization"))
	a.bodies = append(a.bodies, string(b))
	a.mu.Unlock()
	run, thread := between(string(b), `"runId":"`, `"`), between(string(b), `"threadId":"`, `"`)
	w.Header().Set("Content-Type", "text/event-stream")
	for _, e := range []string{
		`{"type":"RUN_STARTED","threadId":"` + thread + `","runId":"` + run + `"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"look-` + run + `","toolCallName":"lookup"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"look-` + run + `","delta":"{}"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"look-` + run + `"}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"r-` + run + `","toolCallId":"look-` + run + `","content":"found"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"pay-` + run + `","toolCallName":"confirm_order"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"pay-` + run + `","delta":"{\"orderId\":\"A\"}"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"pay-` + run + `"}`,
		`{"type":"RUN_FINISHED","threadId":"` + thread + `","runId":"` + run + `"}`,
	} {
		io.WriteString(w, frame(e))
		w.(http.Flusher).Flush()
	}
}

func (a *headerAgent) seen() (int, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls, append([]string(nil), a.authz...)
}

// identityInput is threadInput in thread.
func identityInput(thread, run string) string {
	return strings.Replace(threadInput(run, "", ""), `"threadId":"thread-x"`, `"threadId":"`+thread+`"`, 1)
}

// authPost sends a run with the given Authorization header ("" for none).
func authPost(t *testing.T, h *harness, method, authz, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, h.url+"/agent", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// auditLines are the log's audit lines, decoded.
func auditLines(t *testing.T, logs *syncbuf.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "audit" {
			out = append(out, m)
		}
	}
	return out
}

// TestConsumersMustProveWhoTheyAre runs aguard with --auth-jwks over real
// sockets, the key set served over HTTP by an identity provider in the test
// with an RS256 and an ES256 key. A request without a valid token gets 401
// unauthenticated with a Bearer challenge (RFC 6750), is audited, and
// nothing of it reaches the agent; a valid one reaches it with its
// Authorization header unchanged, and the policy and the ledger see who
// sent it. The provider rotates its keys while aguard runs.
func TestConsumersMustProveWhoTheyAre(t *testing.T) {
	ctx := context.Background()
	rs, es := jwttest.RSA(t, "rsa-1"), jwttest.EC(t, "ec-1")
	idp := jwttest.Serve(t, rs, es)
	jwt, err := auth.NewJWT(ctx, auth.JWTOptions{JWKS: idp.URL, Issuer: jwttest.Issuer, Audience: jwttest.Audience})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { jwt.Close(ctx) })
	dir := t.TempDir()
	writePolicy(t, dir, identityPolicy)
	engine, err := policy.New(ctx, policy.Options{Dir: dir, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	store := openStore(t, "")
	logs := &syncbuf.Buffer{}
	agent := &headerAgent{}
	h := newHarness(t, agent.ServeHTTP, func(o *Options) {
		o.Auth, o.Policy, o.State = jwt, engine, store
		o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	await.Within(t, 20*time.Second, "the key set is fetched", func() bool { ok, _ := jwt.Ready(); return ok })

	foreign := jwttest.RSA(t, "rsa-1") // not the provider's, under its key id
	for _, tt := range []struct {
		name, authz, challenge string
	}{
		{"no token", "", `Bearer realm="aguard"`},
		{"another scheme", "Basic YWxpY2U6cHc=", `Bearer realm="aguard"`},
		{"expired", "Bearer " + rs.Sign(t, jwttest.Claims{Expires: time.Now().Add(-time.Hour)}), `error="invalid_token"`},
		{"wrong issuer", "Bearer " + es.Sign(t, jwttest.Claims{Issuer: "https://evil.example/"}), `error="invalid_token"`},
		{"wrong audience", "Bearer " + rs.Sign(t, jwttest.Claims{Audience: "billing"}), `error="invalid_token"`},
		{"foreign key", "Bearer " + foreign.Sign(t, jwttest.Claims{}), `error="invalid_token"`},
		{"alg none", "Bearer eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"mallory","iss":"`+jwttest.Issuer+`","aud":"`+jwttest.Audience+`","exp":9999999999}`)) + ".", `error="invalid_token"`},
	} {
		for _, method := range []string{"POST", "GET"} {
			resp, body := authPost(t, h, method, tt.authz, runInput("thread-x", "run-x"))
			if resp.StatusCode != 401 || !strings.Contains(body, `"code":"unauthenticated"`) {
				t.Errorf("%s, %s: %d %s; want 401 unauthenticated", tt.name, method, resp.StatusCode, body)
			}
			if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, `Bearer realm="aguard"`) || !strings.Contains(got, tt.challenge) {
				t.Errorf("%s, %s: WWW-Authenticate %q, want it to hold %q", tt.name, method, got, tt.challenge)
			}
		}
	}
	if calls, _ := agent.seen(); calls != 0 {
		t.Fatalf("%d refused requests reached the agent", calls)
	}
	var refusals int
	for _, a := range auditLines(t, logs) {
		if a["action"] == "refuse" && a["status"] == float64(401) && a["code"] == "unauthenticated" && a["subject"] == "" && a["remoteAddr"] != "" {
			refusals++
		}
	}
	if refusals != 14 {
		t.Errorf("%d audit lines for the 14 refused requests:\n%s", refusals, logs.String())
	}

	// A viewer (RS256) and an admin (ES256), both valid.
	viewer := rs.Sign(t, jwttest.Claims{Subject: "alice@example.com", Extra: map[string]any{"role": "viewer"}})
	resp, body := authPost(t, h, "POST", "Bearer "+viewer, threadInput("run-1", "", ""))
	if resp.StatusCode != 200 {
		t.Fatalf("the viewer's run: %d %s", resp.StatusCode, body)
	}
	if strings.Contains(body, "look-run-1") || !strings.Contains(body, "aguard.approval_required") || !strings.Contains(body, "alice@example.com is not an admin") {
		t.Errorf("the viewer's stream does not follow the identity rules:\n%s", body)
	}
	admin := es.Sign(t, jwttest.Claims{Subject: "root", Extra: map[string]any{"role": "admin"}})
	resp, body = authPost(t, h, "POST", "Bearer "+admin, identityInput("thread-root", "run-2"))
	if resp.StatusCode != 200 || !strings.Contains(body, `"toolCallId":"look-run-2"`) || strings.Contains(body, "aguard.approval_required") {
		t.Errorf("the admin's run: %d\n%s", resp.StatusCode, body)
	}
	if _, authz := agent.seen(); len(authz) != 2 || authz[0] != "Bearer "+viewer || authz[1] != "Bearer "+admin {
		t.Errorf("the agent got Authorization %q, want the consumers' headers unchanged", authz)
	}
	for run, who := range map[string]string{"run-1": "alice@example.com", "run-2": "root"} {
		thread := map[string]string{"run-1": "thread-x", "run-2": "thread-root"}[run]
		c, err := store.GetCall(ctx, state.Ref{ThreadID: thread, ID: "pay-" + run})
		if err != nil {
			t.Fatal(err)
		}
		if c.RequestedBy != who || c.PolicyRevision == "" || c.DecisionID == "" {
			t.Errorf("%s's call: requestedBy %q, policyRevision %q, decisionId %q", run, c.RequestedBy, c.PolicyRevision, c.DecisionID)
		}
	}
	held, err := store.ListCalls(ctx, state.Filter{RequestedBy: "alice@example.com", Status: state.StatusRequiresConfirmation})
	if err != nil || len(held) != 1 || held[0].DecisionReason != "alice@example.com is not an admin" {
		t.Errorf("alice's held calls: %+v, %v", held, err)
	}

	// A refusal after authentication names who was refused: alice's next
	// run leaves her held call unanswered (409).
	resp, body = authPost(t, h, "POST", "Bearer "+viewer, threadInput("run-3", "", ""))
	if resp.StatusCode != 409 {
		t.Fatalf("a run leaving a held call unanswered: %d %s", resp.StatusCode, body)
	}
	found := false
	for _, a := range auditLines(t, logs) {
		found = found || (a["status"] == float64(409) && a["subject"] == "alice@example.com" && a["code"] == "unanswered_tool_calls")
	}
	if !found {
		t.Errorf("no audit line names alice for the 409:\n%s", logs.String())
	}

	// The provider rotates to a new key while aguard runs.
	rotated := jwttest.EC(t, "ec-2")
	idp.Publish(t, rotated)
	fresh := rotated.Sign(t, jwttest.Claims{Subject: "root", Extra: map[string]any{"role": "admin"}})
	if resp, body := authPost(t, h, "POST", "Bearer "+fresh, identityInput("thread-root-4", "run-4")); resp.StatusCode != 200 {
		t.Errorf("a token of the rotated key: %d %s", resp.StatusCode, body)
	}
	if resp, body := authPost(t, h, "POST", "Bearer "+admin, identityInput("thread-root-5", "run-5")); resp.StatusCode != 401 {
		t.Errorf("a token of a key the provider dropped: %d %s", resp.StatusCode, body)
	}
}

// TestATrustedIngressHeaderNamesTheCaller runs aguard with --auth-header:
// the subject comes from the header the ingress sets; a request without it,
// or with it twice (the client's came through), is refused.
func TestATrustedIngressHeaderNamesTheCaller(t *testing.T) {
	store := openStore(t, "")
	agent := &headerAgent{}
	h := newHarness(t, agent.ServeHTTP, func(o *Options) {
		o.Auth, o.State = auth.Header{Name: "X-Authenticated-User"}, store
	})
	post := func(users ...string) int {
		req, _ := http.NewRequest("POST", h.url+"/agent", strings.NewReader(threadInput("run-1", "", "")))
		for _, u := range users {
			req.Header.Add("X-Authenticated-User", u)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post(); got != 401 {
		t.Errorf("without the header: %d, want 401", got)
	}
	if got := post("admin", "alice"); got != 401 {
		t.Errorf("with the header twice: %d, want 401", got)
	}
	if calls, _ := agent.seen(); calls != 0 {
		t.Fatalf("%d refused requests reached the agent", calls)
	}
	if got := post("alice"); got != 200 {
		t.Fatalf("with the header: %d", got)
	}
	c, err := store.GetCall(context.Background(), state.Ref{ThreadID: "thread-x", ID: "pay-run-1"})
	if err != nil || c.RequestedBy != "alice" {
		t.Errorf("the call's requester: %+v, %v", c, err)
	}
}

// TestEveryRefusedRequestIsAudited sends, over raw sockets, one request for
// each kind of refusal a consumer can get before its run reaches the
// agent, behind --auth-header: each writes exactly one audit line with its
// status, code, the subject once authenticated ("" before), the remote
// address and the path without its query, and nothing of it reaches the
// agent.
func TestEveryRefusedRequestIsAudited(t *testing.T) {
	logs := &syncbuf.Buffer{}
	agent := &headerAgent{}
	h := newHarness(t, agent.ServeHTTP, func(o *Options) {
		o.Auth, o.MaxBody = auth.Header{Name: "X-User"}, 1024
		o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	addr := strings.TrimPrefix(h.url, "http://")
	send := func(raw string) int {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("reading the answer to %.40q: %v", raw, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	req := func(method, target, user, body string) string {
		r := method + " " + target + " HTTP/1.1\r\nHost: aguard\r\nContent-Type: application/json\r\nConnection: close\r\n"
		if user != "" {
			r += "X-User: " + user + "\r\n"
		}
		return r + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)) + body
	}
	for _, tt := range []struct {
		name, raw             string
		status                int
		code, subject, method string
	}{
		{"no identity", req("POST", "/agent?api_key=s3cret", "", runInput("t", "r")), 401, "unauthenticated", "", "POST"},
		{"not a RunAgentInput", req("POST", "/agent?api_key=s3cret", "alice", `{"threadId":1}`), 400, "invalid_run_input", "alice", "POST"},
		{"a dot-dot path", req("POST", "/a/%2e%2e/agent?api_key=s3cret", "alice", runInput("t", "r")), 400, "invalid_path", "alice", "POST"},
		// Refused on its Content-Length, before its body is read: none is
		// sent, so that aguard closes a connection with nothing unread.
		{"a body past --max-body", strings.TrimSuffix(req("POST", "/agent?api_key=s3cret", "alice", ""), "Content-Length: 0\r\n\r\n") + "Content-Length: 4096\r\n\r\n", 413, "too_large", "", "POST"},
		{"headers past their limit", "POST /agent?api_key=s3cret HTTP/1.1\r\nHost: aguard\r\nX-Pad: " + strings.Repeat("x", maxHeaderBytes) + "\r\n\r\n", 431, "headers_too_large", "", ""}, // the request line went unread
		{"a folded header", "POST /agent?api_key=s3cret HTTP/1.1\r\nHost: aguard\r\nX-User: alice\r\n bob\r\nContent-Length: 0\r\n\r\n", 400, "bad_request", "", "POST"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := len(auditLines(t, logs))
			if got := send(tt.raw); got != tt.status {
				t.Fatalf("status %d, want %d", got, tt.status)
			}
			lines := auditLines(t, logs)
			if len(lines) != before+1 {
				t.Fatalf("%d audit lines for one refusal:\n%s", len(lines)-before, logs.String())
			}
			a := lines[before]
			if a["action"] != "refuse" || a["status"] != float64(tt.status) || a["code"] != tt.code || a["subject"] != tt.subject ||
				!strings.HasPrefix(fmt.Sprint(a["remoteAddr"]), "127.0.0.1:") || a["method"] != tt.method || a["message"] == "" {
				t.Errorf("audit line %v; want refuse %d %s subject %q", a, tt.status, tt.code, tt.subject)
			}
			if p := fmt.Sprint(a["path"]); strings.Contains(p, "?") || strings.Contains(p, "s3cret") {
				t.Errorf("the audit line's path %q carries the query", p)
			}
		})
	}
	if strings.Contains(logs.String(), "s3cret") {
		t.Errorf("the query reached the log:\n%s", logs.String())
	}
	if calls, _ := agent.seen(); calls != 0 {
		t.Errorf("%d refused requests reached the agent", calls)
	}
}

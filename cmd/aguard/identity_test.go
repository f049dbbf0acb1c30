package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/jwttest"
)

// TestServeAuthenticatesConsumersAndReviewers runs the real binary with
// --auth-jwks (a key set an identity provider in the test serves over
// HTTP), --auth-issuer, --auth-audience and --admin-tokens: a run without a
// token is refused 401 and audited, one with a token goes through with its
// requester recorded; a viewer may list the call but not approve it, a
// reviewer approves it in their own name. Then the provider rotates its
// key while aguard runs, and bad tokens of every kind are refused.
func TestServeAuthenticatesConsumersAndReviewers(t *testing.T) {
	bin := buildAguard(t)
	key := jwttest.EC(t, "k1")
	idp := jwttest.Serve(t, key)
	var gets atomic.Int64 // requests other than runs that reached the agent
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Method == http.MethodGet {
			gets.Add(1)
			io.WriteString(w, "agent info")
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range []string{
			`{"type":"RUN_STARTED","threadId":"t-id","runId":"run-1"}`,
			`{"type":"TOOL_CALL_START","toolCallId":"call-1","toolCallName":"confirm_order"}`,
			`{"type":"TOOL_CALL_ARGS","toolCallId":"call-1","delta":"{}"}`,
			`{"type":"TOOL_CALL_END","toolCallId":"call-1"}`,
			`{"type":"RUN_FINISHED","threadId":"t-id","runId":"run-1"}`,
		} {
			io.WriteString(w, "data: "+e+"\n\n")
		}
	}))
	defer agent.Close()
	dir := t.TempDir()
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	tokens := filepath.Join(dir, "admin-tokens.yaml")
	os.WriteFile(tokens, []byte(fmt.Sprintf("- {name: alice, tokenSha256: %s, role: reviewer}\n- {name: victor, tokenSha256: %s, role: viewer}\n",
		sum("alice-secret"), sum("victor-secret"))), 0o600)
	policyDir := filepath.Join(dir, "policy")
	os.Mkdir(policyDir, 0o700)
	os.WriteFile(filepath.Join(policyDir, "policy.rego"), []byte(`package aguard
default decision := {"action": "allow"}
decision := {"action": "require_approval", "reason": sprintf("%s asks to confirm", [input.identity.subject])} if {
	input.phase == "tool_call_end"
}
`), 0o600)
	a := startAguard(t, bin, "--upstream", agent.URL, "--policy", policyDir, "--admin-tokens", tokens,
		"--auth-jwks", idp.URL, "--auth-issuer", jwttest.Issuer, "--auth-audience", jwttest.Audience)
	await.For(t, "/readyz is ready", func() bool { code, _ := get(t, "http://"+a.admin+"/readyz"); return code == 200 })

	do := func(method, url, authz, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	input := `{"threadId":"t-id","runId":"run-1","protocolVersion":"1.0","messages":[],"tools":[{"name":"confirm_order","parameters":{"type":"object"}}]}`
	if code, body := do("POST", "http://"+a.listen+"/agent", "", input); code != 401 || !strings.Contains(body, "unauthenticated") {
		t.Fatalf("a run without a token: %d %s", code, body)
	}
	token := key.Sign(t, jwttest.Claims{Subject: "carol"})
	if code, body := do("POST", "http://"+a.listen+"/agent", "Bearer "+token, input); code != 200 || !strings.Contains(body, "carol asks to confirm") {
		t.Fatalf("a run with a token: %d %s", code, body)
	}
	approvals := "http://" + a.admin + "/v1/approvals?requestedBy=carol"
	if code, body := do("GET", approvals, "Bearer victor-secret", ""); code != 200 || !strings.Contains(body, `"requestedBy":"carol"`) || !strings.Contains(body, `"policyRevision"`) {
		t.Fatalf("the viewer lists carol's approvals: %d %s", code, body)
	}
	approve := "http://" + a.admin + "/v1/tool-calls/call-1/approve?threadId=t-id"
	if code, body := do("POST", approve, "Bearer victor-secret", `{}`); code != 403 || !strings.Contains(body, "forbidden") {
		t.Fatalf("the viewer approves: %d %s", code, body)
	}
	if code, body := do("POST", approve, "Bearer alice-secret", `{"approvedBy":"someone else"}`); code != 200 || !strings.Contains(body, `"approvedBy":"alice"`) {
		t.Fatalf("the reviewer approves: %d %s", code, body)
	}
	// The provider rotates its key while aguard runs: the new key's first
	// token is taken up at once (its key id fetches the set), the dropped
	// key's tokens are refused; so are expired tokens, other issuers' and
	// audiences', and a key of nobody's under the new key id.
	rotated := jwttest.RSA(t, "k2")
	idp.Publish(t, rotated)
	info := "http://" + a.listen + "/agent/info"
	if code, body := do("GET", info, "Bearer "+rotated.Sign(t, jwttest.Claims{Subject: "dave"}), ""); code != 200 || body != "agent info" {
		t.Fatalf("a token of the rotated-in key: %d %s", code, body)
	}
	for name, tok := range map[string]string{
		"the rotated-out key": token,
		"expired":             rotated.Sign(t, jwttest.Claims{Expires: time.Now().Add(-time.Minute)}),
		"another issuer":      rotated.Sign(t, jwttest.Claims{Issuer: "https://evil.example/"}),
		"another audience":    rotated.Sign(t, jwttest.Claims{Audience: "billing"}),
		"a key of nobody's":   jwttest.RSA(t, "k2").Sign(t, jwttest.Claims{}),
	} {
		req, _ := http.NewRequest("GET", info, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="invalid_token"`) {
			t.Errorf("a token of %s: %d, WWW-Authenticate %q; want 401 invalid_token", name, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
	}
	if n := gets.Load(); n != 1 {
		t.Errorf("%d requests reached the agent, want only the one with a valid token", n)
	}

	// An audit line for the run refused, the viewer's approve, the
	// reviewer's, and the five tokens refused.
	audits, deadline := 0, time.After(time.Minute)
	for audits < 3+5 {
		var line string
		var ok bool
		select {
		case line, ok = <-a.stderrLines:
		case <-deadline:
			t.Fatalf("%d audit lines in a minute, want 8", audits)
		}
		if !ok {
			t.Fatalf("the log ended after %d audit lines", audits)
		}
		if strings.Contains(line, "msg=audit") {
			audits++
		}
	}
}

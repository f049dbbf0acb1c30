package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/syncbuf"
	"github.com/aguard/aguard/state"
)

func sha(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// reviewersFile writes an --admin-tokens file and returns its path.
func reviewersFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "admin-tokens.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// reviewerServer serves the admin API on loopback for alice (reviewer),
// victor (viewer) and --admin-token "root-token", with the audit lines in
// the returned buffer.
func reviewerServer(t *testing.T, store *state.Store, notes state.Notifier) (*httptest.Server, *syncbuf.Buffer) {
	t.Helper()
	path := reviewersFile(t, fmt.Sprintf(`
- name: alice
  tokenSha256: %s
  role: reviewer
- name: victor
  tokenSha256: %s
  role: viewer
`, sha("alice-token"), strings.ToUpper(sha("victor-token"))))
	list, err := ReadReviewers(path)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := NewReviewers(list, "root-token")
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	srv := httptest.NewServer(Handler(Options{Reviewers: rs, Logger: log,
		API: API(APIOptions{Store: store, Notifier: notes, Logger: log})}))
	t.Cleanup(srv.Close)
	return srv, logs
}

func do(t *testing.T, srv *httptest.Server, token, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// audits decodes the audit lines.
func audits(t *testing.T, logs *syncbuf.Buffer) []map[string]any {
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

// TestReviewersAndViewers pins --admin-tokens: each token names a
// reviewer; a viewer reads everything and may not decide (403 forbidden,
// the call untouched); a reviewer's decision records their name whatever
// the body says; --admin-token is the reviewer "admin"; every decision and
// every refused attempt leaves an audit line naming the actor.
func TestReviewersAndViewers(t *testing.T) {
	store := newStore(t, "")
	seed(t, store, time.Now())
	notes := &recorder{}
	srv, logs := reviewerServer(t, store, notes)

	for token, want := range map[string]string{"alice-token": `{"name":"alice","role":"reviewer"}`,
		"victor-token": `{"name":"victor","role":"viewer"}`, "root-token": `{"name":"admin","role":"reviewer"}`} {
		if status, body := do(t, srv, token, "GET", "/v1/whoami", ""); status != 200 || strings.TrimSpace(body) != want {
			t.Errorf("whoami with %s: %d %s, want %s", token, status, body, want)
		}
	}
	if status, body := do(t, srv, "victor-token", "GET", "/v1/approvals", ""); status != 200 || !strings.Contains(body, `"pay-1"`) {
		t.Errorf("a viewer lists approvals: %d %s", status, body)
	}
	for _, action := range []string{"approve", "reject"} {
		status, body := do(t, srv, "victor-token", "POST", "/v1/tool-calls/pay-1/"+action+"?threadId=t1", `{}`)
		if status != 403 || !strings.Contains(body, `"code":"forbidden"`) {
			t.Errorf("a viewer's %s: %d %s, want 403 forbidden", action, status, body)
		}
	}
	if status, _ := do(t, srv, "nobody-token", "POST", "/v1/tool-calls/pay-1/approve", `{}`); status != 401 {
		t.Errorf("an unknown token's approve: %d, want 401", status)
	}
	if c, _ := store.GetCall(context.Background(), state.Ref{ThreadID: "t1", ID: "pay-1"}); c.Status != state.StatusRequiresConfirmation || c.Approved != nil {
		t.Fatalf("refused decisions changed the call: %+v", c)
	}

	status, body := do(t, srv, "alice-token", "POST", "/v1/tool-calls/pay-1/approve", `{"approvedBy":"mallory","reason":"looks right"}`)
	if status != 200 || !strings.Contains(body, `"approvedBy":"alice"`) {
		t.Fatalf("alice's approval: %d %s", status, body)
	}
	if status, body := do(t, srv, "root-token", "POST", "/v1/tool-calls/pay-old/reject", `{}`); status != 409 || !strings.Contains(body, "approval_expired") {
		t.Errorf("admin's rejection of an expired call: %d %s", status, body)
	}

	type line struct{ actor, action, id, result string }
	var got []line
	for _, a := range audits(t, logs) {
		s := func(k string) string { v, _ := a[k].(string); return v }
		got = append(got, line{s("actor"), s("action"), s("toolCallId"), s("result")})
	}
	want := []line{
		{"victor", "approve", "pay-1", "forbidden"},
		{"victor", "reject", "pay-1", "forbidden"},
		{"", "approve", "pay-1", "unauthorized"},
		{"alice", "approve", "pay-1", "ok"},
		{"admin", "reject", "pay-old", "approval_expired"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("audit lines\n%v\nwant\n%v\n%s", got, want, logs.String())
	}
	for _, a := range audits(t, logs) {
		if a["result"] == "ok" && (a["threadId"] != "t1" || a["reason"] != "looks right") {
			t.Errorf("the approval's audit line: %v", a)
		}
	}
	if strings.Join(notes.events, ",") != "approved:pay-1,ended:pay-old" {
		t.Errorf("notifications: %v", notes.events)
	}
}

// TestAnApprovalForOtherArgumentsIsRefused pins argumentsDigest: an
// approval that names a digest other than the call's gets 409
// arguments_changed with the call's digest and leaves the call held; with
// the call's digest it approves.
func TestAnApprovalForOtherArgumentsIsRefused(t *testing.T) {
	store := newStore(t, "")
	seed(t, store, time.Now())
	srv, logs := reviewerServer(t, store, nil)
	c, err := store.GetCall(context.Background(), state.Ref{ThreadID: "t1", ID: "pay-1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.ArgumentsDigest != sha(`{"amount":5}`) {
		t.Fatalf("argumentsDigest %q, want the SHA-256 of the arguments", c.ArgumentsDigest)
	}
	seen := sha(`{"amount":500}`)
	status, body := do(t, srv, "alice-token", "POST", "/v1/tool-calls/pay-1/approve?threadId=t1", `{"argumentsDigest":"`+seen+`"}`)
	var e struct {
		Error struct{ Code, ArgumentsDigest string }
	}
	json.Unmarshal([]byte(body), &e)
	if status != 409 || e.Error.Code != "arguments_changed" || e.Error.ArgumentsDigest != c.ArgumentsDigest {
		t.Fatalf("approving other arguments: %d %s", status, body)
	}
	if got, _ := store.GetCall(context.Background(), state.Ref{ThreadID: "t1", ID: "pay-1"}); got.Status != state.StatusRequiresConfirmation || got.Approved != nil {
		t.Fatalf("the refused approval changed the call: %+v", got)
	}
	status, body = do(t, srv, "alice-token", "POST", "/v1/tool-calls/pay-1/approve?threadId=t1", `{"argumentsDigest":"`+c.ArgumentsDigest+`"}`)
	if status != 200 || !strings.Contains(body, `"status":"TOOL_EXECUTION_STATUS_EXECUTING"`) {
		t.Fatalf("approving the call's arguments: %d %s", status, body)
	}
	results := ""
	for _, a := range audits(t, logs) {
		results += fmt.Sprint(a["result"], " ")
	}
	if results != "arguments_changed ok " {
		t.Errorf("audit results %q", results)
	}
}

// TestAReviewersFileIsChecked pins the --admin-tokens file's checks: each
// mistake is an error naming the entry and what is wrong.
func TestAReviewersFileIsChecked(t *testing.T) {
	good := sha("t1")
	for _, tt := range []struct {
		name, file, token, want string
	}{
		{"not a list", "name: alice\n", "", "want a list"},
		{"unknown key", "- name: alice\n  tokenSha256: " + good + "\n  role: reviewer\n  token: t1\n", "", "token"},
		{"bad digest", "- name: alice\n  tokenSha256: abc\n  role: reviewer\n", "", "64 hex digits"},
		{"bad role", "- name: alice\n  tokenSha256: " + good + "\n  role: admin\n", "", `role "admin"`},
		{"no name", "- tokenSha256: " + good + "\n  role: viewer\n", "", "name"},
		{"name twice", "- {name: a, tokenSha256: " + good + ", role: viewer}\n- {name: a, tokenSha256: " + sha("t2") + ", role: viewer}\n", "", "given twice"},
		{"token twice", "- {name: a, tokenSha256: " + good + ", role: viewer}\n- {name: b, tokenSha256: " + good + ", role: viewer}\n", "", "same token as a"},
		{"empty token", "- {name: a, tokenSha256: " + sha("") + ", role: viewer}\n", "", "empty token"},
		{"admin named twice", "- {name: admin, tokenSha256: " + good + ", role: viewer}\n", "root", "given twice"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			list, err := ReadReviewers(reviewersFile(t, tt.file))
			if err == nil {
				_, err = NewReviewers(list, tt.token)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one naming %q", err, tt.want)
			}
		})
	}
	if _, err := ReadReviewers(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("a missing file read without error")
	}
	// An empty bearer token is nobody, even with an empty-named header.
	rs, _ := NewReviewers(nil, "root")
	if rs.authenticate("") != nil || rs.authenticate("root") == nil || rs.authenticate("roo") != nil {
		t.Error("authenticate does not tell tokens apart")
	}
}

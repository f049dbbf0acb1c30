package admin_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/aguard/aguard/admin"
	"github.com/aguard/aguard/state"
)

// The page's security headers, which every response under /ui/ carries.
var uiHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
	"X-Content-Type-Options":  "nosniff",
	"Referrer-Policy":         "no-referrer",
	"Cache-Control":           "no-store",
}

// uiReviewers are the page's reviewers: "Alice Reviewer" with token "tok"
// may decide, "victor" with "view-tok" may only look.
func uiReviewers(t *testing.T) *admin.Reviewers {
	t.Helper()
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	rs, err := admin.NewReviewers([]admin.Reviewer{
		{Name: "Alice Reviewer", TokenSHA256: sum("tok"), Role: admin.RoleReviewer},
		{Name: "victor", TokenSHA256: sum("view-tok"), Role: admin.RoleViewer},
	}, "")
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// posted records the bodies of the POSTs that reach the admin API.
type posted struct {
	mu     sync.Mutex
	bodies []string
}

func (p *posted) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.bodies...)
}

// uiServer starts the admin listener on loopback with an in-process ledger
// (no Redis) seeded with calls; it records the bodies the page POSTs.
func uiServer(t *testing.T, calls ...*state.ToolCall) (*httptest.Server, *state.Store) {
	srv, store, _ := uiServerPosts(t, calls...)
	return srv, store
}

func uiServerPosts(t *testing.T, calls ...*state.ToolCall) (*httptest.Server, *state.Store, *posted) {
	t.Helper()
	store, err := state.Open(context.Background(), state.Options{})
	if err != nil {
		t.Fatalf("opening the in-process ledger: %v", err)
	}
	t.Cleanup(func() { store.Close() })
	for _, c := range calls {
		if err := store.PutCall(context.Background(), c); err != nil {
			t.Fatalf("seeding call %q: %v", c.ID, err)
		}
	}
	h := admin.Handler(admin.Options{Reviewers: uiReviewers(t), API: admin.API(admin.APIOptions{Store: store})})
	rec := &posted{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			rec.mu.Lock()
			rec.bodies = append(rec.bodies, string(b))
			rec.mu.Unlock()
			r.Body = io.NopCloser(strings.NewReader(string(b)))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, store, rec
}

// TestApprovalsPageHeaders checks, without a browser, that the page and its
// assets are served without a token, with their content types and security
// headers, while the API they call still needs the token; and that the
// script never parses data as HTML.
func TestApprovalsPageHeaders(t *testing.T) {
	srv, _ := uiServer(t)
	get := func(method, path, token string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("reading %s %s: %v", method, path, err)
		}
		return resp, string(body)
	}
	checkHeaders := func(path string, resp *http.Response) {
		t.Helper()
		for name, want := range uiHeaders {
			if got := resp.Header.Get(name); got != want {
				t.Errorf("%s: %s is %q, want %q", path, name, got, want)
			}
		}
	}

	assets := map[string]struct{ contentType, contains string }{
		"/ui/approvals":     {"text/html; charset=utf-8", `<script src="approvals.js" defer></script>`},
		"/ui/approvals.js":  {"text/javascript; charset=utf-8", "textContent"},
		"/ui/approvals.css": {"text/css; charset=utf-8", ".calls"},
	}
	for path, want := range assets {
		resp, body := get("GET", path, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s without a token: status %d, want 200: %s", path, resp.StatusCode, body)
		}
		checkHeaders(path, resp)
		if got := resp.Header.Get("Content-Type"); got != want.contentType {
			t.Errorf("%s: Content-Type %q, want %q", path, got, want.contentType)
		}
		if !strings.Contains(body, want.contains) {
			t.Errorf("%s lacks %q", path, want.contains)
		}
		// Nothing is loaded from elsewhere: no CDN, no external resources.
		for _, bad := range []string{"http://", "https://", "//cdn"} {
			if strings.Contains(body, bad) {
				t.Errorf("%s refers to %q: the page must load nothing from elsewhere", path, bad)
			}
		}
		if resp, body := get("HEAD", path, ""); resp.StatusCode != http.StatusOK || body != "" {
			t.Errorf("HEAD %s: status %d, body %q; want 200 and no body", path, resp.StatusCode, body)
		}
	}

	// The script builds its DOM from text only.
	_, js := get("GET", "/ui/approvals.js", "")
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "localStorage.setItem(TOKEN_KEY"} {
		if strings.Contains(js, bad) {
			t.Errorf("approvals.js uses %q: data must never be parsed as HTML or code, nor the token kept beyond the session", bad)
		}
	}

	resp, _ := get("GET", "/ui/nothing", "")
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /ui/nothing: status %d, want 404", resp.StatusCode)
	}
	checkHeaders("/ui/nothing", resp)
	if resp, _ := get("POST", "/ui/approvals", ""); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui/approvals: status %d, want 405", resp.StatusCode)
	}

	if resp, body := get("GET", "/v1/approvals", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/approvals without a token: status %d, want 401: %s", resp.StatusCode, body)
	}
	if resp, body := get("GET", "/v1/approvals", "tok"); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"toolCalls":[]`) {
		t.Errorf("GET /v1/approvals with the token: status %d, body %s; want 200 and an empty list", resp.StatusCode, body)
	}
}

// Hostile model output the page must show as text and never run.
const (
	hostileName   = `<img src=x onerror="window.pwned=2">wipe_disk`
	hostileID     = `call-"><svg onload=alert(3)>`
	hostileThread = `<iframe src="javascript:alert(4)"></iframe>`
	hostileNote   = `<img src=x onerror=alert(1)><script>window.pwned=1</script>`
)

// TestApprovalsPageInChromium drives the approvals page in headless Chromium:
// it signs in with a reviewer's token; checks that each call shows who asked
// for it, the policy's reason, and its arguments with their digest, and that
// hostile names, ids and arguments show as text and run nothing; approves
// one call only once the reviewer confirms (cancelling first leaves it
// held), with the digest of the arguments shown; rejects another; checks
// the ledger and the page agree; and shows a viewer's token that it may not
// decide.
func TestApprovalsPageInChromium(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not on PATH (%v): this test needs it; scripts/test.sh, the test command, installs it (apt-get install chromium)", err)
	}

	now := time.Now()
	soon, later, latest := now.Add(20*time.Minute), now.Add(time.Hour), now.Add(2*time.Hour)
	const safeID = "call-transfer-1"
	srv, store, posts := uiServerPosts(t,
		&state.ToolCall{ID: safeID, Name: "transfer_funds", Status: state.StatusRequiresConfirmation,
			IsClientTool: true, ThreadID: "thread-a", RunID: "run-1", RequiresApprovalAt: &soon, CreatedAt: now,
			Description: "Moves money between accounts.", RequestedBy: "carol@example.com",
			DecisionReason: "transfers over 100 EUR need a reviewer", PolicyRevision: "payments-v7", DecisionID: "dec-1",
			ArgumentsJSON: json.RawMessage(`{"amount":125.5,"currency":"EUR","to":{"iban":"DE89370400440532013000","name":"ACME"}}`)},
		&state.ToolCall{ID: hostileID, Name: hostileName, Status: state.StatusRequiresConfirmation,
			IsClientTool: true, ThreadID: hostileThread, RunID: "run-2", RequiresApprovalAt: &later, CreatedAt: now,
			RequestedBy: hostileNote, DecisionReason: hostileName,
			ArgumentsJSON: json.RawMessage(`{"note":` + jsonString(t, hostileNote) + `,"path":"/"}`)},
		// Another thread's call with the same id: another call, another row.
		&state.ToolCall{ID: safeID, Name: "transfer_funds", Status: state.StatusRequiresConfirmation,
			IsClientTool: true, ThreadID: "thread-b", RunID: "run-3", RequiresApprovalAt: &latest, CreatedAt: now,
			ArgumentsJSON: json.RawMessage(`{"amount":1}`)},
	)

	// One budget for the whole browser session; cancelling the allocator
	// context stops Chromium and waits for it to exit.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox, // the tests run as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1000, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()

	// Any dialog means a script from the data ran; any uncaught exception or
	// security error (say, a CSP violation) means the page misbehaved.
	err = chromedp.Listen(browser, func(ev any) {
		switch ev := ev.(type) {
		case *page.EventJavascriptDialogOpening:
			t.Errorf("the page opened a JavaScript %s dialog %q: a script from the data ran", ev.Type, ev.Message)
			go chromedp.Call(browser, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			t.Errorf("uncaught exception in the page: %s", msg)
		case *log.EventEntryAdded:
			if e := ev.Entry; e.Level == log.EntryLevelError && e.Source != log.EntrySourceNetwork {
				t.Errorf("the page logged a %s error: %s", e.Source, e.Text)
			}
		}
	})
	if err != nil {
		t.Fatalf("starting Chromium (%s): %v", chromium, err)
	}

	do := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(browser, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// waitFor polls a JavaScript condition until it holds.
	waitFor := func(what, cond string) {
		t.Helper()
		if _, err := chromedp.Run(browser, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
			t.Fatalf("waiting until %s (%s): %v", what, cond, err)
		}
	}
	eval := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(browser, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("evaluating %s: %v", expr, err)
		}
		return v
	}
	const row1, row2 = "#calls > li:nth-child(1)", "#calls > li:nth-child(2)"
	const reviewer = "Alice Reviewer"
	safe, err := store.GetCall(context.Background(), state.Ref{ThreadID: "thread-a", ID: safeID})
	if err != nil || safe.ArgumentsDigest == "" {
		t.Fatalf("the seeded call: %+v, %v", safe, err)
	}
	held := func(thread, id string) bool {
		t.Helper()
		c, err := store.GetCall(context.Background(), state.Ref{ThreadID: thread, ID: id})
		return err == nil && c.Status == state.StatusRequiresConfirmation && c.Approved == nil
	}

	do("opening the page and entering the token",
		chromedp.Navigate(srv.URL+"/ui/approvals"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), "tok"),
		chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)),
	)
	waitFor("the three calls are listed", `document.querySelectorAll("#calls > li").length === 3`)
	if got := eval(`document.getElementById("whoami").innerText`); got != "Signed in as "+reviewer+" (reviewer)" {
		t.Errorf("the page says %q about who is signed in", got)
	}

	if got := eval(`location.href`); strings.Contains(got, "tok") {
		t.Errorf("the token leaked into the URL: %s", got)
	}
	if got := eval(`sessionStorage.getItem("aguard.adminToken")`); got != "tok" {
		t.Errorf("sessionStorage holds token %q, want %q", got, "tok")
	}

	// The rows come in deadline order: the safe call first, then the hostile.
	first := eval(`document.querySelector("` + row1 + `").innerText`)
	for _, want := range []string{"transfer_funds", safeID, "thread-a", `"currency": "EUR"`, "Moves money between accounts.", "in 19m",
		"Requested by", "carol@example.com", "transfers over 100 EUR need a reviewer", "payments-v7", "SHA-256 " + safe.ArgumentsDigest} {
		if !strings.Contains(first, want) {
			t.Errorf("the first row lacks %q:\n%s", want, first)
		}
	}
	second := eval(`document.querySelector("` + row2 + `").innerText`)
	for _, want := range []string{hostileName, hostileID, hostileThread, `"note": ` + jsonString(t, hostileNote)} {
		if !strings.Contains(second, want) {
			t.Errorf("the second row does not show %q literally:\n%s", want, second)
		}
	}
	if n := eval(`String(document.querySelectorAll("#calls img, #calls script, #calls svg, #calls iframe").length)`); n != "0" {
		t.Errorf("the data became %s elements in the page", n)
	}
	if got := eval(`typeof window.pwned`); got != "undefined" {
		t.Fatalf("a script from the data ran: window.pwned is %s", got)
	}

	// Approving asks first; cancelling leaves the call held.
	do("asking to approve the first call", chromedp.Click(chromedp.CSS(row1+" button.approve")))
	waitFor("the confirmation shows", `!document.querySelector("`+row1+` .confirm").hidden`)
	question := eval(`document.querySelector("` + row1 + ` .confirm-text").innerText`)
	for _, want := range []string{"Approve transfer_funds", "carol@example.com", safe.ArgumentsDigest[:12]} {
		if !strings.Contains(question, want) {
			t.Errorf("the confirmation %q does not say %q", question, want)
		}
	}
	if !held("thread-a", safeID) || len(posts.all()) != 0 {
		t.Fatalf("asking to approve decided already (posts %q)", posts.all())
	}
	do("cancelling", chromedp.Click(chromedp.CSS(row1+" button.confirm-no")))
	waitFor("the confirmation hides", `document.querySelector("`+row1+` .confirm").hidden`)
	if !held("thread-a", safeID) || len(posts.all()) != 0 {
		t.Fatalf("a cancelled approval decided (posts %q)", posts.all())
	}
	do("approving the first call, confirmed",
		chromedp.Click(chromedp.CSS(row1+" button.approve")),
		chromedp.WaitVisible(chromedp.CSS(row1+" button.confirm-yes")),
		chromedp.Click(chromedp.CSS(row1+" button.confirm-yes")),
	)
	waitFor("the first row shows it approved", `document.querySelector("`+row1+`").dataset.state === "approved"`)
	if got := posts.all(); len(got) != 1 || !strings.Contains(got[0], `"argumentsDigest":"`+safe.ArgumentsDigest+`"`) {
		t.Errorf("the approval posted %q, want the digest of the arguments shown", got)
	}

	shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100) /* PNG */)
	if err != nil {
		t.Fatalf("taking a screenshot: %v", err)
	}
	shotPath := os.Getenv("AGUARD_UI_SCREENSHOT") // to look at it after the test
	if shotPath == "" {
		shotPath = filepath.Join(t.TempDir(), "approvals.png")
	}
	if err := os.WriteFile(shotPath, shot, 0o644); err != nil {
		t.Fatalf("writing the screenshot: %v", err)
	}
	t.Logf("screenshot: %s", shotPath)

	do("rejecting the second call",
		chromedp.SendKeys(chromedp.CSS(row2+" input.reason"), "not on my watch"),
		chromedp.Click(chromedp.CSS(row2+" button.reject")),
		chromedp.WaitVisible(chromedp.CSS(row2+" button.confirm-yes")),
		chromedp.Click(chromedp.CSS(row2+" button.confirm-yes")),
	)
	waitFor("the second row shows it rejected", `document.querySelector("`+row2+`").dataset.state === "rejected"`)

	c, err := store.GetCall(context.Background(), state.Ref{ThreadID: "thread-a", ID: safeID})
	if err != nil {
		t.Fatalf("reading the approved call: %v", err)
	}
	if c.Status != state.StatusExecuting || c.ApprovedBy != reviewer || c.Approved == nil || !*c.Approved {
		t.Errorf("approved call: status %v, approvedBy %q, approved %v; want EXECUTING, %q, true", c.Status, c.ApprovedBy, c.Approved, reviewer)
	}
	c, err = store.GetCall(context.Background(), state.Ref{ThreadID: hostileThread, ID: hostileID})
	if err != nil {
		t.Fatalf("reading the rejected call: %v", err)
	}
	if c.Status != state.StatusCancelled || c.EndReason != "approval rejected" || c.ApprovedBy != reviewer || c.Approved == nil || *c.Approved {
		t.Errorf("rejected call: status %v, endReason %q, approvedBy %q, approved %v; want CANCELLED, \"approval rejected\", %q, false",
			c.Status, c.EndReason, c.ApprovedBy, c.Approved, reviewer)
	}

	for row, want := range map[string]string{row1: "Approved by " + reviewer, row2: "Rejected by " + reviewer} {
		if got := eval(`document.querySelector("` + row + ` .outcome").innerText`); !strings.Contains(got, want) {
			t.Errorf("%s shows %q, want %q", row, got, want)
		}
		if got := eval(`String(document.querySelector("` + row + ` button.approve").disabled)`); got != "true" {
			t.Errorf("%s: the Approve button of a decided call is still enabled", row)
		}
	}

	c, err = store.GetCall(context.Background(), state.Ref{ThreadID: "thread-b", ID: safeID})
	if err != nil || c.Status != state.StatusRequiresConfirmation {
		t.Errorf("the other thread's call with the same id: %+v, %v; want it still awaiting a decision", c, err)
	}

	do("refreshing", chromedp.Click(chromedp.ID("refresh")))
	waitFor("decided calls leave the list", `document.querySelectorAll("#calls > li").length === 1`)
	if got := eval(`document.querySelector("` + row1 + `").innerText`); !strings.Contains(got, "thread-b") {
		t.Errorf("the row left is not the other thread's call:\n%s", got)
	}
	// A viewer's token lists the call and cannot decide it.
	do("signing in as a viewer",
		chromedp.Click(chromedp.ID("forget")),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), "view-tok"),
		chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)),
	)
	waitFor("the viewer's list", `document.querySelectorAll("#calls > li").length === 1 && document.getElementById("whoami").innerText.includes("victor (viewer)")`)
	if got := eval(`String(document.querySelector("` + row1 + ` button.approve").disabled)`); got != "true" {
		t.Error("a viewer's Approve button is enabled")
	}
	if got := eval(`document.querySelector("` + row1 + ` .outcome").innerText`); !strings.Contains(got, "not decide") {
		t.Errorf("the viewer's row says %q", got)
	}
	do("signing in as the reviewer again",
		chromedp.Click(chromedp.ID("forget")),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), "tok"),
		chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)),
	)
	waitFor("the reviewer's list", `document.querySelectorAll("#calls > li").length === 1 && document.getElementById("whoami").innerText.includes("(reviewer)") && !document.querySelector("`+row1+` button.reject").disabled`)
	do("rejecting the other thread's call",
		chromedp.Click(chromedp.CSS(row1+" button.reject")),
		chromedp.WaitVisible(chromedp.CSS(row1+" button.confirm-yes")),
		chromedp.Click(chromedp.CSS(row1+" button.confirm-yes")),
	)
	waitFor("its row shows it rejected", `document.querySelector("`+row1+`").dataset.state === "rejected"`)
	do("refreshing", chromedp.Click(chromedp.ID("refresh")))
	waitFor("decided calls leave the list", `document.querySelectorAll("#calls > li").length === 0 && !document.getElementById("empty").hidden`)

	// A refused token asks for the token again.
	do("refreshing with a wrong token",
		chromedp.Evaluate[chromedp.Void](`sessionStorage.setItem("aguard.adminToken", "wrong")`),
		chromedp.Click(chromedp.ID("refresh")),
		chromedp.WaitVisible(chromedp.ID("token-form")),
	)
	if got := eval(`document.getElementById("token-message").innerText`); !strings.Contains(got, "refused the token") {
		t.Errorf("after a 401 the page says %q, want it to ask for the token again", got)
	}
	if got := eval(`String(sessionStorage.getItem("aguard.adminToken"))`); got != "null" {
		t.Errorf("after a 401 sessionStorage still holds token %q", got)
	}

	if got := eval(`typeof window.pwned`); got != "undefined" {
		t.Errorf("a script from the data ran: window.pwned is %s", got)
	}
}

// jsonString returns s as a JSON (and JavaScript) string literal, with <, >
// and & left as they are, as JSON.stringify writes them.
func jsonString(t *testing.T, s string) string {
	t.Helper()
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aguard/aguard/internal/await"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	opacompile "github.com/open-policy-agent/opa/v1/compile"
)

// writeTree writes name → content under a new temporary folder.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// opaBuild builds a bundle of files as `opa build -r revision --signing-key
// key --signing-alg RS256 .` does, with OPA's own packages.
func opaBuild(t *testing.T, files map[string]string, revision, signingKey string) []byte {
	t.Helper()
	var out bytes.Buffer
	c := opacompile.New().WithFS(os.DirFS(writeTree(t, files))).WithPaths(".").WithRevision(revision).WithOutput(&out)
	if signingKey != "" {
		c = c.WithBundleSigningConfig(bundle.NewSigningConfig(signingKey, "RS256", ""))
	}
	if err := c.Build(context.Background()); err != nil {
		t.Fatalf("opa build: %v", err)
	}
	return out.Bytes()
}

// opaServer speaks OPA's management APIs: bundles (GET with ETag), decision
// logs (POST /logs, gzipped JSON arrays) and status (POST /status).
type opaServer struct {
	*httptest.Server
	mu       sync.Mutex
	bundle   []byte
	logs     map[string]map[string]any // by decision_id
	revision string                    // active_revision of the last status report
}

func newOPAServer(t *testing.T) *opaServer {
	s := &opaServer{logs: map[string]map[string]any{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err == nil {
				body, err = io.ReadAll(zr)
			}
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		switch r.URL.Path {
		case "/bundles/aguard.tar.gz":
			if s.bundle == nil {
				http.NotFound(w, r)
				return
			}
			etag := fmt.Sprintf(`"%x"`, sha256.Sum256(s.bundle))
			if r.Header.Get("If-None-Match") == etag {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			w.Header().Set("ETag", etag)
			w.Write(s.bundle)
		case "/logs":
			var events []map[string]any
			if err := json.Unmarshal(body, &events); err != nil {
				t.Errorf("decision log batch: %v", err)
			}
			for _, ev := range events {
				s.logs[ev["decision_id"].(string)] = ev
			}
		case "/status":
			var st struct {
				Bundles map[string]struct {
					ActiveRevision string `json:"active_revision"`
				} `json:"bundles"`
			}
			json.Unmarshal(body, &st)
			if b, ok := st.Bundles["aguard"]; ok {
				s.revision = b.ActiveRevision
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *opaServer) set(b []byte) { s.mu.Lock(); s.bundle = b; s.mu.Unlock() }

func (s *opaServer) logged(id string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs[id]
}

func (s *opaServer) activeRevision() string { s.mu.Lock(); defer s.mu.Unlock(); return s.revision }

// TestServeRunsOPABundlesDecisionLogsAndStatus runs the real binary with an
// OPA configuration: not ready until the first (signed) bundle is active; a
// bundle swapped in mid-stream decides the stream's next call; every decision
// reaches the decision log under the decisionId the ledger records, masked
// by the bundle's data.system.log.mask, with the revision that made it.
func TestServeRunsOPABundlesDecisionLogsAndStatus(t *testing.T) {
	bin := buildAguard(t)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	private := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	pubDER, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	public := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}))
	srv := newOPAServer(t)

	release := make(chan struct{})
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		call := func(id string) {
			io.WriteString(w, `data: {"type":"TOOL_CALL_START","toolCallId":"`+id+`","toolCallName":"show_chart"}`+"\n\n")
			io.WriteString(w, `data: {"type":"TOOL_CALL_ARGS","toolCallId":"`+id+`","delta":"{\"kind\":\"secret-`+id+`\"}"}`+"\n\n")
			io.WriteString(w, `data: {"type":"TOOL_CALL_END","toolCallId":"`+id+`"}`+"\n\n")
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, `data: {"type":"RUN_STARTED","threadId":"t-opa","runId":"r-opa"}`+"\n\n")
		call("call-1")
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		call("call-2")
		io.WriteString(w, `data: {"type":"RUN_FINISHED","threadId":"t-opa","runId":"r-opa"}`+"\n\n")
	}))
	defer agent.Close()

	config := fmt.Sprintf(`services:
  mgmt:
    url: %s
keys:
  release:
    algorithm: RS256
    key: |
%s
bundles:
  aguard:
    service: mgmt
    resource: bundles/aguard.tar.gz
    signing:
      keyid: release
    polling: {min_delay_seconds: 1, max_delay_seconds: 1}
decision_logs:
  service: mgmt
  reporting: {min_delay_seconds: 1, max_delay_seconds: 1}
status:
  service: mgmt
`, srv.URL, "      "+strings.ReplaceAll(strings.TrimSpace(public), "\n", "\n      "))
	configFile := filepath.Join(t.TempDir(), "opa.yaml")
	os.WriteFile(configFile, []byte(config), 0o644)
	a := startAguard(t, bin, "--upstream", agent.URL, "--opa-config", configFile, "--admin-token", "tok")

	if code, body := get(t, "http://"+a.admin+"/readyz"); code != 503 || !strings.Contains(body, "bundle") {
		t.Fatalf("readyz before any bundle: %d %s", code, body)
	}
	policyOf := func(action, reason string) map[string]string {
		return map[string]string{
			"aguard/policy.rego":   "package aguard\n\ndecision := {\"action\": \"" + action + "\", \"reason\": \"" + reason + "\"}\n",
			"system/log/mask.rego": "package system.log\n\nmask contains \"/input/call/arguments\"\n\nmask contains \"/input/call/argumentsText\"\n",
		}
	}
	srv.set(opaBuild(t, policyOf("allow", "r1 allows"), "r1", private))
	await.For(t, "readiness", func() bool { code, _ := get(t, "http://"+a.admin+"/readyz"); return code == 200 })

	input := `{"threadId":"t-opa","runId":"r-opa","protocolVersion":"1.0","messages":[],"tools":[{"name":"show_chart","description":"chart","parameters":{"type":"object"}}]}`
	resp, err := http.Post("http://"+a.listen+"/agent", "application/json", strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended before call-1 was decided: %v", err)
		}
		if strings.Contains(line, `"TOOL_CALL_END"`) {
			break
		}
	}

	srv.set(opaBuild(t, policyOf("deny", "r2 denies"), "r2", private))
	await.For(t, "r2 to be reported active", func() bool { return srv.activeRevision() == "r2" })
	close(release)
	rest, _ := io.ReadAll(br)
	var denied struct {
		Value struct {
			ToolCallID, Reason, DecisionID string
		}
	}
	for _, line := range strings.Split(string(rest), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(data, "aguard.tool_call_denied") {
			json.Unmarshal([]byte(data), &denied)
		}
	}
	if denied.Value.ToolCallID != "call-2" || denied.Value.Reason != "r2 denies" {
		t.Fatalf("call-2 was not denied by r2; the rest of the stream:\n%s", rest)
	}

	_, b := adminDo(t, a.admin, "tok", "GET", "/v1/tool-calls/call-1", "")
	var rec struct{ DecisionID string }
	json.Unmarshal([]byte(b), &rec)
	if rec.DecisionID == "" {
		t.Fatal("the ledger has no decisionId for call-1")
	}

	for _, c := range []struct{ id, revision, action string }{{rec.DecisionID, "r1", "allow"}, {denied.Value.DecisionID, "r2", "deny"}} {
		await.For(t, "decision "+c.id+" in the decision log", func() bool { return srv.logged(c.id) != nil })
		ev := srv.logged(c.id)
		b, _ := json.Marshal(ev)
		if strings.Contains(string(b), "secret-") {
			t.Errorf("masked arguments reached the decision log: %s", b)
		}
		rev, _ := ev["bundles"].(map[string]any)["aguard"].(map[string]any)["revision"].(string)
		if action, _ := ev["result"].(map[string]any)["action"].(string); rev != c.revision || action != c.action {
			t.Errorf("decision log event %s", b)
		}
	}
}

// capabilitiesJSON writes OPA's capabilities for this version (every
// built-in, any host), as `opa capabilities --current` prints them.
func capabilitiesJSON(t *testing.T) string {
	t.Helper()
	b, _ := json.Marshal(ast.CapabilitiesForThisVersion())
	path := filepath.Join(t.TempDir(), "capabilities.json")
	os.WriteFile(path, b, 0o644)
	return path
}

// TestAPolicyCallingHTTPSendDoesNotLoadUnlessCapabilitiesAllowIt runs serve,
// policy test and replay on a policy that posts the arguments to a listener.
func TestAPolicyCallingHTTPSendDoesNotLoadUnlessCapabilitiesAllowIt(t *testing.T) {
	bin := buildAguard(t)
	var hits atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer target.Close()
	dir := writeTree(t, map[string]string{
		"policy.rego": "package aguard\n\ndecision := {\"action\": \"allow\", \"reason\": sprintf(\"%d\", [r.status_code])}\n\n" +
			"r := http.send({\"method\": \"POST\", \"url\": \"" + target.URL + "\", \"body\": input})\n",
		"policy_test.rego": "package aguard_test\n\ntest_allows if data.aguard.decision.action == \"allow\" with input as {}\n",
	})
	recording := writeTree(t, map[string]string{
		"input.json":   `{"threadId":"t","runId":"r","messages":[],"tools":[]}`,
		"upstream.sse": "data: {\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\"}\n\ndata: {\"type\":\"RUN_FINISHED\",\"threadId\":\"t\",\"runId\":\"r\"}\n\n",
	})
	commands := map[string][]string{
		"serve":       {"serve", "--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--policy", dir},
		"policy test": {"policy", "test", dir},
		"replay":      {"replay", "--input", filepath.Join(recording, "input.json"), "--policy", dir, filepath.Join(recording, "upstream.sse")},
	}
	for name, args := range commands {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Errorf("%s: exit %v, want 1\n%s", name, err, out)
		}
		if want := filepath.Join(dir, "policy.rego") + ":5: built-in function http.send is not allowed"; !strings.Contains(string(out), want) {
			t.Errorf("%s: output lacks %q:\n%s", name, want, out)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the listener received %d requests", n)
	}

	caps := capabilitiesJSON(t)
	if out, err := exec.Command(bin, "policy", "test", "--policy-capabilities", caps, dir).CombinedOutput(); err != nil {
		t.Errorf("policy test with capabilities: %v\n%s", err, out)
	}
	if hits.Load() == 0 {
		t.Error("the policy's test, allowed to, did not reach the listener")
	}
	a := startAguard(t, bin, "--upstream", "http://127.0.0.1:1", "--policy", dir, "--policy-capabilities", caps)
	if code, body := get(t, "http://"+a.admin+"/readyz"); code != 200 {
		t.Errorf("readyz with capabilities allowing http.send: %d %s", code, body)
	}
}

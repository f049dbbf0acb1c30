package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aguard/aguard/policy"
)

// uriAgent answers every request with JSON naming itself, the request-target
// it received and the headers it got.
func uriAgent(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"agent": name, "uri": r.RequestURI, "headers": r.Header})
	}
}

type agentSaw struct {
	Agent   string
	URI     string
	Headers http.Header
}

func decodeSaw(t *testing.T, body string) agentSaw {
	t.Helper()
	var s agentSaw
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("agent answer %q: %v", body, err)
	}
	return s
}

// TestPathForwardedAsReceived pins that the agent receives the request path
// byte for byte as the consumer sent it: percent-encoding is never encoded
// again, nor decoded.
func TestPathForwardedAsReceived(t *testing.T) {
	h := newHarness(t, uriAgent("default"))
	for _, target := range []string{
		"/caf%C3%A9/a%2Fb/x",
		"/agents/a?q=%2F&x=caf%C3%A9",
		"/a%20b/~user/x%25y",
		"//double//slashes/",
	} {
		rc := dialRaw(t, h.url)
		rc.post(t, target, runInput("t", "r"), "")
		resp, body := rc.response(t)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", target, resp.StatusCode, body)
		}
		if got := decodeSaw(t, body).URI; got != target {
			t.Errorf("the agent received %q, want %q", got, target)
		}
	}
}

// TestDotSegmentsRefused pins that a path with "." or ".." segments, plain or
// percent-encoded in any case, is refused with 400 invalid_path and reaches no
// agent: routing, the policy and the agent could each resolve it differently.
func TestDotSegmentsRefused(t *testing.T) {
	var calls atomic.Int32
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) { calls.Add(1) })
	for _, target := range []string{
		"/agents/strict/../../x",
		"/agents/./x",
		"/agents/..",
		"/agents/%2e%2e/x",
		"/agents/%2E%2E/x",
		"/agents/%2e/x",
		"/agents/.%2E/x",
		"/agents/x/..?q=1",
	} {
		rc := dialRaw(t, h.url)
		rc.post(t, target, runInput("t", "r"), "")
		resp, body := rc.response(t)
		if resp.StatusCode != 400 || !strings.Contains(body, `"code":"invalid_path"`) {
			t.Errorf("%s: got %d %s, want 400 invalid_path", target, resp.StatusCode, body)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("the agent was called %d times", n)
	}
	// Dots inside a segment are no dot segment.
	rc := dialRaw(t, h.url)
	rc.post(t, "/agents/v1.2/..x/.well-known", runInput("t", "r"), "")
	if resp, body := rc.response(t); resp.StatusCode != 200 {
		t.Fatalf("dots inside segments: %d %s", resp.StatusCode, body)
	}
}

// TestRoutePrefixesMatchWholeSegments pins route matching: a prefix matches
// itself and the paths below it, whole segments only, never a longer
// segment; and the path is read as an agent that decodes it would read it,
// so neither an encoded letter or slash nor a doubled slash dodges a route.
func TestRoutePrefixesMatchWholeSegments(t *testing.T) {
	strict := httptest.NewServer(uriAgent("strict"))
	t.Cleanup(strict.Close)
	h := newHarness(t, uriAgent("default"), func(o *Options) {
		o.Routes = []Route{{Path: "/agents/strict", Upstream: strict.URL}}
	})
	for target, want := range map[string]string{
		"/agents/strict":           "strict",
		"/agents/strict/":          "strict",
		"/agents/strict/run":       "strict",
		"/agents/strict?x=1":       "strict",
		"/agents/%73trict/run":     "strict",
		"/agents/strictXYZ":        "default",
		"/agents/strictXYZ/run":    "default",
		"/agents/stric":            "default",
		"/agents/strict%2Frun":     "strict",
		"/agents%2Fstrict":         "strict",
		"/agents//strict/run":      "strict",
		"/agents":                  "default",
		"/other/agents/strict/run": "default",
	} {
		rc := dialRaw(t, h.url)
		rc.post(t, target, runInput("t", "r"), "")
		resp, body := rc.response(t)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", target, resp.StatusCode, body)
		}
		if s := decodeSaw(t, body); s.Agent != want || s.URI != target {
			t.Errorf("%s: went to %s as %q, want %s as received", target, s.Agent, s.URI, want)
		}
	}
}

// TestPolicySeesWhatTheAgentGets pins that the path and the headers the
// policy reads are those the agent receives: a header named in Connection is
// removed before the policy sees it, and the path is the raw one.
func TestPolicySeesWhatTheAgentGets(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, `package aguard

default decision := {"action": "allow", "reason": "ok"}

decision := {"action": "deny", "reason": sprintf("path=%s secret=%s user=%s", [
	input.request.path,
	object.get(input.request.headers, "x-secret", "none"),
	object.get(input.request.headers, "x-user", "none"),
])} if input.call.name == "confirm_order"
`)
	engine, err := policy.New(context.Background(), policy.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	agentHeaders := make(chan http.Header, 1)
	runs := map[string][]string{"seen": callRun("seen", "confirm_order", `{"orderId":"A"}`, false)}
	agent := scriptedAgent(runs, nil)
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		agentHeaders <- r.Header.Clone()
		agent(w, r)
	}, func(o *Options) { o.Policy = engine })
	rc := dialRaw(t, h.url)
	rc.post(t, "/caf%C3%A9/run", confirmInput("seen"), "Connection: keep-alive, X-Secret\r\nX-Secret: s3cret\r\nX-User: alice\r\n")
	resp, body := rc.response(t)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	got := <-agentHeaders
	if got.Get("X-Secret") != "" || got.Get("X-User") != "alice" {
		t.Fatalf("the agent got X-Secret %q, X-User %q", got.Get("X-Secret"), got.Get("X-User"))
	}
	want := `path=/caf%C3%A9/run secret=none user=alice`
	if !strings.Contains(body, want) {
		t.Fatalf("the policy saw something else than the agent got; want a denial reading %q in:\n%s", want, body)
	}
}

// TestAmbiguousFramingRefused pins that requests whose headers a proxy and
// an agent could read differently are refused with 400 before anything is
// decided: a folded header line (obs-fold, RFC 9112 §5.2) and a body framed
// by both Content-Length and Transfer-Encoding (RFC 9112 §6.3).
func TestAmbiguousFramingRefused(t *testing.T) {
	var calls atomic.Int32
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) { calls.Add(1) })
	body := runInput("t", "r")
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	for name, req := range map[string]string{
		"obs-fold with a space": fmt.Sprintf("POST /agent HTTP/1.1\r\nHost: aguard\r\nX-User: alice\r\n bob\r\nContent-Length: %d\r\n\r\n%s", len(body), body),
		"obs-fold with a tab":   fmt.Sprintf("POST /agent HTTP/1.1\r\nHost: aguard\r\nX-User: alice\r\n\tbob\r\nContent-Length: %d\r\n\r\n%s", len(body), body),
		"Content-Length and Transfer-Encoding": fmt.Sprintf("POST /agent HTTP/1.1\r\nHost: aguard\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s",
			len(chunked), chunked),
		"Transfer-Encoding and Content-Length": fmt.Sprintf("POST /agent HTTP/1.1\r\nHost: aguard\r\nTransfer-Encoding: chunked\r\nContent-Length: %d\r\n\r\n%s",
			len(chunked), chunked),
	} {
		t.Run(name, func(t *testing.T) {
			rc := dialRaw(t, h.url)
			rc.send(t, req)
			resp, b := rc.response(t)
			if resp.StatusCode != 400 || !strings.Contains(b, `"code":"bad_request"`) {
				t.Fatalf("got %d %s", resp.StatusCode, b)
			}
		})
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("the agent was called %d times", n)
	}
}

package proxy

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/syncbuf"
)

type errorBody struct {
	Error struct{ Code, Message string }
}

func decodeError(t *testing.T, resp *http.Response) errorBody {
	t.Helper()
	var e errorBody
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("error body is not JSON: %v", err)
	}
	return e
}

// TestRequestRejectedBeforeAgent pins the request-side errors: nothing reaches
// the agent, and the consumer gets the documented status and code.
func TestRequestRejectedBeforeAgent(t *testing.T) {
	calls := 0
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) { calls++ },
		func(o *Options) { o.MaxBody = 1024 })
	tests := []struct {
		name, body string
		status     int
		code       string
	}{
		{"not JSON", `{"threadId":`, 400, "invalid_run_input"},
		{"missing messages", `{"threadId":"t","runId":"r"}`, 400, "invalid_run_input"},
		{"wrong type", `{"threadId":1,"runId":"r","messages":[]}`, 400, "invalid_run_input"},
		{"too large", `{"threadId":"t","runId":"r","messages":[],"state":"` + strings.Repeat("x", 2000) + `"}`, 413, "too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := h.post(t, context.Background(), "/agent", tt.body)
			defer resp.Body.Close()
			e := decodeError(t, resp)
			if resp.StatusCode != tt.status || e.Error.Code != tt.code || e.Error.Message == "" {
				t.Fatalf("got %d %+v, want %d %s with a message", resp.StatusCode, e, tt.status, tt.code)
			}
		})
	}
	if calls != 0 {
		t.Fatalf("the agent was called %d times", calls)
	}
}

// TestAgentHTTPErrorPassedThrough pins that an error the agent answers itself
// reaches the consumer unchanged, status, headers and body.
func TestAgentHTTPErrorPassedThrough(t *testing.T) {
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("X-Agent", "a1")
		w.WriteHeader(422)
		io.WriteString(w, `{"detail":"bad tools"}`)
	})
	resp := h.post(t, context.Background(), "/agent", runInput("t", "r"))
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 422 || string(b) != `{"detail":"bad tools"}` ||
		resp.Header.Get("Content-Type") != "application/problem+json" || resp.Header.Get("X-Agent") != "a1" {
		t.Fatalf("got %d %v %q", resp.StatusCode, resp.Header, b)
	}
}

// TestNonStreamAnswerPassedThrough pins that a 2xx answer that is not an
// event stream, and requests that are not runs, pass through untouched.
func TestNonStreamAnswerPassedThrough(t *testing.T) {
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"method":"`+r.Method+`","path":"`+r.URL.RequestURI()+`"}`)
	})
	resp := h.post(t, context.Background(), "/agent", runInput("t", "r"))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != `{"method":"POST","path":"/agent"}` {
		t.Fatalf("POST: got %d %q", resp.StatusCode, b)
	}
	resp, err := http.Get(h.url + "/info?x=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != `{"method":"GET","path":"/info?x=1"}` {
		t.Fatalf("GET: got %d %q", resp.StatusCode, b)
	}
}

// TestUpstreamUnavailable pins 502 for an agent that cannot be reached and 504
// for one that sends no headers in time.
func TestUpstreamUnavailable(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		addr := ln.Addr().String()
		ln.Close()
		h := newHarness(t, nil, func(o *Options) { o.Upstream = "http://" + addr })
		resp := h.post(t, context.Background(), "/agent", runInput("t", "r"))
		defer resp.Body.Close()
		if e := decodeError(t, resp); resp.StatusCode != 502 || e.Error.Code != "upstream_unavailable" {
			t.Fatalf("got %d %+v", resp.StatusCode, e)
		}
	})
	t.Run("no headers in time", func(t *testing.T) {
		release := make(chan struct{})
		h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}, func(o *Options) { o.UpstreamTimeout = 200 * time.Millisecond })
		defer close(release)
		resp := h.post(t, context.Background(), "/agent", runInput("t", "r"))
		defer resp.Body.Close()
		if e := decodeError(t, resp); resp.StatusCode != 504 || e.Error.Code != "upstream_unavailable" {
			t.Fatalf("got %d %+v", resp.StatusCode, e)
		}
	})
	t.Run("slow body after quick headers is not cut", func(t *testing.T) {
		h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, frame(`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`))
			w.(http.Flusher).Flush()
			time.Sleep(500 * time.Millisecond) // longer than the header timeout
			io.WriteString(w, frame(`{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`))
		}, func(o *Options) { o.UpstreamTimeout = 200 * time.Millisecond })
		resp := h.post(t, context.Background(), "/agent", runInput("t", "r"))
		defer resp.Body.Close()
		got := readAll(t, resp.Body)
		if len(got) != 2 || field(t, got[1], "type") != "RUN_FINISHED" {
			t.Fatalf("got %q", got)
		}
	})
}

// TestRequestForwarded pins what the agent receives: the body unchanged, end
// to end headers kept, hop-by-hop headers and any header carrying the admin
// token dropped (and the token never logged), SSE asked for.
func TestRequestForwarded(t *testing.T) {
	type seen struct {
		body   string
		header http.Header
		uri    string
	}
	got := make(chan seen, 1)
	logs := &syncbuf.Buffer{}
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{string(b), r.Header.Clone(), r.URL.RequestURI()}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, frame(`{"type":"RUN_ERROR","message":"x"}`))
	}, func(o *Options) {
		o.AdminToken = "admin-s3cret"
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	body := `{"threadId":"t","runId":"r","messages":[],"forwardedProps":{"z":1,"a":[true,null]},  "extra": "kept"}`
	req, _ := http.NewRequest("POST", h.url+"/agents/a?v=2", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/vnd.ag-ui.event+proto, text/event-stream")
	req.Header.Set("Authorization", "Bearer user-token")
	req.Header.Set("X-User", "alice")
	req.Header.Set("Connection", "keep-alive, X-Hop")
	req.Header.Set("X-Hop", "must-not-pass")
	req.Header.Set("Proxy-Authorization", "Basic x")
	req.Header.Set("X-Leaked", "Bearer admin-s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s := <-got
	if s.body != body {
		t.Errorf("body changed: %q", s.body)
	}
	if strings.Contains(logs.String(), "admin-s3cret") || !strings.Contains(logs.String(), "X-Leaked") {
		t.Errorf("logs: %s", logs.String())
	}
	if s.uri != "/agents/a?v=2" {
		t.Errorf("request URI %q", s.uri)
	}
	for name, want := range map[string]string{
		"Authorization": "Bearer user-token", "X-User": "alice", "Accept": "text/event-stream",
		"X-Hop": "", "Proxy-Authorization": "", "X-Forwarded-For": "127.0.0.1", "X-Leaked": "",
	} {
		if v := s.header.Get(name); v != want {
			t.Errorf("agent saw %s = %q, want %q", name, v, want)
		}
	}
}

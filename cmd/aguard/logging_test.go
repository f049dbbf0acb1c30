package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/redistest"
)

// jsonAguard is a running aguard logging JSON, with every stderr line kept.
type jsonAguard struct {
	cmd           *exec.Cmd
	listen, admin string
	mu            sync.Mutex
	lines         []string
	done          chan struct{} // closed when stderr is closed
}

func (a *jsonAguard) stderr() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.lines...)
}

// startJSONAguard runs aguard serve --log-format json and waits for its
// "aguard listening" line.
func startJSONAguard(t *testing.T, bin string, args ...string) *jsonAguard {
	t.Helper()
	return startJSONAguardEnv(t, bin, nil, args...)
}

// startJSONAguardEnv is startJSONAguard with env (NAME=value) added to the
// process's environment.
func startJSONAguardEnv(t *testing.T, bin string, env []string, args ...string) *jsonAguard {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-format", "json"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	a := &jsonAguard{cmd: cmd, done: make(chan struct{})}
	addrs := make(chan [2]string, 1)
	go func() {
		defer close(a.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			a.mu.Lock()
			a.lines = append(a.lines, line)
			a.mu.Unlock()
			var l struct{ Msg, Listen, Admin string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "aguard listening" {
				addrs <- [2]string{l.Listen, l.Admin}
			}
		}
	}()
	select {
	case ad := <-addrs:
		a.listen, a.admin = ad[0], ad[1]
	case <-a.done:
		t.Fatalf("aguard exited before listening:\n%s", strings.Join(a.stderr(), "\n"))
	case <-time.After(10 * time.Second):
		t.Fatalf("aguard did not say where it listens:\n%s", strings.Join(a.stderr(), "\n"))
	}
	return a
}

// toolCallAgent answers each run with a frontend call left pending, an
// agent-side call and its result, and an answer the agent made up for the
// frontend call (which aguard drops and notes).
func toolCallAgent() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		thread, run := field(b, "threadId"), field(b, "runId")
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{
			`{"type":"RUN_STARTED","threadId":"` + thread + `","runId":"` + run + `"}`,
			`{"type":"TOOL_CALL_START","toolCallId":"front-` + run + `","toolCallName":"confirm_order"}`,
			`{"type":"TOOL_CALL_ARGS","toolCallId":"front-` + run + `","delta":"{\"order\":\"o-1\"}"}`,
			`{"type":"TOOL_CALL_END","toolCallId":"front-` + run + `"}`,
			`{"type":"TOOL_CALL_RESULT","messageId":"made-up-` + run + `","toolCallId":"front-` + run + `","content":"yes"}`,
			`{"type":"TOOL_CALL_START","toolCallId":"back-` + run + `","toolCallName":"lookup"}`,
			`{"type":"TOOL_CALL_ARGS","toolCallId":"back-` + run + `","delta":"{}"}`,
			`{"type":"TOOL_CALL_END","toolCallId":"back-` + run + `"}`,
			`{"type":"TOOL_CALL_RESULT","messageId":"m-` + run + `","toolCallId":"back-` + run + `","content":"found"}`,
			`{"type":"RUN_FINISHED","threadId":"` + thread + `","runId":"` + run + `"}`,
		} {
			io.WriteString(w, "data: "+ev+"\n\n")
		}
	}))
}

// sourceLiterals is the text of the repository's Go sources outside tests,
// where a constant msg appears as a string literal.
func sourceLiterals(t *testing.T) string {
	t.Helper()
	var sb strings.Builder
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != "../.." {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sb.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sb.String()
}

// goDuration matches a duration as Go prints it ("126ms", "1m30s").
var goDuration = regexp.MustCompile(`^-?[0-9.]+(ns|µs|us|ms|s|m|h)([0-9.]+(ns|µs|us|ms|s|m|h))*$`)

// TestJSONLogThroughRedisOutage runs the binary with --log-format json in
// front of a real redis-server, with streams carrying tool calls before,
// during and after an outage of Redis (the server killed, then started
// again), then stops it: every line on stderr is a JSON object, its msg is a
// constant of the source (no id or reason spliced in), and no duration is
// written as a Go duration string or integer nanoseconds.
func TestJSONLogThroughRedisOutage(t *testing.T) {
	bin := buildAguard(t)
	rs := redistest.Start(t)
	agent := toolCallAgent()
	defer agent.Close()
	a := startJSONAguard(t, bin, "--upstream", agent.URL, "--redis", rs.URL())

	runs := 0
	stream := func() {
		runs++
		thread, run := fmt.Sprintf("thread-%d", runs), fmt.Sprintf("run-%d", runs)
		input := `{"threadId":"` + thread + `","runId":"` + run + `","protocolVersion":"1.0","messages":[],` +
			`"tools":[{"name":"confirm_order","description":"ask","parameters":{"type":"object"}}]}`
		resp, err := http.Post("http://"+a.listen+"/agent", "application/json", strings.NewReader(input))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), `"pendingToolCallIds":["front-`+run+`"]`) {
			t.Errorf("run %s: %.400s", run, b)
		}
	}
	readyz := func() string { _, body := get(t, "http://"+a.admin+"/readyz"); return body }

	for range 3 {
		stream()
	}
	rs.Stop()
	for range 3 {
		stream()
	}
	await.For(t, "readiness to say Redis is unreachable", func() bool { return strings.Contains(readyz(), "redis unreachable") })
	rs.Restart()
	await.For(t, "readiness to recover", func() bool { return !strings.Contains(readyz(), "redis unreachable") })
	for range 3 {
		stream()
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(20 * time.Second):
		t.Fatal("aguard did not stop")
	}
	a.cmd.Wait()

	src := sourceLiterals(t)
	msgs := map[string]int{}
	for i, line := range a.stderr() {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("stderr line %d is not JSON: %q", i+1, line)
			continue
		}
		msg, ok := rec["msg"].(string)
		if !ok {
			t.Errorf("line %d has no msg: %s", i+1, line)
			continue
		}
		msgs[msg]++
		if !strings.Contains(src, strconv.Quote(msg)) {
			t.Errorf("msg %q is not a constant of the source: %s", msg, line)
		}
		for key, v := range rec {
			switch v := v.(type) {
			case string:
				if goDuration.MatchString(v) {
					t.Errorf("%s is a Go duration string (%q), not seconds: %s", key, v, line)
				}
			case float64:
				if (key == "duration" || key == "timeout") && v > 1e6 {
					t.Errorf("%s = %v: nanoseconds, not seconds: %s", key, v, line)
				}
			}
		}
	}
	t.Logf("%d lines, %d kinds of msg: %v", len(a.stderr()), len(msgs), msgs)
	for _, want := range []string{"stream ended", "stream note", "redis unreachable; serving from memory and queuing writes"} {
		if msgs[want] == 0 {
			t.Errorf("no %q line: the run did not log what it should", want)
		}
	}
}

// field is the string value of a top-level "key":"value" in a small JSON body.
func field(b []byte, key string) string {
	_, rest, ok := strings.Cut(string(b), `"`+key+`":"`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

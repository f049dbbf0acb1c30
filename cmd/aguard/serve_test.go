package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/redistest"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// buildAguard compiles the binary once per test run.
func buildAguard(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "aguard-test-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "aguard")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared() // the Redis Cluster some tests share
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// started is a running aguard process with the addresses it logged.
type started struct {
	cmd         *exec.Cmd
	listen      string
	admin       string
	stderrLines chan string

	mu   sync.Mutex
	tail []string // the last logTail lines of its log, printed if the test fails
}

// logTail is how many of a started aguard's last log lines a failed test
// prints.
const logTail = 200

func startAguard(t *testing.T, bin string, args ...string) *started {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "AGUARD_LOG_FORMAT=text")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	s := &started{cmd: cmd, stderrLines: make(chan string, 100)}
	sc := bufio.NewScanner(stderr)
	re := regexp.MustCompile(`listen=(\S+) admin=(\S+)`)
	deadline := time.After(10 * time.Second)
	for s.listen == "" {
		lines := make(chan string)
		go func() {
			if sc.Scan() {
				lines <- sc.Text()
			} else {
				close(lines)
			}
		}()
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("aguard exited before listening")
			}
			s.keep(line)
			if m := re.FindStringSubmatch(line); m != nil {
				s.listen, s.admin = m[1], m[2]
			}
		case <-deadline:
			t.Fatal("aguard did not log its addresses")
		}
	}
	go func() {
		for sc.Scan() {
			line := sc.Text()
			s.keep(line)
			select {
			case s.stderrLines <- line:
			default:
			}
		}
		close(s.stderrLines)
	}()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		t.Logf("the last %d log lines of aguard (pid %d, listening on %s):", len(s.tail), cmd.Process.Pid, s.listen)
		for _, line := range s.tail {
			t.Log(line)
		}
	})
	return s
}

// keep adds a line of aguard's log to the tail a failed test prints.
func (s *started) keep(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.tail) == logTail {
		s.tail = s.tail[1:]
	}
	s.tail = append(s.tail, line)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeProbesMetricsAndSIGTERM runs the real binary: probes answer, metrics
// count the stream's events, and SIGTERM drains (readiness drops, new runs get
// 503, the running stream finishes, the process exits 0).
func TestServeProbesMetricsAndSIGTERM(t *testing.T) {
	bin := buildAguard(t)
	release := make(chan struct{})
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\"}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: {\"type\":\"RUN_FINISHED\",\"threadId\":\"t\",\"runId\":\"r\"}\n\n")
	}))
	defer agent.Close()
	a := startAguard(t, bin, "--upstream", agent.URL, "--drain-timeout", "20s")

	if code, body := get(t, "http://"+a.admin+"/healthz"); code != 200 {
		t.Fatalf("healthz: %d %s", code, body)
	}
	if code, body := get(t, "http://"+a.admin+"/readyz"); code != 200 {
		t.Fatalf("readyz: %d %s", code, body)
	}

	input := `{"threadId":"t","runId":"r","messages":[]}`
	resp, err := http.Post("http://"+a.listen+"/agent", "application/json", strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, _ := br.ReadString('\n'); !strings.Contains(line, "RUN_STARTED") {
		t.Fatalf("first line %q", line)
	}
	_, metrics := get(t, "http://"+a.admin+"/metrics")
	for _, want := range []string{`aguard_events_in_total{type="RUN_STARTED"} 1`, `aguard_streams_open 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	a.cmd.Process.Signal(syscall.SIGTERM)
	await.For(t, "readiness to drop", func() bool { code, _ := get(t, "http://"+a.admin+"/readyz"); return code == 503 })
	late, err := http.Post("http://"+a.listen+"/agent", "application/json", strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	lateBody, _ := io.ReadAll(late.Body)
	late.Body.Close()
	if late.StatusCode != 503 || !strings.Contains(string(lateBody), "shutting_down") {
		t.Fatalf("run while draining: %d %s", late.StatusCode, lateBody)
	}

	close(release)
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), "RUN_FINISHED") {
		t.Fatalf("running stream did not finish: %q", rest)
	}
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("aguard exited with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("aguard did not exit after draining")
	}
}

// TestServeConfigError pins that a bad setting stops aguard with a clear
// message and exit code 1.
func TestServeConfigError(t *testing.T) {
	bin := buildAguard(t)
	out, err := exec.Command(bin, "serve", "--upstream", "http://a", "--mode", "audit").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v", err)
	}
	if !strings.Contains(string(out), `mode (from --mode): want enforce or monitor, got "audit"`) {
		t.Fatalf("output: %s", out)
	}
}

// TestServeWiresLedgerWebhooksAndAdminToken runs the real binary and checks
// that every part reaches the data plane: the ledger (the thread's next run
// is refused while a call is pending, and the admin API sees the record),
// webhooks, and the admin token kept from the agent.
func TestServeWiresLedgerWebhooksAndAdminToken(t *testing.T) {
	bin := buildAguard(t)
	leaked := make(chan string, 4)
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for name, vals := range r.Header {
			for _, v := range vals {
				if strings.Contains(v, "admin-tok") {
					leaked <- name
				}
			}
		}
		body, _ := io.ReadAll(r.Body)
		run := "run-2"
		if strings.Contains(string(body), `"runId":"run-1"`) {
			run = "run-1"
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"type":"RUN_STARTED","threadId":"t-w","runId":"`+run+`"}`+"\n\n")
		if run == "run-1" {
			io.WriteString(w, "data: {\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"call-w1\",\"toolCallName\":\"confirm_order\"}\n\n")
			io.WriteString(w, "data: {\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"call-w1\",\"delta\":\"{}\"}\n\n")
			io.WriteString(w, "data: {\"type\":\"TOOL_CALL_END\",\"toolCallId\":\"call-w1\"}\n\n")
		}
		io.WriteString(w, `data: {"type":"RUN_FINISHED","threadId":"t-w","runId":"`+run+`"}`+"\n\n")
	}))
	defer agent.Close()
	hooks := make(chan string, 16)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hooks <- r.Header.Get("X-Aguard-Event")
	}))
	defer receiver.Close()
	a := startAguard(t, bin, "--upstream", agent.URL, "--admin-token", "admin-tok",
		"--webhook", receiver.URL, "--webhook-secret", "s")

	input := func(run string) string {
		return `{"threadId":"t-w","runId":"` + run + `","protocolVersion":"1.0","messages":[],` +
			`"tools":[{"name":"confirm_order","description":"ask","parameters":{"type":"object"}}]}`
	}
	req, _ := http.NewRequest("POST", "http://"+a.listen+"/agent", strings.NewReader(input("run-1")))
	req.Header.Set("X-Passed-Along", "Bearer admin-tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"pendingToolCallIds":["call-w1"]`) {
		t.Fatalf("run 1: %s", b)
	}
	select {
	case name := <-leaked:
		t.Fatalf("the agent received the admin token in %s", name)
	default:
	}

	resp, err = http.Post("http://"+a.listen+"/agent", "application/json", strings.NewReader(input("run-2")))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 409 || !strings.Contains(string(b), `"unanswered_tool_calls"`) || !strings.Contains(string(b), "call-w1") {
		t.Fatalf("run 2 without the answer: %d %s", resp.StatusCode, b)
	}

	if code, rec := adminDo(t, a.admin, "admin-tok", "GET", "/v1/tool-calls/call-w1", ""); code != 200 || !strings.Contains(rec, `"status":"TOOL_EXECUTION_STATUS_EXECUTING"`) {
		t.Fatalf("admin API: %d %s", code, rec)
	}
	select {
	case ev := <-hooks:
		if ev != "llm.tool_call_started" {
			t.Fatalf("first webhook %q", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no webhook arrived")
	}
}

package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/state"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // the example secret of the Standard Webhooks specification

// testEpoch is the fake clock's start.
var testEpoch = time.Date(2026, 3, 4, 5, 6, 7, 89_000_000, time.UTC)

// stepClock returns testEpoch, then one second later at every call.
type stepClock struct{ n atomic.Int64 }

func (c *stepClock) Now() time.Time {
	return testEpoch.Add(time.Duration(c.n.Add(1)-1) * time.Second)
}

// received is one request as a receiver saw it.
type received struct {
	event, delivery, signature, contentType, userAgent, method string
	header                                                     http.Header
	body                                                       []byte
}

// callID is the tool_call.id in r's body.
func (r received) callID(t *testing.T) string {
	t.Helper()
	var ev struct {
		ToolCall struct {
			ID string `json:"id"`
		} `json:"tool_call"`
	}
	if err := json.Unmarshal(r.body, &ev); err != nil {
		t.Fatalf("receiver got a body that is not JSON: %v\n%s", err, r.body)
	}
	return ev.ToolCall.ID
}

// receiver is a loopback HTTP server that records what it receives and
// answers with reply (200 when nil).
type receiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	got   []received
	reply func(n int, r *http.Request) int // n counts requests from 1
	hits  chan struct{}                    // one send per request, never blocks
}

func newReceiver(t *testing.T, reply func(n int, r *http.Request) int) *receiver {
	t.Helper()
	rc := &receiver{reply: reply, hits: make(chan struct{}, 1000)}
	rc.srv = httptest.NewServer(rc)
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	rc.got = append(rc.got, received{
		event:       r.Header.Get("X-Aguard-Event"),
		delivery:    r.Header.Get("webhook-id"),
		signature:   r.Header.Get("webhook-signature"),
		header:      r.Header.Clone(),
		contentType: r.Header.Get("Content-Type"),
		userAgent:   r.Header.Get("User-Agent"),
		method:      r.Method,
		body:        body,
	})
	n := len(rc.got)
	rc.mu.Unlock()
	select {
	case rc.hits <- struct{}{}:
	default:
	}
	code := http.StatusOK
	if rc.reply != nil {
		code = rc.reply(n, r)
	}
	w.WriteHeader(code)
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.got)
}

// waitRequests waits until rc has received n requests.
func (rc *receiver) waitRequests(t *testing.T, n int) []received {
	t.Helper()
	await.For(t, strconv.Itoa(n)+" requests at the receiver", func() bool { return len(rc.requests()) >= n })
	return rc.requests()
}

// metric is the value of a counter with the given result label, or of a
// gauge when result is "".
func metric(t *testing.T, reg *prometheus.Registry, name, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if result == "" {
				return m.GetGauge().GetValue()
			}
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "result" && lp.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("metric %s{result=%q} not found", name, result)
	return 0
}

// testOptions are fast options for tests; the caller sets URLs.
func testOptions(reg *prometheus.Registry) Options {
	opt := Options{
		Secret:      testSecret,
		MinBackoff:  2 * time.Millisecond,
		MaxBackoff:  20 * time.Millisecond,
		MaxAttempts: 50,
		Timeout:     5 * time.Second,
	}
	if reg != nil { // not a typed nil in the interface
		opt.Registerer = reg
	}
	return opt
}

// startNotifier calls New and closes the Notifier at cleanup (before the
// receivers registered earlier are closed).
func startNotifier(t *testing.T, opt Options) *Notifier {
	t.Helper()
	n, err := New(opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = n.Close(ctx)
	})
	return n
}

func closeNow(t *testing.T, n *Notifier, timeout time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return n.Close(ctx)
}

// testCall is a tool call with most fields set.
func testCall(id string) *state.ToolCall {
	deadline := time.Date(2026, 3, 4, 5, 16, 7, 0, time.UTC)
	approved := true
	return &state.ToolCall{
		ID:                 id,
		Name:               "delete_file",
		ArgumentsJSON:      json.RawMessage(`{"path":"/tmp/x"}`),
		Status:             state.StatusRequiresConfirmation,
		IsClientTool:       true,
		Description:        "Deletes a file </script>",
		RequiresApprovalAt: &deadline,
		ApprovedBy:         "ops@example.com",
		Approved:           &approved,
		ThreadID:           "thread-1",
		RunID:              "run-1",
		DecisionID:         "dec-1",
		CreatedAt:          testEpoch,
		UpdatedAt:          testEpoch,
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name    string
		opt     Options
		wantErr string
	}{
		{"relative URL", Options{URLs: []string{"/hook"}}, `URL #1 (): scheme "" is not http or https`},
		{"ftp URL", Options{URLs: []string{"ftp://example.com/x"}}, `scheme "ftp"`},
		{"no host", Options{URLs: []string{"http:///hook"}}, "no host"},
		{"port only", Options{URLs: []string{"http://:8080/hook"}}, "no host"},
		{"unparsable", Options{URLs: []string{"http://tok b"}}, "URL #1 is not a URL: invalid character"},
		{"duplicate", Options{URLs: []string{"http://a/h", "http://a/h"}}, `URL #2 (http://a): listed more than once`},
		{"credentials not echoed", Options{URLs: []string{"gopher://user:pw@a/tok?token=t"}}, `URL #1 (gopher://a): scheme "gopher"`},
		{"negative queue", Options{QueueSize: -1}, "QueueSize is negative"},
		{"negative queue bytes", Options{QueueBytes: -1}, "QueueBytes is negative"},
		{"negative attempts", Options{MaxAttempts: -1}, "MaxAttempts is negative"},
		{"negative timeout", Options{Timeout: -time.Second}, "Timeout is negative"},
		{"min above max", Options{MinBackoff: time.Second, MaxBackoff: time.Millisecond}, "MinBackoff 1s is above MaxBackoff 1ms"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := New(tc.opt)
			if err == nil {
				_ = closeNow(t, n, time.Second)
				t.Fatalf("New succeeded, want an error containing %q", tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "pw") || strings.Contains(err.Error(), "tok") {
				t.Fatalf("New: error %q leaks credentials", err)
			}
		})
	}
}

func TestNewRejectsDoubleRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	startNotifier(t, Options{Registerer: reg})
	if _, err := New(Options{Registerer: reg}); err == nil || !strings.Contains(err.Error(), "register metrics") {
		t.Fatalf("second New on one registry: %v, want a registration error", err)
	}
}

var createdAtPattern = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

func TestDeliversEachEventType(t *testing.T) {
	for notice, typ := range map[state.Notice]string{state.CallStarted: TypeToolCallStarted, state.CallHeld: TypeApprovalRequired, state.CallEnded: TypeToolCallCompleted} {
		t.Run(typ, func(t *testing.T) {
			rc := newReceiver(t, nil)
			reg := prometheus.NewRegistry()
			opt := testOptions(reg)
			opt.URLs = []string{rc.srv.URL + "/hooks/aguard"}
			opt.Now = func() time.Time { return testEpoch.In(time.FixedZone("CET", 3600)) }
			n := startNotifier(t, opt)

			call := testCall("call-" + typ)
			n.Notify(notice, call)
			call.Name = "changed after Notify" // the body was encoded already

			r := rc.waitRequests(t, 1)[0]
			if r.method != http.MethodPost || r.contentType != "application/json" || r.userAgent != "aguard-webhook" {
				t.Errorf("method, Content-Type, User-Agent = %q, %q, %q", r.method, r.contentType, r.userAgent)
			}
			if r.event != typ {
				t.Errorf("X-Aguard-Event = %q, want %q", r.event, typ)
			}
			if !regexp.MustCompile(`^msg_[0-9a-f]{32}$`).MatchString(r.delivery) {
				t.Errorf("webhook-id = %q, want msg_ and 32 hex digits", r.delivery)
			}
			if got, want := r.header.Get("webhook-timestamp"), strconv.FormatInt(testEpoch.Unix(), 10); got != want {
				t.Errorf("webhook-timestamp = %q, want %q", got, want)
			}
			if err := Verify(testSecret, r.header, r.body, testEpoch, time.Minute); err != nil {
				t.Errorf("receiver: %v", err)
			}

			var env map[string]json.RawMessage
			if err := json.Unmarshal(r.body, &env); err != nil {
				t.Fatalf("body is not a JSON object: %v\n%s", err, r.body)
			}
			if keys := slices.Sorted(maps.Keys(env)); !slices.Equal(keys, []string{"created_at", "tool_call", "type"}) {
				t.Errorf("body keys = %v, want created_at, tool_call, type", keys)
			}
			var gotType, createdAt string
			_ = json.Unmarshal(env["type"], &gotType)
			_ = json.Unmarshal(env["created_at"], &createdAt)
			if gotType != typ {
				t.Errorf("type = %q, want %q", gotType, typ)
			}
			if want := "2026-03-04T05:06:07.089Z"; createdAt != want || !createdAtPattern.MatchString(createdAt) {
				t.Errorf("created_at = %q, want %q (RFC 3339 UTC, milliseconds)", createdAt, want)
			}

			var tc map[string]any
			if err := json.Unmarshal(env["tool_call"], &tc); err != nil {
				t.Fatalf("tool_call is not an object: %v", err)
			}
			want := map[string]any{
				"id":                   "call-" + typ,
				"name":                 "delete_file",
				"arguments_json":       map[string]any{"path": "/tmp/x"},
				"status":               "TOOL_EXECUTION_STATUS_REQUIRES_CONFIRMATION",
				"is_client_tool":       true,
				"description":          "Deletes a file </script>",
				"requires_approval_at": "2026-03-04T05:16:07Z",
				"approved_by":          "ops@example.com",
				"approved":             true,
				"thread_id":            "thread-1",
				"run_id":               "run-1",
				"decision_id":          "dec-1",
				"created_at":           "2026-03-04T05:06:07.089Z",
				"updated_at":           "2026-03-04T05:06:07.089Z",
			}
			for k, v := range want {
				g, _ := json.Marshal(tc[k])
				w, _ := json.Marshal(v)
				if string(g) != string(w) {
					t.Errorf("tool_call.%s = %s, want %s", k, g, w)
				}
			}
			for k := range tc {
				if _, ok := want[k]; !ok {
					t.Errorf("tool_call has unexpected key %q", k)
				}
				if strings.ToLower(k) != k {
					t.Errorf("tool_call key %q is not snake_case", k)
				}
			}
			if err := closeNow(t, n, 2*time.Second); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if got := metric(t, reg, "aguard_webhook_deliveries_total", "delivered"); got != 1 {
				t.Errorf("delivered = %v, want 1", got)
			}
		})
	}
}

func TestUnsignedWhenNoSecret(t *testing.T) {
	rc := newReceiver(t, nil)
	opt := testOptions(nil)
	opt.Secret = ""
	opt.URLs = []string{rc.srv.URL}
	var logs bytes.Buffer
	opt.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	n := startNotifier(t, opt)
	n.Notify(state.CallStarted, testCall("c1"))
	n.Notify(state.CallStarted, testCall("c2"))
	for _, r := range rc.waitRequests(t, 2) {
		if r.signature != "" {
			t.Errorf("webhook-signature = %q with no secret, want none", r.signature)
		}
	}
	if c := strings.Count(logs.String(), "unsigned"); c != 1 {
		t.Errorf("logged the unsigned warning %d times, want once:\n%s", c, logs.String())
	}
}

func TestRetriesWithSameDeliveryID(t *testing.T) {
	rc := newReceiver(t, func(n int, _ *http.Request) int {
		if n <= 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	reg := prometheus.NewRegistry()
	clock := &stepClock{}
	opt := testOptions(reg)
	opt.URLs = []string{rc.srv.URL}
	opt.Now = clock.Now
	n := startNotifier(t, opt)

	n.Notify(state.CallEnded, testCall("c1"))
	got := rc.waitRequests(t, 3)
	if err := closeNow(t, n, 2*time.Second); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if len(got) != 3 {
		t.Fatalf("receiver got %d requests, want 3", len(got))
	}
	seen := map[string]bool{}
	for i, r := range got {
		if r.delivery != got[0].delivery {
			t.Errorf("attempt %d: webhook-id %q, want %q as on attempt 1", i+1, r.delivery, got[0].delivery)
		}
		if string(r.body) != string(got[0].body) {
			t.Errorf("attempt %d: body differs from attempt 1", i+1)
		}
		if seen[r.signature] {
			t.Errorf("attempt %d: signature %q reused", i+1, r.signature)
		}
		seen[r.signature] = true
		// created_at took the first tick; attempt i was signed at tick i+1.
		if err := Verify(testSecret, r.header, r.body, testEpoch.Add(time.Duration(i+1)*time.Second), 500*time.Millisecond); err != nil {
			t.Errorf("attempt %d: %v", i+1, err)
		}
	}
	for _, c := range []struct {
		name, result string
		want         float64
	}{
		{"aguard_webhook_attempts_total", "status", 2},
		{"aguard_webhook_attempts_total", "ok", 1},
		{"aguard_webhook_attempts_total", "error", 0},
		{"aguard_webhook_deliveries_total", "delivered", 1},
		{"aguard_webhook_deliveries_total", "failed", 0},
		{"aguard_webhook_deliveries_total", "dropped", 0},
	} {
		if got := metric(t, reg, c.name, c.result); got != c.want {
			t.Errorf("%s{result=%q} = %v, want %v", c.name, c.result, got, c.want)
		}
	}
}

func TestRetriesEveryNon2xxAndGivesUp(t *testing.T) {
	tests := []struct {
		name   string
		status int
	}{
		{"server error", http.StatusInternalServerError},
		{"unauthorized", http.StatusUnauthorized},
		{"not found", http.StatusNotFound},
		{"redirect not followed", http.StatusFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rc := newReceiver(t, func(int, *http.Request) int { return tc.status })
			reg := prometheus.NewRegistry()
			opt := testOptions(reg)
			opt.URLs = []string{rc.srv.URL}
			opt.MaxAttempts = 3
			n := startNotifier(t, opt)

			n.Notify(state.CallStarted, testCall("c1"))
			n.Notify(state.CallStarted, testCall("c2"))
			got := rc.waitRequests(t, 6)
			if err := closeNow(t, n, 2*time.Second); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if len(got) != 6 || got[0].callID(t) != "c1" || got[3].callID(t) != "c2" {
				t.Fatalf("receiver got %d requests, want 3 for c1 then 3 for c2", len(got))
			}
			if f := metric(t, reg, "aguard_webhook_deliveries_total", "failed"); f != 2 {
				t.Errorf("failed = %v, want 2", f)
			}
			if a := metric(t, reg, "aguard_webhook_attempts_total", "status"); a != 6 {
				t.Errorf("attempts{status} = %v, want 6", a)
			}
		})
	}
}

func TestReceiverDownThenBack(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // the receiver is down

	reg := prometheus.NewRegistry()
	opt := testOptions(reg)
	opt.URLs = []string{"http://" + addr + "/hook"}
	opt.MaxAttempts = 1000
	n := startNotifier(t, opt)

	const events = 20
	for i := range events {
		n.Notify(state.CallStarted, testCall("c"+strconv.Itoa(i)))
	}
	await.For(t, "5 failed attempts", func() bool {
		return metric(t, reg, "aguard_webhook_attempts_total", "error") >= 5
	})

	// The receiver comes back on the same address.
	var l2 net.Listener
	await.For(t, "the receiver's address to be free again", func() bool {
		l2, err = net.Listen("tcp", addr)
		return err == nil
	})
	rc := &receiver{hits: make(chan struct{}, 1000)}
	rc.srv = httptest.NewUnstartedServer(rc)
	rc.srv.Listener.Close()
	rc.srv.Listener = l2
	rc.srv.Start()
	defer rc.srv.Close()

	got := rc.waitRequests(t, events)
	if err := closeNow(t, n, 2*time.Second); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if len(got) != events {
		t.Fatalf("receiver got %d requests, want %d", len(got), events)
	}
	for i, r := range got {
		if want := "c" + strconv.Itoa(i); r.callID(t) != want {
			t.Errorf("request %d is for %s, want %s (order kept)", i, r.callID(t), want)
		}
	}
	if d := metric(t, reg, "aguard_webhook_deliveries_total", "delivered"); d != events {
		t.Errorf("delivered = %v, want %d", d, events)
	}
	if d := metric(t, reg, "aguard_webhook_deliveries_total", "dropped"); d != 0 {
		t.Errorf("dropped = %v, want 0", d)
	}
}

// stuckReceiver holds every request until release is closed (or the
// client gives up).
func stuckReceiver(t *testing.T) (*receiver, chan struct{}) {
	release := make(chan struct{})
	rc := newReceiver(t, func(_ int, r *http.Request) int {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return http.StatusOK
	})
	return rc, release
}

func TestQueueBoundDropsOldest(t *testing.T) {
	rc, release := stuckReceiver(t)
	reg := prometheus.NewRegistry()
	opt := testOptions(reg)
	opt.URLs = []string{rc.srv.URL}
	opt.QueueSize = 3
	n := startNotifier(t, opt)

	n.Notify(state.CallStarted, testCall("c0"))
	rc.waitRequests(t, 1) // c0 is in flight, stuck

	start := time.Now()
	for i := 1; i <= 10; i++ {
		n.Notify(state.CallStarted, testCall("c"+strconv.Itoa(i)))
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("10 Notify calls took %s with a stuck receiver, want no blocking", took)
	}
	if d := metric(t, reg, "aguard_webhook_deliveries_total", "dropped"); d != 7 {
		t.Errorf("dropped = %v, want 7", d)
	}
	if q := metric(t, reg, "aguard_webhook_queue_depth", ""); q != 3 {
		t.Errorf("queue depth = %v, want 3", q)
	}

	close(release)
	got := rc.waitRequests(t, 4)
	if err := closeNow(t, n, 2*time.Second); err != nil {
		t.Fatalf("Close: %v", err)
	}
	var ids []string
	for _, r := range got {
		ids = append(ids, r.callID(t))
	}
	if want := []string{"c0", "c8", "c9", "c10"}; !slices.Equal(ids, want) {
		t.Errorf("delivered %v, want %v (oldest waiting dropped)", ids, want)
	}
	if q := metric(t, reg, "aguard_webhook_queue_depth", ""); q != 0 {
		t.Errorf("queue depth after Close = %v, want 0", q)
	}
}

func TestSlowURLDoesNotDelayOthers(t *testing.T) {
	slow, release := stuckReceiver(t)
	fast := newReceiver(t, nil)
	opt := testOptions(nil)
	opt.URLs = []string{slow.srv.URL, fast.srv.URL}
	n := startNotifier(t, opt)
	defer close(release) // runs before the Notifier's cleanup

	for i := range 5 {
		n.Notify(state.CallStarted, testCall("c"+strconv.Itoa(i)))
	}
	got := fast.waitRequests(t, 5)
	// The slow URL's first request may still be on its way: wait for it,
	// then see that nothing followed it.
	stuck := slow.waitRequests(t, 1)
	if len(stuck) != 1 {
		t.Errorf("slow receiver got %d requests, want 1 in flight", len(stuck))
	}
	if got[0].delivery != stuck[0].delivery {
		t.Errorf("the two URLs got webhook-ids %q and %q, want the event's one id", stuck[0].delivery, got[0].delivery)
	}
}

func TestCloseDrainsThenStops(t *testing.T) {
	rc := newReceiver(t, func(n int, _ *http.Request) int {
		time.Sleep(5 * time.Millisecond)
		if n == 1 {
			return http.StatusBadGateway // retried while draining
		}
		return http.StatusNoContent
	})
	reg := prometheus.NewRegistry()
	opt := testOptions(reg)
	opt.URLs = []string{rc.srv.URL}
	n, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	const events = 10
	for i := range events {
		n.Notify(state.CallEnded, testCall("c"+strconv.Itoa(i)))
	}
	if err := closeNow(t, n, 5*time.Second); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := len(rc.requests()); got != events+1 {
		t.Fatalf("receiver got %d requests, want %d (every event, one retried)", got, events+1)
	}
	n.Notify(state.CallEnded, testCall("late"))
	if err := closeNow(t, n, time.Second); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if got := len(rc.requests()); got != events+1 {
		t.Errorf("receiver got %d requests after a Notify after Close, want %d", got, events+1)
	}
	if d := metric(t, reg, "aguard_webhook_deliveries_total", "delivered"); d != events {
		t.Errorf("delivered = %v, want %d", d, events)
	}
	if d := metric(t, reg, "aguard_webhook_deliveries_total", "dropped"); d != 1 {
		t.Errorf("dropped = %v, want 1 (the Notify after Close)", d)
	}
	rc.srv.Close()
	goleak.VerifyNone(t)
}

func TestCloseGivesUpAtDeadline(t *testing.T) {
	rc, release := stuckReceiver(t)
	defer close(release)
	reg := prometheus.NewRegistry()
	opt := testOptions(reg)
	opt.URLs = []string{rc.srv.URL}
	n, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		n.Notify(state.CallHeld, testCall("c"+strconv.Itoa(i)))
	}
	rc.waitRequests(t, 1)

	start := time.Now()
	err = closeNow(t, n, 100*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "3 deliveries unsent") {
		t.Fatalf("Close: %v, want 3 deliveries unsent and context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Close took %s with a 100ms deadline", took)
	}
	if d := metric(t, reg, "aguard_webhook_deliveries_total", "dropped"); d != 3 {
		t.Errorf("dropped = %v, want 3", d)
	}
	if q := metric(t, reg, "aguard_webhook_queue_depth", ""); q != 0 {
		t.Errorf("queue depth = %v, want 0", q)
	}
	if err := closeNow(t, n, time.Second); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestNotifyIgnores(t *testing.T) {
	t.Run("no URLs", func(t *testing.T) {
		n := startNotifier(t, Options{})
		n.Notify(state.CallStarted, testCall("c1")) // nothing to do, nothing to block on
	})
	rc := newReceiver(t, nil)
	reg := prometheus.NewRegistry()
	opt := testOptions(reg)
	opt.URLs = []string{rc.srv.URL}
	n := startNotifier(t, opt)
	n.Notify(state.Notice(99), testCall("c1"))
	n.Notify(state.CallStarted, nil)
	n.Notify(state.CallStarted, testCall("ok"))
	got := rc.waitRequests(t, 1)
	if err := closeNow(t, n, 2*time.Second); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if len(rc.requests()) != 1 || got[0].callID(t) != "ok" {
		t.Errorf("receiver got %d requests, want only the valid event", len(rc.requests()))
	}
}

func TestBackoffSchedule(t *testing.T) {
	n := &Notifier{minBackoff: 500 * time.Millisecond, maxBackoff: time.Minute}
	for _, c := range []struct {
		attempt int
		want    time.Duration // before jitter
	}{
		{1, 500 * time.Millisecond}, {2, time.Second}, {3, 2 * time.Second}, {7, 32 * time.Second},
		{8, time.Minute}, {12, time.Minute}, {1000, time.Minute},
	} {
		for range 50 {
			if got := n.backoff(c.attempt); got < c.want/2 || got > c.want {
				t.Fatalf("backoff(%d) = %s, want within [%s, %s]", c.attempt, got, c.want/2, c.want)
			}
		}
	}
	huge := &Notifier{minBackoff: time.Second, maxBackoff: time.Duration(1<<63 - 1)}
	if got := huge.backoff(200); got <= 0 {
		t.Fatalf("backoff overflowed: %s", got)
	}
}

func TestRetryAfterLengthensWait(t *testing.T) {
	rc := &receiver{hits: make(chan struct{}, 1000), reply: func(n int, _ *http.Request) int {
		if n == 1 {
			return http.StatusTooManyRequests
		}
		return http.StatusOK
	}}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		rc.ServeHTTP(w, r)
	}))
	defer rc.srv.Close()
	opt := testOptions(nil)
	opt.URLs = []string{rc.srv.URL}
	opt.MaxBackoff = 150 * time.Millisecond // caps Retry-After's 30s
	n := startNotifier(t, opt)

	start := time.Now()
	n.Notify(state.CallStarted, testCall("c1"))
	rc.waitRequests(t, 2)
	// At least the backoff, and far less than the 30s asked for (the bound
	// leaves room for a loaded machine).
	if took := time.Since(start); took < 140*time.Millisecond || took > 10*time.Second {
		t.Errorf("retry after 429 with Retry-After: 30 came after %s, want MaxBackoff (150ms)", took)
	}
	if err := closeNow(t, n, 2*time.Second); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0}, {"0", 0}, {"-3", 0}, {"2", 2 * time.Second}, {"soon", 0}, {"99999999", time.Hour},
		{now.Add(3 * time.Second).Format(http.TimeFormat), 3 * time.Second},
		{now.Add(-3 * time.Second).Format(http.TimeFormat), 0},
	} {
		if got := parseRetryAfter(c.in, now); got != c.want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}

// TestConcurrentNotifyAndClose races Notify against Close and checks that
// every delivery is accounted for exactly once.
func TestConcurrentNotifyAndClose(t *testing.T) {
	a, b := newReceiver(t, nil), newReceiver(t, nil)
	reg := prometheus.NewRegistry()
	opt := testOptions(reg)
	opt.URLs = []string{a.srv.URL, b.srv.URL}
	opt.QueueSize = 20
	n, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 4, 100
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				n.Notify(state.CallStarted, testCall(strconv.Itoa(w)+"-"+strconv.Itoa(i)))
			}
		})
	}
	time.Sleep(2 * time.Millisecond)
	_ = closeNow(t, n, 50*time.Millisecond) // may give up; that is counted too
	wg.Wait()
	delivered := metric(t, reg, "aguard_webhook_deliveries_total", "delivered")
	dropped := metric(t, reg, "aguard_webhook_deliveries_total", "dropped")
	failed := metric(t, reg, "aguard_webhook_deliveries_total", "failed")
	if total := delivered + dropped + failed; total != 2*workers*each {
		t.Errorf("delivered %v + dropped %v + failed %v = %v, want %d", delivered, dropped, failed, total, 2*workers*each)
	}
	if got := float64(len(a.requests()) + len(b.requests())); got < delivered {
		t.Errorf("receivers got %v requests, fewer than %v delivered", got, delivered)
	}
	if q := metric(t, reg, "aguard_webhook_queue_depth", ""); q != 0 {
		t.Errorf("queue depth = %v, want 0", q)
	}
}

package webhook

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/state"
	"github.com/prometheus/client_golang/prometheus"
)

// bigCall is a record whose arguments are a JSON object of about size bytes.
func bigCall(id string, size int) *state.ToolCall {
	c := testCall(id)
	c.ArgumentsJSON = json.RawMessage(`{"blob":"` + strings.Repeat("x", size) + `"}`)
	return c
}

// TestQueueBytesBoundDropsOldest pins the byte budget of a URL's queue: with
// the receiver stuck, the bodies waiting never exceed QueueBytes, the oldest
// make room for the newest and are counted as dropped, whatever QueueSize
// allows.
func TestQueueBytesBoundDropsOldest(t *testing.T) {
	rc, release := stuckReceiver(t)
	reg := prometheus.NewRegistry()
	opt := testOptions(reg)
	opt.URLs = []string{rc.srv.URL}
	opt.QueueBytes = 30_000 // room for two bodies of a little over 10 kB
	n := startNotifier(t, opt)

	n.Notify(state.CallStarted, bigCall("c0", 10_000))
	rc.waitRequests(t, 1) // c0 is in flight, stuck
	for i := 1; i <= 10; i++ {
		n.Notify(state.CallStarted, bigCall("c"+strconv.Itoa(i), 10_000))
		if q := metric(t, reg, "aguard_webhook_queue_bytes", ""); q > float64(opt.QueueBytes) {
			t.Fatalf("after %d events %v bytes queued, over the budget of %d", i, q, opt.QueueBytes)
		}
	}
	if d := metric(t, reg, "aguard_webhook_deliveries_total", "dropped"); d != 8 {
		t.Errorf("dropped = %v, want 8", d)
	}
	if q := metric(t, reg, "aguard_webhook_queue_depth", ""); q != 2 {
		t.Errorf("queue depth = %v, want 2", q)
	}
	close(release)
	got := rc.waitRequests(t, 3)
	if err := closeNow(t, n, 2*time.Second); err != nil {
		t.Fatalf("Close: %v", err)
	}
	var ids []string
	for _, r := range got {
		ids = append(ids, r.callID(t))
	}
	if want := []string{"c0", "c9", "c10"}; !slices.Equal(ids, want) {
		t.Errorf("delivered %v, want %v (oldest waiting dropped)", ids, want)
	}
	if q := metric(t, reg, "aguard_webhook_queue_bytes", ""); q != 0 {
		t.Errorf("queue bytes after Close = %v, want 0", q)
	}
}

// TestBodyOverQueueBytesDropped pins that an event whose body alone exceeds
// the budget is dropped and counted, and takes nothing else with it.
func TestBodyOverQueueBytesDropped(t *testing.T) {
	rc, release := stuckReceiver(t)
	reg := prometheus.NewRegistry()
	opt := testOptions(reg)
	opt.URLs = []string{rc.srv.URL}
	opt.QueueBytes = 4_000
	n := startNotifier(t, opt)

	n.Notify(state.CallStarted, testCall("c0"))
	rc.waitRequests(t, 1)
	n.Notify(state.CallStarted, testCall("c1"))
	n.Notify(state.CallStarted, bigCall("huge", 10_000))
	if d := metric(t, reg, "aguard_webhook_deliveries_total", "dropped"); d != 1 {
		t.Errorf("dropped = %v, want 1", d)
	}
	close(release)
	got := rc.waitRequests(t, 2)
	if err := closeNow(t, n, 2*time.Second); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if id := got[1].callID(t); id != "c1" || len(got) != 2 {
		t.Errorf("delivered %d, the second %q; want c0 then c1", len(got), id)
	}
}

// TestBodyCarriesObjectArgumentsOnce pins the body's size for arguments that
// are a JSON object: they travel once, as arguments_json, even when the
// record also holds them as arguments_text; text that is not an object
// travels as arguments_text.
func TestBodyCarriesObjectArgumentsOnce(t *testing.T) {
	rc := newReceiver(t, nil)
	opt := testOptions(nil)
	opt.URLs = []string{rc.srv.URL}
	n := startNotifier(t, opt)

	both := bigCall("both", 1000)
	both.ArgumentsText = string(both.ArgumentsJSON)
	text := testCall("text")
	text.ArgumentsJSON, text.ArgumentsText = nil, `["not","an","object"]`
	n.Notify(state.CallEnded, both)
	n.Notify(state.CallEnded, text)
	got := rc.waitRequests(t, 2)
	var first, second struct {
		ToolCall map[string]json.RawMessage `json:"tool_call"`
	}
	if err := json.Unmarshal(got[0].body, &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(got[1].body, &second); err != nil {
		t.Fatal(err)
	}
	if _, ok := first.ToolCall["arguments_text"]; ok || string(first.ToolCall["arguments_json"]) != string(both.ArgumentsJSON) {
		t.Errorf("object arguments: arguments_text present %v, arguments_json %.40s…", ok, first.ToolCall["arguments_json"])
	}
	if len(got[0].body) > 2000 {
		t.Errorf("a body of %d bytes for 1 kB of arguments", len(got[0].body))
	}
	if string(second.ToolCall["arguments_text"]) != `"[\"not\",\"an\",\"object\"]"` {
		t.Errorf("text arguments: arguments_text = %s", second.ToolCall["arguments_text"])
	}
	if both.ArgumentsText == "" {
		t.Error("Notify changed the caller's record")
	}
}

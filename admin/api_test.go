package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/redistest"
	"github.com/aguard/aguard/state"
)

func newStore(t *testing.T, url string) *state.Store {
	t.Helper()
	s, err := state.Open(context.Background(), state.Options{RedisURL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// seed writes records: one awaiting approval, one expired, one dispatched,
// one completed.
func seed(t *testing.T, s *state.Store, now time.Time) {
	t.Helper()
	later, earlier := now.Add(time.Hour), now.Add(-time.Minute)
	for _, c := range []*state.ToolCall{
		{ID: "pay-1", Name: "transfer_funds", Status: state.StatusRequiresConfirmation, IsClientTool: true, ThreadID: "t1", RequiresApprovalAt: &later, ArgumentsJSON: json.RawMessage(`{"amount":5}`), RequestedBy: "carol"},
		{ID: "pay-old", Name: "transfer_funds", Status: state.StatusRequiresConfirmation, IsClientTool: true, ThreadID: "t1", RequiresApprovalAt: &earlier},
		{ID: "ask-1", Name: "confirm", Status: state.StatusExecuting, IsClientTool: true, ThreadID: "t2", RequestedBy: "carol"},
		{ID: "look-1", Name: "lookup", Status: state.StatusCompleted, ThreadID: "t2"},
	} {
		c.CreatedAt = now.Add(-time.Hour)
		if err := s.PutCall(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
}

type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) Notify(n state.Notice, c *state.ToolCall) {
	r.mu.Lock()
	r.events = append(r.events, n.String()+":"+c.ID)
	r.mu.Unlock()
}

func call(t *testing.T, h http.Handler, method, path, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer tok")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func ids(t *testing.T, body string) string {
	t.Helper()
	var l struct{ ToolCalls []state.ToolCall }
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	var out []string
	for _, c := range l.ToolCalls {
		out = append(out, c.ID)
	}
	return strings.Join(out, ",")
}

// TestAdminAPI pins every endpoint: lookups, filters (status by name, the
// SUCCESS alias or number), approvals, decisions and their conflicts.
func TestAdminAPI(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	store := newStore(t, "")
	seed(t, store, now)
	notes := &recorder{}
	h := Handler(Options{Token: "tok", API: API(APIOptions{Store: store, Notifier: notes, ClientToolTimeout: time.Hour,
		Now: func() time.Time { return now }})})

	tests := []struct {
		name, method, path, body string
		status                   int
		want                     string // substring, or "ids:" + id list
	}{
		{"get one", "GET", "/v1/tool-calls/pay-1", "", 200, `"argumentsJson":{"amount":5}`},
		{"get unknown", "GET", "/v1/tool-calls/nope", "", 404, `"not_found"`},
		{"list a thread", "GET", "/v1/tool-calls?threadId=t2", "", 200, "ids:ask-1,look-1"},
		{"list by status name", "GET", "/v1/tool-calls?status=TOOL_EXECUTION_STATUS_EXECUTING", "", 200, "ids:ask-1"},
		{"list by SUCCESS alias", "GET", "/v1/tool-calls?status=TOOL_EXECUTION_STATUS_SUCCESS", "", 200, "ids:look-1"},
		{"list by number", "GET", "/v1/tool-calls?status=3", "", 200, "ids:look-1"},
		{"bad status", "GET", "/v1/tool-calls?status=DONE", "", 400, `"invalid_status"`},
		{"approvals exclude expired", "GET", "/v1/approvals", "", 200, "ids:pay-1"},
		{"client tools pending", "GET", "/v1/client-tools/pending?threadId=t2", "", 200, "ids:ask-1"},
		{"list by requester", "GET", "/v1/tool-calls?requestedBy=carol", "", 200, "ids:pay-1,ask-1"},
		{"approvals by requester", "GET", "/v1/approvals?requestedBy=carol", "", 200, "ids:pay-1"},
		{"approvals of another requester", "GET", "/v1/approvals?requestedBy=dave", "", 200, "ids:"},
		{"client tools by requester", "GET", "/v1/client-tools/pending?requestedBy=dave", "", 200, "ids:"},
		{"approve bad body", "POST", "/v1/tool-calls/pay-1/approve", `nope`, 400, `"invalid_request"`},
		{"approve (approvedBy is the token's reviewer, whatever the body says)", "POST", "/v1/tool-calls/pay-1/approve", `{"approvedBy":"alice","reason":"ok"}`, 200,
			`"approvedBy":"admin"`},
		{"approve twice", "POST", "/v1/tool-calls/pay-1/approve", `{"approvedBy":"bob"}`, 409, `"already_decided"`},
		{"reject after approve", "POST", "/v1/tool-calls/pay-1/reject", `{"approvedBy":"bob"}`, 409, `"already_decided"`},
		{"approved call now pending for the client", "GET", "/v1/client-tools/pending?threadId=t1", "", 200, "ids:pay-1"},
		{"approve past the deadline", "POST", "/v1/tool-calls/pay-old/approve", `{"approvedBy":"alice"}`, 409, `"approval_expired"`},
		{"expired call timed out", "GET", "/v1/tool-calls/pay-old", "", 200, `"endReason":"approval timeout"`},
		{"decide a completed call", "POST", "/v1/tool-calls/look-1/reject", `{"approvedBy":"alice"}`, 409, `"already_decided"`},
		{"decide an unknown call", "POST", "/v1/tool-calls/nope/reject", `{"approvedBy":"alice"}`, 404, `"not_found"`},
		{"unknown endpoint", "GET", "/v1/nothing", "", 404, `"not_found"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := call(t, h, tt.method, tt.path, tt.body)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %s", status, tt.status, body)
			}
			if w, ok := strings.CutPrefix(tt.want, "ids:"); ok {
				if got := ids(t, body); got != w {
					t.Fatalf("ids %q, want %q", got, w)
				}
			} else if !strings.Contains(body, tt.want) {
				t.Fatalf("body %s lacks %s", body, tt.want)
			}
		})
	}
	c, _ := store.GetCall(context.Background(), state.Ref{ThreadID: "t1", ID: "pay-1"})
	if c.ApprovedBy != "admin" || c.ApprovedAt == nil || !*c.Approved || c.ClientToolDeadlineAt == nil || !c.ClientToolDeadlineAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("approved record: %+v", c)
	}
	if strings.Join(notes.events, ",") != "approved:pay-1,ended:pay-old" {
		t.Fatalf("notifications: %v", notes.events)
	}
}

// TestRejectRecordsTheEnd pins a rejection: CANCELLED, endReason "approval
// rejected", the reviewer recorded, a rejected and a completed webhook.
func TestRejectRecordsTheEnd(t *testing.T) {
	now := time.Now()
	store := newStore(t, "")
	seed(t, store, now)
	notes := &recorder{}
	h := Handler(Options{Token: "tok", API: API(APIOptions{Store: store, Notifier: notes})})
	status, body := call(t, h, "POST", "/v1/tool-calls/pay-1/reject", `{"approvedBy":"bob","reason":"too much"}`)
	if status != 200 || !strings.Contains(body, `"status":"TOOL_EXECUTION_STATUS_CANCELLED"`) ||
		!strings.Contains(body, `"endReason":"approval rejected"`) || !strings.Contains(body, `"approvedBy":"admin"`) {
		t.Fatalf("%d %s", status, body)
	}
	if strings.Join(notes.events, ",") != "rejected:pay-1,ended:pay-1" {
		t.Fatalf("notifications: %v", notes.events)
	}
}

// TestConcurrentDecisionsAcrossReplicas races an approval and a rejection of
// the same call through two replicas sharing one Redis: exactly one wins.
func TestConcurrentDecisionsAcrossReplicas(t *testing.T) {
	redis := redistest.Start(t)
	a, b := newStore(t, redis.URL()), newStore(t, redis.URL())
	seed(t, a, time.Now())
	ha := Handler(Options{Token: "tok", API: API(APIOptions{Store: a})})
	hb := Handler(Options{Token: "tok", API: API(APIOptions{Store: b})})
	for round := range 5 {
		id := "race-" + string(rune('a'+round))
		later := time.Now().Add(time.Hour)
		a.PutCall(context.Background(), &state.ToolCall{ID: id, Status: state.StatusRequiresConfirmation, RequiresApprovalAt: &later, CreatedAt: time.Now()})
		var wg sync.WaitGroup
		codes := make([]int, 2)
		for i, h := range []http.Handler{ha, hb} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				action := []string{"approve", "reject"}[i]
				codes[i], _ = call(t, h, "POST", "/v1/tool-calls/"+id+"/"+action, `{"approvedBy":"r`+action+`"}`)
			}()
		}
		wg.Wait()
		if !(codes[0] == 200 && codes[1] == 409 || codes[0] == 409 && codes[1] == 200) {
			t.Fatalf("round %d: codes %v, want exactly one 200 and one 409", round, codes)
		}
		c, _ := b.GetCall(context.Background(), state.Ref{ID: id})
		if (codes[0] == 200) != (c.Status == state.StatusExecuting) {
			t.Fatalf("round %d: the record (%s) does not match the winner %v", round, c.Status, codes)
		}
	}
}

// TestListsArePagedWithLimitAndCursor lists 2,500 records through the API:
// 100 a page by default, ?limit= up to 1000, each page's nextCursor
// continuing where it stopped until it is empty, every record exactly once;
// a limit out of range or a cursor the API did not give is 400.
func TestListsArePagedWithLimitAndCursor(t *testing.T) {
	const n = 2500
	store := newStore(t, "")
	calls := make([]*state.ToolCall, n)
	for i := range calls {
		calls[i] = &state.ToolCall{ID: fmt.Sprintf("c%04d", i), Name: "lookup", Status: state.StatusExecuting,
			IsClientTool: i%2 == 0, ThreadID: fmt.Sprintf("t%02d", i%25), ArgumentsJSON: json.RawMessage(`{}`)}
	}
	if err := store.Record(calls, nil); err != nil {
		t.Fatal(err)
	}
	h := Handler(Options{Token: "tok", API: API(APIOptions{Store: store})})

	type page struct {
		ToolCalls  []state.ToolCall
		NextCursor *string
	}
	list := func(path string) page {
		t.Helper()
		status, body := call(t, h, "GET", path, "")
		if status != 200 {
			t.Fatalf("GET %s: %d %s", path, status, body)
		}
		var p page
		if err := json.Unmarshal([]byte(body), &p); err != nil || p.NextCursor == nil {
			t.Fatalf("GET %s: %v, nextCursor missing: %.200s", path, err, body)
		}
		return p
	}
	if p := list("/v1/tool-calls"); len(p.ToolCalls) != 100 || *p.NextCursor == "" {
		t.Fatalf("first page by default: %d records, nextCursor %q; want 100 and a cursor", len(p.ToolCalls), *p.NextCursor)
	}
	for _, tt := range []struct {
		path  string
		limit int
		want  int
	}{
		{"/v1/tool-calls", 1000, n},
		{"/v1/tool-calls?threadId=t07", 7, n / 25},
		{"/v1/client-tools/pending", 300, n / 2},
	} {
		seen := map[string]bool{}
		cursor, pages := "", 0
		for {
			sep := "?"
			if strings.Contains(tt.path, "?") {
				sep = "&"
			}
			p := list(fmt.Sprintf("%s%slimit=%d&cursor=%s", tt.path, sep, tt.limit, url.QueryEscape(cursor)))
			pages++
			if len(p.ToolCalls) > tt.limit {
				t.Fatalf("%s: page of %d records, limit %d", tt.path, len(p.ToolCalls), tt.limit)
			}
			for _, c := range p.ToolCalls {
				k := c.ThreadID + "/" + c.ID
				if seen[k] {
					t.Fatalf("%s: %s listed twice", tt.path, k)
				}
				seen[k] = true
			}
			if cursor = *p.NextCursor; cursor == "" {
				break
			}
		}
		if len(seen) != tt.want || pages != (tt.want+tt.limit-1)/tt.limit {
			t.Errorf("%s: %d records in %d pages of %d; want %d", tt.path, len(seen), pages, tt.limit, tt.want)
		}
	}
	for _, path := range []string{"/v1/tool-calls?limit=0", "/v1/tool-calls?limit=1001", "/v1/approvals?limit=x",
		"/v1/tool-calls?cursor=bm90IGEgY3Vyc29y"} {
		if status, body := call(t, h, "GET", path, ""); status != 400 || !strings.Contains(body, `"invalid_request"`) {
			t.Errorf("GET %s: %d %s; want 400 invalid_request", path, status, body)
		}
	}
}

package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/aguard/aguard/state"
	"github.com/aguard/aguard/webhook"
)

// Notifier is told about a record an operator's decision changed (approve,
// reject), so webhooks can follow it.
type Notifier interface {
	Notify(eventType string, c *state.ToolCall)
}

// APIOptions configure the admin API.
type APIOptions struct {
	// Store is the tool-call ledger; every replica sharing its Redis serves
	// the same records.
	Store *state.Store
	// ClientToolTimeout is the time the application has to answer a call
	// once it is approved (clientToolDeadlineAt).
	ClientToolTimeout time.Duration
	// Notifier, if set, is told about approvals and rejections.
	Notifier Notifier
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// API returns the admin API's handler, to be mounted under /v1/ behind the
// token check (Options.API):
//
//	GET  /v1/tool-calls/{id}?threadId=
//	GET  /v1/tool-calls?threadId=&status=
//	GET  /v1/approvals
//	POST /v1/tool-calls/{id}/approve?threadId=   {"approvedBy":"…","reason":"…","threadId":"…"}
//	POST /v1/tool-calls/{id}/reject?threadId=    {"approvedBy":"…","reason":"…","threadId":"…"}
//	GET  /v1/client-tools/pending?threadId=
//
// A record is identified by its thread and its id: agents number calls per
// run, so two threads may hold the same id. On the /v1/tool-calls/{id} paths
// threadId (in the query, or for approve and reject in the body) selects
// the thread; without it, an id that several threads hold is refused with
// 409 ambiguous_tool_call_id and the list of those threads in
// error.threadIds.
//
// Records are the ToolCall records of the ledger in camelCase (state.ToolCall).
// Decisions go through the ledger's lifecycle (state.Approve, state.Reject).
func API(opt APIOptions) http.Handler {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.ClientToolTimeout <= 0 {
		opt.ClientToolTimeout = 24 * time.Hour
	}
	a := &api{opt: opt}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tool-calls/{id}", a.getCall)
	mux.HandleFunc("GET /v1/tool-calls", a.listCalls)
	mux.HandleFunc("GET /v1/approvals", a.approvals)
	mux.HandleFunc("POST /v1/tool-calls/{id}/approve", a.decide(true))
	mux.HandleFunc("POST /v1/tool-calls/{id}/reject", a.decide(false))
	mux.HandleFunc("GET /v1/client-tools/pending", a.pendingClientTools)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusNotFound, "not_found", "no such admin endpoint: "+r.Method+" "+r.URL.Path)
	})
	return mux
}

type api struct{ opt APIOptions }

type callList struct {
	ToolCalls []*state.ToolCall `json:"toolCalls"`
}

// resolve names the record a /v1/tool-calls/{id} request means: the thread
// the request names (query, or body for a decision), else the one thread
// that holds the id. It answers the request itself (404, 409, 400, 503) and
// reports false when it cannot.
func (a *api) resolve(w http.ResponseWriter, r *http.Request, bodyThread *string) (state.Ref, bool) {
	id := r.PathValue("id")
	q := r.URL.Query()
	switch {
	case q.Has("threadId") && bodyThread != nil && *bodyThread != q.Get("threadId"):
		WriteError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf(
			"the query names thread %q and the body thread %q: name one", q.Get("threadId"), *bodyThread))
		return state.Ref{}, false
	case q.Has("threadId"):
		return state.Ref{ThreadID: q.Get("threadId"), ID: id}, true
	case bodyThread != nil:
		return state.Ref{ThreadID: *bodyThread, ID: id}, true
	}
	threads, err := a.opt.Store.ThreadsOf(r.Context(), id)
	if err != nil {
		a.storeError(w, err, state.Ref{ID: id})
		return state.Ref{}, false
	}
	switch len(threads) {
	case 0:
		WriteError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no tool call %q in any thread", id))
		return state.Ref{}, false
	case 1:
		return state.Ref{ThreadID: threads[0], ID: id}, true
	}
	writeErrorFields(w, http.StatusConflict, "ambiguous_tool_call_id", fmt.Sprintf(
		"%d threads hold a tool call %q: name one with ?threadId=", len(threads), id), map[string]any{"threadIds": threads})
	return state.Ref{}, false
}

func (a *api) getCall(w http.ResponseWriter, r *http.Request) {
	ref, ok := a.resolve(w, r, nil)
	if !ok {
		return
	}
	c, err := a.opt.Store.GetCall(r.Context(), ref)
	if err != nil {
		a.storeError(w, err, ref)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (a *api) listCalls(w http.ResponseWriter, r *http.Request) {
	f := state.Filter{ThreadID: r.URL.Query().Get("threadId")}
	if s := r.URL.Query().Get("status"); s != "" {
		st, err := state.ParseStatus(s)
		if err != nil {
			WriteError(w, http.StatusBadRequest, "invalid_status", err.Error())
			return
		}
		f.Status = st
	}
	a.list(w, r.Context(), f, func(*state.ToolCall) bool { return true })
}

// approvals lists the calls awaiting a decision that can still be decided.
func (a *api) approvals(w http.ResponseWriter, r *http.Request) {
	now := a.opt.Now()
	a.list(w, r.Context(), state.Filter{Status: state.StatusRequiresConfirmation}, func(c *state.ToolCall) bool {
		return c.Approved == nil && (c.RequiresApprovalAt == nil || !now.After(*c.RequiresApprovalAt))
	})
}

// pendingClientTools lists the frontend calls dispatched to the application
// and not answered yet.
func (a *api) pendingClientTools(w http.ResponseWriter, r *http.Request) {
	a.list(w, r.Context(), state.Filter{ThreadID: r.URL.Query().Get("threadId"), Status: state.StatusExecuting},
		func(c *state.ToolCall) bool { return c.IsClientTool })
}

func (a *api) list(w http.ResponseWriter, ctx context.Context, f state.Filter, keep func(*state.ToolCall) bool) {
	calls, err := a.opt.Store.ListCalls(ctx, f)
	if err != nil {
		a.storeError(w, err, state.Ref{})
		return
	}
	out := callList{ToolCalls: []*state.ToolCall{}}
	for _, c := range calls {
		if keep(c) {
			out.ToolCalls = append(out.ToolCalls, c)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// decision is the body of approve and reject.
type decision struct {
	ApprovedBy string `json:"approvedBy"`
	Reason     string `json:"reason"`
	// ThreadID selects the call's thread (as ?threadId= does).
	ThreadID *string `json:"threadId"`
}

// decide records an approval (approve true) or a rejection. It is a
// compare-and-set on the record, so of two reviewers deciding at once on
// any replicas, exactly one wins and the other gets 409.
func (a *api) decide(approve bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var d decision
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&d); err != nil {
			WriteError(w, http.StatusBadRequest, "invalid_request", "body must be {\"approvedBy\":\"…\",\"reason\":\"…\"}: "+err.Error())
			return
		}
		if d.ApprovedBy == "" {
			WriteError(w, http.StatusBadRequest, "invalid_request", "approvedBy is required: say who decides")
			return
		}
		ref, ok := a.resolve(w, r, d.ThreadID)
		if !ok {
			return
		}
		now := a.opt.Now()
		t := state.Reject(d.ApprovedBy, now)
		if approve {
			t = state.Approve(d.ApprovedBy, "", now, a.opt.ClientToolTimeout)
		}
		c, err := a.opt.Store.Apply(r.Context(), ref, t)
		switch {
		case errors.Is(err, state.ErrTransition):
			WriteError(w, http.StatusConflict, "already_decided", fmt.Sprintf("tool call %q of thread %q is not awaiting a decision", ref.ID, ref.ThreadID))
			return
		case err != nil && !errors.Is(err, state.ErrQueued):
			a.storeError(w, err, ref)
			return
		}
		if a.opt.Notifier != nil && c.Status.Terminal() {
			a.opt.Notifier.Notify(webhook.TypeToolCallCompleted, c)
		}
		if c.Cause == state.CauseApprovalTimeout {
			// "An approval received after the deadline is rejected": the
			// call timed out instead (state.Approve).
			WriteError(w, http.StatusConflict, "approval_expired", fmt.Sprintf("the approval deadline of tool call %q of thread %q has passed; it timed out", ref.ID, ref.ThreadID))
			return
		}
		writeJSON(w, http.StatusOK, c)
	}
}

func (a *api) storeError(w http.ResponseWriter, err error, ref state.Ref) {
	switch {
	case errors.Is(err, state.ErrNotFound):
		WriteError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no tool call %q in thread %q", ref.ID, ref.ThreadID))
	case errors.Is(err, state.ErrUnavailable):
		WriteError(w, http.StatusServiceUnavailable, "ledger_unavailable", "the ledger (Redis) is unreachable: "+err.Error())
	default:
		WriteError(w, http.StatusInternalServerError, "internal", err.Error())
	}
}

// writeErrorFields is WriteError with more members inside error.
func writeErrorFields(w http.ResponseWriter, status int, code, message string, fields map[string]any) {
	e := map[string]any{"code": code, "message": message}
	for k, v := range fields {
		e[k] = v
	}
	writeJSON(w, status, map[string]any{"error": e})
}

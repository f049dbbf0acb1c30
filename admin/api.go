package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/aguard/aguard/state"
)

// APIOptions configure the admin API.
type APIOptions struct {
	// Store is the tool-call ledger; every replica sharing its Redis serves
	// the same records.
	Store *state.Store
	// ClientToolTimeout is the time the application has to answer a call
	// once it is approved (clientToolDeadlineAt).
	ClientToolTimeout time.Duration
	// Notifier, if set, is told about approvals and rejections.
	Notifier state.Notifier
	// Logger receives the audit line of every decision (default: discard).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// API returns the admin API's handler, to be mounted under /v1/ behind the
// token check (Options.API):
//
//	GET  /v1/tool-calls/{id}?threadId=
//	GET  /v1/tool-calls?threadId=&status=&requestedBy=&limit=&cursor=
//	GET  /v1/approvals?requestedBy=&limit=&cursor=
//	POST /v1/tool-calls/{id}/approve?threadId=   {"reason":"…","threadId":"…","argumentsDigest":"…"}
//	POST /v1/tool-calls/{id}/reject?threadId=    {"reason":"…","threadId":"…"}
//	GET  /v1/client-tools/pending?threadId=&requestedBy=&limit=&cursor=
//	GET  /v1/whoami
//
// The reviewer is the one the token names (requireReviewer): approvedBy is
// their name, whatever the body says. An approval that names an
// argumentsDigest is refused (409 arguments_changed) unless it is the
// call's. Every decision, whatever its result, writes an audit line.
//
// Lists are paged (state.ListPage): limit records (default 100, at most
// 1000) in the order of thread, then id, and nextCursor, which the next
// page's cursor continues from; it is empty on the last page.
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
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	a := &api{opt: opt}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tool-calls/{id}", a.getCall)
	mux.HandleFunc("GET /v1/tool-calls", a.listCalls)
	mux.HandleFunc("GET /v1/approvals", a.approvals)
	mux.HandleFunc("POST /v1/tool-calls/{id}/approve", a.decide(true))
	mux.HandleFunc("POST /v1/tool-calls/{id}/reject", a.decide(false))
	mux.HandleFunc("GET /v1/client-tools/pending", a.pendingClientTools)
	mux.HandleFunc("GET /v1/whoami", a.whoami)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusNotFound, "not_found", "no such admin endpoint: "+r.Method+" "+r.URL.Path)
	})
	return mux
}

type api struct{ opt APIOptions }

// callList is a page of a list: its records, and the cursor of the next
// page (empty on the last).
type callList struct {
	ToolCalls  []*state.ToolCall `json:"toolCalls"`
	NextCursor string            `json:"nextCursor"`
}

// apiError is an error answer: its status, code, message and more
// members inside error.
type apiError struct {
	status        int
	code, message string
	fields        map[string]any
}

func (e *apiError) write(w http.ResponseWriter) {
	writeErrorFields(w, e.status, e.code, e.message, e.fields)
}

// resolve names the record a /v1/tool-calls/{id} request means: the thread
// the request names (query, or body for a decision), else the one thread
// that holds the id. It says why not (404, 409, 400, 503) when it cannot.
func (a *api) resolve(r *http.Request, bodyThread *string) (state.Ref, *apiError) {
	id := r.PathValue("id")
	q := r.URL.Query()
	switch {
	case q.Has("threadId") && bodyThread != nil && *bodyThread != q.Get("threadId"):
		return state.Ref{}, &apiError{status: http.StatusBadRequest, code: "invalid_request", message: fmt.Sprintf(
			"the query names thread %q and the body thread %q: name one", q.Get("threadId"), *bodyThread)}
	case q.Has("threadId"):
		return state.Ref{ThreadID: q.Get("threadId"), ID: id}, nil
	case bodyThread != nil:
		return state.Ref{ThreadID: *bodyThread, ID: id}, nil
	}
	threads, err := a.opt.Store.ThreadsOf(r.Context(), id)
	if err != nil {
		return state.Ref{}, storeError(err, state.Ref{ID: id})
	}
	switch len(threads) {
	case 0:
		return state.Ref{}, &apiError{status: http.StatusNotFound, code: "not_found", message: fmt.Sprintf("no tool call %q in any thread", id)}
	case 1:
		return state.Ref{ThreadID: threads[0], ID: id}, nil
	}
	return state.Ref{}, &apiError{status: http.StatusConflict, code: "ambiguous_tool_call_id", message: fmt.Sprintf(
		"%d threads hold a tool call %q: name one with ?threadId=", len(threads), id), fields: map[string]any{"threadIds": threads}}
}

func (a *api) getCall(w http.ResponseWriter, r *http.Request) {
	ref, e := a.resolve(r, nil)
	if e != nil {
		e.write(w)
		return
	}
	c, err := a.opt.Store.GetCall(r.Context(), ref)
	if err != nil {
		storeError(err, ref).write(w)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// whoami says which reviewer the token names, and their role (addition:
// the approvals page shows it).
func (a *api) whoami(w http.ResponseWriter, r *http.Request) {
	who := ReviewerFrom(r.Context())
	if who == nil {
		WriteError(w, http.StatusUnauthorized, "unauthorized", "the admin API needs a valid bearer token")
		return
	}
	writeJSON(w, http.StatusOK, who)
}

func (a *api) listCalls(w http.ResponseWriter, r *http.Request) {
	f := state.Filter{ThreadID: r.URL.Query().Get("threadId"), RequestedBy: r.URL.Query().Get("requestedBy")}
	if s := r.URL.Query().Get("status"); s != "" {
		st, err := state.ParseStatus(s)
		if err != nil {
			WriteError(w, http.StatusBadRequest, "invalid_status", err.Error())
			return
		}
		f.Status = st
	}
	a.list(w, r, f, nil)
}

// approvals lists the calls awaiting a decision that can still be decided.
func (a *api) approvals(w http.ResponseWriter, r *http.Request) {
	now := a.opt.Now()
	a.list(w, r, state.Filter{Status: state.StatusRequiresConfirmation, RequestedBy: r.URL.Query().Get("requestedBy")}, func(c *state.ToolCall) bool {
		return c.Approved == nil && (c.RequiresApprovalAt == nil || !now.After(*c.RequiresApprovalAt))
	})
}

// pendingClientTools lists the frontend calls dispatched to the application
// and not answered yet.
func (a *api) pendingClientTools(w http.ResponseWriter, r *http.Request) {
	a.list(w, r, state.Filter{ThreadID: r.URL.Query().Get("threadId"), Status: state.StatusExecuting, RequestedBy: r.URL.Query().Get("requestedBy")},
		func(c *state.ToolCall) bool { return c.IsClientTool })
}

// list answers one page of the records f and keep (nil: all) select:
// ?limit= records (default 100, at most 1000) after ?cursor= (a previous
// page's nextCursor).
func (a *api) list(w http.ResponseWriter, r *http.Request, f state.Filter, keep func(*state.ToolCall) bool) {
	q := r.URL.Query()
	page := state.Page{Cursor: q.Get("cursor"), Keep: keep}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > state.MaxPageLimit {
			WriteError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("limit %.32q: want a number from 1 to %d", v, state.MaxPageLimit))
			return
		}
		page.Limit = n
	}
	calls, next, err := a.opt.Store.ListPage(r.Context(), f, page)
	if errors.Is(err, state.ErrCursor) {
		WriteError(w, http.StatusBadRequest, "invalid_request", "cursor: not one this API gave: start again without it")
		return
	}
	if err != nil {
		storeError(err, state.Ref{}).write(w)
		return
	}
	if calls == nil {
		calls = []*state.ToolCall{}
	}
	writeJSON(w, http.StatusOK, callList{ToolCalls: calls, NextCursor: next})
}

// decision is the body of approve and reject.
type decision struct {
	// ApprovedBy is ignored: the decision is the authenticated
	// reviewer's (it stays accepted for clients that still send it).
	ApprovedBy string `json:"approvedBy"`
	// Reason is the reviewer's word, for the audit line.
	Reason string `json:"reason"`
	// ThreadID selects the call's thread (as ?threadId= does).
	ThreadID *string `json:"threadId"`
	// ArgumentsDigest, on approve, is the argumentsDigest of the arguments
	// the reviewer saw: the approval holds for those only.
	ArgumentsDigest string `json:"argumentsDigest"`
}

// decide records an approval (approve true) or a rejection by the
// authenticated reviewer. It is a compare-and-set on the record, so of two
// reviewers deciding at once on any replicas, exactly one wins and the
// other gets 409. Whatever comes of it is audited.
func (a *api) decide(approve bool) http.HandlerFunc {
	action := "reject"
	if approve {
		action = "approve"
	}
	return func(w http.ResponseWriter, r *http.Request) {
		var d decision
		var ref state.Ref
		result := "ok"
		who := ReviewerFrom(r.Context())
		defer func() { a.audit(r, who, action, ref, d, result) }()
		fail := func(e *apiError) {
			result = e.code
			e.write(w)
		}
		if who == nil || !who.CanDecide() {
			// requireReviewer stands in front; this is the last line.
			fail(&apiError{status: http.StatusForbidden, code: "forbidden", message: "only a reviewer may decide"})
			return
		}
		ref.ID = r.PathValue("id")
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&d); err != nil && !errors.Is(err, io.EOF) {
			fail(&apiError{status: http.StatusBadRequest, code: "invalid_request", message: `body must be {"reason":"…","threadId":"…","argumentsDigest":"…"}: ` + err.Error()})
			return
		}
		var e *apiError
		if ref, e = a.resolve(r, d.ThreadID); e != nil {
			ref = state.Ref{ThreadID: r.URL.Query().Get("threadId"), ID: r.PathValue("id")}
			fail(e)
			return
		}
		now := a.opt.Now()
		t := state.Reject(who.Name, now)
		if approve {
			t = state.Approve(who.Name, d.ArgumentsDigest, now, a.opt.ClientToolTimeout)
		}
		c, err := a.opt.Store.Apply(r.Context(), ref, t)
		switch {
		case errors.Is(err, state.ErrTransition):
			fail(&apiError{status: http.StatusConflict, code: "already_decided", message: fmt.Sprintf("tool call %q of thread %q is not awaiting a decision", ref.ID, ref.ThreadID)})
			return
		case errors.Is(err, state.ErrArgumentsChanged):
			current := ""
			if c, gerr := a.opt.Store.GetCall(r.Context(), ref); gerr == nil {
				current = c.ArgumentsDigest
			}
			fail(&apiError{status: http.StatusConflict, code: "arguments_changed", message: fmt.Sprintf(
				"the arguments of tool call %q of thread %q are not the ones approved (argumentsDigest %s): look at them again", ref.ID, ref.ThreadID, d.ArgumentsDigest),
				fields: map[string]any{"argumentsDigest": current}})
			return
		case err != nil && !errors.Is(err, state.ErrQueued):
			fail(storeError(err, ref))
			return
		}
		a.notify(approve, c)
		if c.Cause == state.CauseApprovalTimeout {
			// "An approval received after the deadline is rejected": the
			// call timed out instead (state.Approve).
			fail(&apiError{status: http.StatusConflict, code: "approval_expired", message: fmt.Sprintf("the approval deadline of tool call %q of thread %q has passed; it timed out", ref.ID, ref.ThreadID)})
			return
		}
		writeJSON(w, http.StatusOK, c)
	}
}

// notify tells webhooks what a decision did to c: approved, or rejected
// (and completed, a terminal status); a call that timed out instead is
// completed only.
func (a *api) notify(approve bool, c *state.ToolCall) {
	n := a.opt.Notifier
	if n == nil {
		return
	}
	// Through the store: after the decision's write, if it is queued.
	tell := func(notice state.Notice) { a.opt.Store.Tell(n, notice, c) }
	switch {
	case c.Cause == state.CauseApprovalTimeout:
	case approve:
		tell(state.CallApproved)
	default:
		tell(state.CallRejected)
	}
	if c.Status.Terminal() {
		tell(state.CallEnded)
	}
}

// audit writes the audit line of a decision: who, what, on which call,
// and what came of it (ok, or the error code answered).
func (a *api) audit(r *http.Request, who *Reviewer, action string, ref state.Ref, d decision, result string) {
	actor := ""
	if who != nil {
		actor = who.Name
	}
	a.opt.Logger.LogAttrs(r.Context(), slog.LevelInfo, "audit",
		slog.String("actor", actor),
		slog.String("action", action),
		slog.String("threadId", ref.ThreadID),
		slog.String("toolCallId", ref.ID),
		slog.String("result", result),
		slog.String("reason", d.Reason),
		slog.String("argumentsDigest", d.ArgumentsDigest),
		slog.String("remoteAddr", r.RemoteAddr),
	)
}

// storeError is the answer to a ledger error about ref.
func storeError(err error, ref state.Ref) *apiError {
	switch {
	case errors.Is(err, state.ErrNotFound):
		return &apiError{status: http.StatusNotFound, code: "not_found", message: fmt.Sprintf("no tool call %q in thread %q", ref.ID, ref.ThreadID)}
	case errors.Is(err, state.ErrUnavailable):
		return &apiError{status: http.StatusServiceUnavailable, code: "ledger_unavailable", message: "the ledger (Redis) is unreachable: " + err.Error()}
	}
	return &apiError{status: http.StatusInternalServerError, code: "internal", message: err.Error()}
}

// writeErrorFields is WriteError with more members inside error.
func writeErrorFields(w http.ResponseWriter, status int, code, message string, fields map[string]any) {
	e := map[string]any{"code": code, "message": message}
	for k, v := range fields {
		e[k] = v
	}
	writeJSON(w, status, map[string]any{"error": e})
}

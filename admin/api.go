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
//	GET  /v1/tool-calls/{id}
//	GET  /v1/tool-calls?threadId=&status=
//	GET  /v1/approvals
//	POST /v1/tool-calls/{id}/approve   {"approvedBy":"…","reason":"…"}
//	POST /v1/tool-calls/{id}/reject    {"approvedBy":"…","reason":"…"}
//	GET  /v1/client-tools/pending?threadId=
//
// Records are seed 003's ToolCall in camelCase (state.ToolCall).
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

func (a *api) getCall(w http.ResponseWriter, r *http.Request) {
	c, err := a.opt.Store.GetCall(r.Context(), r.PathValue("id"))
	if err != nil {
		a.storeError(w, err, r.PathValue("id"))
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
		a.storeError(w, err, "")
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
}

var (
	errDecided = errors.New("already decided")
	errExpired = errors.New("approval deadline passed")
)

// decide records an approval (approve true) or a rejection. It is a
// compare-and-set on the record, so of two reviewers deciding at once on
// any replicas, exactly one wins and the other gets 409.
func (a *api) decide(approve bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		var d decision
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&d); err != nil {
			WriteError(w, http.StatusBadRequest, "invalid_request", "body must be {\"approvedBy\":\"…\",\"reason\":\"…\"}: "+err.Error())
			return
		}
		if d.ApprovedBy == "" {
			WriteError(w, http.StatusBadRequest, "invalid_request", "approvedBy is required: say who decides")
			return
		}
		now := a.opt.Now()
		expired := false
		c, err := a.opt.Store.UpdateCall(r.Context(), id, func(c *state.ToolCall) error {
			expired = false
			if c.Status != state.StatusRequiresConfirmation || c.Approved != nil {
				return errDecided
			}
			if c.RequiresApprovalAt != nil && now.After(*c.RequiresApprovalAt) {
				// "An approval received after the deadline is rejected"
				// (seed 003): the call times out now.
				c.End(state.StatusTimedOut, "approval timeout", now)
				expired = true
				return nil
			}
			c.Approved, c.ApprovedAt, c.ApprovedBy = &approve, &now, d.ApprovedBy
			if approve {
				// Approved: the call is dispatched to the application,
				// which now has until its deadline to answer.
				c.Status = state.StatusExecuting
				deadline := now.Add(a.opt.ClientToolTimeout)
				c.ClientToolDeadlineAt = &deadline
			} else {
				c.End(state.StatusCancelled, "approval rejected", now)
			}
			return nil
		})
		switch {
		case errors.Is(err, errDecided):
			WriteError(w, http.StatusConflict, "already_decided", fmt.Sprintf("tool call %q is not awaiting a decision", id))
			return
		case err != nil && !errors.Is(err, state.ErrQueued):
			a.storeError(w, err, id)
			return
		}
		if a.opt.Notifier != nil && c.Status.Terminal() {
			a.opt.Notifier.Notify(webhook.TypeToolCallCompleted, c)
		}
		if expired {
			WriteError(w, http.StatusConflict, "approval_expired", fmt.Sprintf("the approval deadline of tool call %q has passed; it timed out", id))
			return
		}
		writeJSON(w, http.StatusOK, c)
	}
}

func (a *api) storeError(w http.ResponseWriter, err error, id string) {
	switch {
	case errors.Is(err, state.ErrNotFound):
		WriteError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no tool call %q", id))
	case errors.Is(err, state.ErrUnavailable):
		WriteError(w, http.StatusServiceUnavailable, "ledger_unavailable", "the ledger (Redis) is unreachable: "+err.Error())
	default:
		WriteError(w, http.StatusInternalServerError, "internal", err.Error())
	}
}

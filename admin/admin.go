// Package admin serves aguard's admin listener: /healthz, /readyz and
// /metrics, which need no token, and the admin API under /v1/, which needs
// a reviewer's bearer token (--admin-tokens, --admin-token; reviewers.go):
// a viewer may read, a reviewer may also decide, and every decision and
// every refused attempt at one is audited. The approvals page at
// /ui/approvals (ui.go) needs no token either: it is static and holds no
// data; the reviewer gives it the token, and it calls the API with it.
//
// It is plain net/http: nothing on it is on the streaming hot path. It holds
// no state of its own; readiness and metrics come from the functions and
// registry it is given.
package admin

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check reports whether one part of aguard is ready. ok false makes /readyz
// answer 503 with reason; ok true with a reason reports a degraded state
// that still serves (200 with "degraded"), so that, say, an outage of Redis
// never takes every replica out of service.
type Check func() (ok bool, reason string)

// Options configure the admin handler.
type Options struct {
	// Reviewers are who may use the admin API (NewReviewers); nil means
	// the one reviewer Token stands for.
	Reviewers *Reviewers
	// Token is --admin-token, the reviewer named "admin", when Reviewers
	// is nil; with neither, the admin API refuses every call.
	Token string
	// Logger receives the audit lines of refused changes (default: discard).
	Logger *slog.Logger
	// Ready checks run for /readyz, in order; the first failure answers 503.
	Ready []Check
	// Gatherer provides /metrics.
	Gatherer prometheus.Gatherer
	// API serves the admin API under /v1/ once authorised; nil answers 404.
	API http.Handler
}

// Handler returns the admin listener's handler.
func Handler(opt Options) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		var degraded []string
		for _, check := range opt.Ready {
			ok, reason := check()
			if !ok {
				writeJSON(w, http.StatusServiceUnavailable, readiness{"unavailable", reason})
				return
			}
			if reason != "" {
				degraded = append(degraded, reason)
			}
		}
		if len(degraded) > 0 {
			writeJSON(w, http.StatusOK, readiness{"degraded", strings.Join(degraded, "; ")})
			return
		}
		writeJSON(w, http.StatusOK, readiness{Status: "ok"})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(opt.Gatherer, promhttp.HandlerOpts{}))
	api := opt.API
	if api == nil {
		api = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			WriteError(w, http.StatusNotFound, "not_found", "no such admin endpoint: "+r.URL.Path)
		})
	}
	rs := opt.Reviewers
	if rs == nil {
		rs, _ = NewReviewers(nil, opt.Token) // one reviewer: nothing to conflict
	}
	log := opt.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mux.Handle("/v1/", requireReviewer(rs, log, api))
	// The approvals page and its assets (ui.go): static, so no token.
	mux.Handle("GET /ui/", uiHandler())
	return mux
}

// readiness is the body of /readyz.
type readiness struct {
	Status string `json:"status"` // ok, degraded or unavailable
	Reason string `json:"reason,omitempty"`
}

// bearerToken is the token of a Bearer Authorization header value.
func bearerToken(v string) (string, bool) {
	scheme, token, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(token, " "), true
}

// WriteError answers with {"error":{"code":…,"message":…}}.
func WriteError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

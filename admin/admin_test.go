package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestAdminAuthAndProbes(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "aguard_test_total", Help: "t"})
	reg.MustRegister(c)
	c.Inc()
	ready, reason := true, ""
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "api") })
	tests := []struct {
		name       string
		token      string
		path, auth string
		notReady   string
		wantStatus int
		wantBody   string
	}{
		{"healthz without token", "s3cret", "/healthz", "", "", 200, `"ok"`},
		{"readyz ready", "s3cret", "/readyz", "", "", 200, `"ok"`},
		{"readyz draining", "s3cret", "/readyz", "", "draining", 503, `"draining"`},
		{"readyz degraded still serves", "s3cret", "/readyz", "", "degraded:redis down", 200, `"status":"degraded","reason":"redis down"`},
		{"metrics without token", "s3cret", "/metrics", "", "", 200, "aguard_test_total 1"},
		{"api without token", "s3cret", "/v1/approvals", "", "", 401, "unauthorized"},
		{"api wrong token", "s3cret", "/v1/approvals", "Bearer nope", "", 401, "unauthorized"},
		{"api token without Bearer", "s3cret", "/v1/approvals", "s3cret", "", 401, "unauthorized"},
		{"api right token", "s3cret", "/v1/approvals", "Bearer s3cret", "", 200, "api"},
		{"api when no token is configured", "", "/v1/approvals", "Bearer ", "", 401, "unauthorized"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ready, reason = tt.notReady == "", tt.notReady
			if r, ok := strings.CutPrefix(tt.notReady, "degraded:"); ok {
				ready, reason = true, r
			}
			h := Handler(Options{Token: tt.token, Gatherer: reg, API: api,
				Ready: []Check{func() (bool, string) { return ready, reason }}})
			req := httptest.NewRequest("GET", tt.path, nil)
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.wantStatus || !strings.Contains(rec.Body.String(), tt.wantBody) {
				t.Fatalf("%s: got %d %q, want %d containing %q", tt.path, rec.Code, rec.Body.String(), tt.wantStatus, tt.wantBody)
			}
		})
	}
}

// TestAuthSchemeIsCaseInsensitive pins that the admin API reads the
// Authorization scheme case-insensitively (RFC 9110 §11.1): "bearer" and
// "BEARER" are "Bearer". The token itself is compared exactly.
func TestAuthSchemeIsCaseInsensitive(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "api") })
	srv := httptest.NewServer(Handler(Options{Token: "s3cret", Gatherer: prometheus.NewRegistry(), API: api}))
	defer srv.Close()
	for auth, want := range map[string]int{
		"bearer s3cret":   200,
		"BEARER s3cret":   200,
		"Bearer s3cret":   200,
		"bEaReR s3cret":   200,
		"Bearer  s3cret":  200, // 1*SP (RFC 6750 §2.1)
		"bearer S3CRET":   401,
		"Bearers3cret":    401,
		"Basic czNjcmV0":  401,
		"bearer":          401,
		"bearer s3cret x": 401,
	} {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/approvals", nil)
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Authorization %q: %d, want %d", auth, resp.StatusCode, want)
		}
	}
}

package admin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// Roles a reviewer may have.
const (
	// RoleViewer may read the admin API (GET); deciding is 403 forbidden.
	RoleViewer = "viewer"
	// RoleReviewer may read and decide (approve, reject).
	RoleReviewer = "reviewer"
)

// AdminName is the reviewer --admin-token stands for.
const AdminName = "admin"

// maxReviewersFile bounds the --admin-tokens file.
const maxReviewersFile = 1 << 20

// Reviewer is someone the admin API knows: who they are, the SHA-256 of
// their token (the token itself is never stored), and what they may do.
type Reviewer struct {
	// Name is what approvedBy records and the audit line names.
	Name string `yaml:"name" json:"name"`
	// TokenSHA256 is the lower-case hex SHA-256 of the reviewer's bearer
	// token (`printf %s "$TOKEN" | sha256sum`).
	TokenSHA256 string `yaml:"tokenSha256" json:"-"`
	// Role is RoleViewer or RoleReviewer.
	Role string `yaml:"role" json:"role"`

	sum [sha256.Size]byte
}

// CanDecide reports whether r may approve and reject.
func (r *Reviewer) CanDecide() bool { return r.Role == RoleReviewer }

// Reviewers is the set of reviewers the admin API authenticates. Build it
// with NewReviewers.
type Reviewers struct {
	list []*Reviewer
}

// ReadReviewers reads an --admin-tokens file: a YAML list of {name,
// tokenSha256, role}. Unknown keys are an error, so a typo never passes.
func ReadReviewers(path string) ([]Reviewer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("admin tokens: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxReviewersFile+1))
	if err != nil {
		return nil, fmt.Errorf("admin tokens: %s: %w", path, err)
	}
	if len(data) > maxReviewersFile {
		return nil, fmt.Errorf("admin tokens: %s is larger than %d bytes", path, maxReviewersFile)
	}
	var list []Reviewer
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&list); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("admin tokens: %s: want a list of {name, tokenSha256, role}: %w", path, err)
	}
	return list, nil
}

// emptySum is the SHA-256 of the empty token, which authenticates no one.
var emptySum = sha256.Sum256(nil)

// NewReviewers checks list and returns the set, with --admin-token (when
// not "") as one more reviewer named AdminName. Names and token digests must
// be unique; tokenSha256 must be 64 hex digits; role viewer or reviewer.
func NewReviewers(list []Reviewer, adminToken string) (*Reviewers, error) {
	rs := &Reviewers{}
	names, sums := map[string]bool{}, map[[sha256.Size]byte]string{}
	add := func(r Reviewer, where string) error {
		switch {
		case r.Name == "" || len(r.Name) > 128 || strings.IndexFunc(r.Name, func(c rune) bool { return !unicode.IsPrint(c) }) >= 0:
			return fmt.Errorf("admin tokens: %s: name %q: want 1 to 128 printable characters", where, r.Name)
		case names[r.Name]:
			return fmt.Errorf("admin tokens: %s: name %q is given twice", where, r.Name)
		case r.Role != RoleViewer && r.Role != RoleReviewer:
			return fmt.Errorf("admin tokens: %s (%s): role %q: want %s or %s", where, r.Name, r.Role, RoleViewer, RoleReviewer)
		}
		b, err := hex.DecodeString(r.TokenSHA256)
		if err != nil || len(b) != sha256.Size {
			return fmt.Errorf("admin tokens: %s (%s): tokenSha256: want the 64 hex digits of the token's SHA-256", where, r.Name)
		}
		copy(r.sum[:], b)
		if r.sum == emptySum {
			return fmt.Errorf("admin tokens: %s (%s): tokenSha256 is the digest of an empty token", where, r.Name)
		}
		if other, dup := sums[r.sum]; dup {
			return fmt.Errorf("admin tokens: %s (%s): the same token as %s", where, r.Name, other)
		}
		r.TokenSHA256 = strings.ToLower(r.TokenSHA256)
		names[r.Name], sums[r.sum] = true, r.Name
		rs.list = append(rs.list, &r)
		return nil
	}
	for i, r := range list {
		if err := add(r, fmt.Sprintf("entry %d", i+1)); err != nil {
			return nil, err
		}
	}
	if adminToken != "" {
		sum := sha256.Sum256([]byte(adminToken))
		if err := add(Reviewer{Name: AdminName, Role: RoleReviewer, TokenSHA256: hex.EncodeToString(sum[:])}, "--admin-token"); err != nil {
			return nil, err
		}
	}
	return rs, nil
}

// Len is the number of reviewers.
func (rs *Reviewers) Len() int {
	if rs == nil {
		return 0
	}
	return len(rs.list)
}

// authenticate returns the reviewer whose token is token. Every digest is
// compared, in constant time, whether one matched or not.
func (rs *Reviewers) authenticate(token string) *Reviewer {
	if rs == nil || token == "" {
		return nil
	}
	sum := sha256.Sum256([]byte(token))
	var found *Reviewer
	for _, r := range rs.list {
		if subtle.ConstantTimeCompare(sum[:], r.sum[:]) == 1 {
			found = r
		}
	}
	return found
}

// reviewerKey is the request context key of the authenticated reviewer.
type reviewerKey struct{}

// ReviewerFrom returns the reviewer the admin API authenticated for the
// request of ctx, or nil.
func ReviewerFrom(ctx context.Context) *Reviewer {
	r, _ := ctx.Value(reviewerKey{}).(*Reviewer)
	return r
}

// requireReviewer lets a request through only with "Authorization: Bearer
// <token>" of a reviewer (the scheme case-insensitive, RFC 9110 §11.1,
// followed by one or more spaces, RFC 6750 §2.1), and a request that
// changes something (anything but GET and HEAD) only for a reviewer who
// may decide: a viewer gets 403 forbidden. A refused change is audited.
func requireReviewer(rs *Reviewers, log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ := bearerToken(r.Header.Get("Authorization"))
		who := rs.authenticate(got)
		mutation := r.Method != http.MethodGet && r.Method != http.MethodHead
		if who == nil {
			if mutation {
				auditAttempt(log, r, "", "unauthorized")
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="aguard admin"`)
			WriteError(w, http.StatusUnauthorized, "unauthorized", "the admin API needs a valid bearer token")
			return
		}
		if mutation && !who.CanDecide() {
			auditAttempt(log, r, who.Name, "forbidden")
			WriteError(w, http.StatusForbidden, "forbidden", fmt.Sprintf("%s is a %s: a viewer may read, not decide", who.Name, who.Role))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), reviewerKey{}, who)))
	})
}

// auditAttempt writes the audit line of an admin change refused before it
// reached the API: the action and call as the path names them.
func auditAttempt(log *slog.Logger, r *http.Request, actor, result string) {
	action, id := "request", ""
	if rest, ok := strings.CutPrefix(r.URL.Path, "/v1/tool-calls/"); ok {
		if i := strings.LastIndexByte(rest, '/'); i > 0 {
			if a := rest[i+1:]; a == "approve" || a == "reject" {
				action, id = a, rest[:i]
			}
		}
	}
	log.LogAttrs(r.Context(), slog.LevelInfo, "audit",
		slog.String("actor", actor),
		slog.String("action", action),
		slog.String("threadId", r.URL.Query().Get("threadId")),
		slog.String("toolCallId", id),
		slog.String("result", result),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.String("remoteAddr", r.RemoteAddr),
	)
}

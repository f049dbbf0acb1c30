// Package auth authenticates the consumers of aguard's data plane: it
// verifies a bearer JWT against a JSON Web Key Set (a file or a URL, fetched
// and refreshed in the background: keys rotate without a restart), or takes
// the subject from a header that a trusted ingress sets. It says who a
// request comes from, or why it cannot tell; what follows (a 401, the policy
// input, the ledger's requestedBy) is the caller's.
//
// It does not check JWTs itself: lestrrat-go/jwx verifies the signature
// with the key set (RFC 7515, RFC 7517) and validates the claims (RFC 7519:
// exp, nbf, iat, iss, aud); lestrrat-go/httprc, the resource cache behind
// jwx's jwk.Cache, fetches and refreshes the key set.
package auth

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// Identity is an authenticated consumer.
type Identity struct {
	// Subject is the JWT's sub claim, or the trusted header's value.
	Subject string
	// Issuer is the JWT's iss claim; "" for SourceHeader.
	Issuer string
	// Claims are the verified JWT's claims, a JSON object; nil for
	// SourceHeader.
	Claims json.RawMessage
	// Source is SourceJWT or SourceHeader.
	Source string
}

// Sources of an Identity.
const (
	SourceJWT    = "jwt"
	SourceHeader = "header"
)

// Why a request is not authenticated. Every error an Authenticator returns
// wraps one of them.
var (
	// ErrNoCredentials: the request carries none (no Authorization header,
	// a scheme other than Bearer, no trusted header). RFC 6750 §3.1: the
	// challenge then carries no error code.
	ErrNoCredentials = errors.New("auth: no credentials")
	// ErrInvalidToken: the credentials do not authenticate anyone: a token
	// that is malformed, expired, not yet valid, signed by a key outside the
	// key set or with no signature, from another issuer or for another
	// audience; a repeated header.
	ErrInvalidToken = errors.New("auth: invalid token")
	// ErrUnavailable: aguard cannot check credentials now: no key set has
	// been fetched yet. The request is refused, but not the client's fault.
	ErrUnavailable = errors.New("auth: no key set to verify tokens with")
)

// Headers gives the values of a request header by name (case-insensitive),
// one per header line, in order; none when absent.
type Headers func(name string) []string

// Authenticator says who sent a request.
type Authenticator interface {
	// Authenticate returns the identity the request's headers prove, or an
	// error wrapping ErrNoCredentials, ErrInvalidToken or ErrUnavailable
	// that says what is wrong.
	Authenticate(ctx context.Context, h Headers) (*Identity, error)
	// Ready reports whether the Authenticator can authenticate anyone
	// (ok false: none can be), and, with ok true, a reason when it works
	// degraded (a key set that could not be refreshed).
	Ready() (ok bool, reason string)
	// Close stops what runs in the background.
	Close(ctx context.Context) error
}

// Header is the Authenticator for a trusted ingress: the subject is the
// value of the header Name, which the ingress sets from an identity it has
// verified, after removing any the client sent. aguard trusts it as it is;
// README, "Running behind an ingress that authenticates".
type Header struct {
	Name string
}

// Authenticate implements Authenticator. A missing or empty header is
// ErrNoCredentials; a header that appears more than once is ErrInvalidToken:
// an ingress that sets it replaces the client's, so two mean that one came
// through from the client.
func (h Header) Authenticate(_ context.Context, hs Headers) (*Identity, error) {
	vs := hs(h.Name)
	switch {
	case len(vs) > 1:
		return nil, &Error{Kind: ErrInvalidToken, Detail: "the " + h.Name + " header appears " + strconv.Itoa(len(vs)) + " times; the ingress must set it once"}
	case len(vs) == 0 || strings.TrimSpace(vs[0]) == "":
		return nil, &Error{Kind: ErrNoCredentials, Detail: "the request has no " + h.Name + " header"}
	}
	return &Identity{Subject: strings.TrimSpace(vs[0]), Source: SourceHeader}, nil
}

// Ready implements Authenticator: a header is always there to read.
func (Header) Ready() (bool, string) { return true, "" }

// Close implements Authenticator.
func (Header) Close(context.Context) error { return nil }

// Error is a refusal: its Kind (ErrNoCredentials, ErrInvalidToken or
// ErrUnavailable) and what exactly is wrong.
type Error struct {
	Kind   error
	Detail string
}

func (e *Error) Error() string { return e.Kind.Error() + ": " + e.Detail }

// Unwrap makes errors.Is(err, e.Kind) hold.
func (e *Error) Unwrap() error { return e.Kind }

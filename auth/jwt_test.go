package auth_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/aguard/aguard/auth"
	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/jwttest"
)

// TestMain fails the package if a fetch goroutine outlives its tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	issuer   = jwttest.Issuer
	audience = jwttest.Audience
)

func newJWT(t *testing.T, opt auth.JWTOptions) *auth.JWT {
	t.Helper()
	if opt.Issuer == "" {
		opt.Issuer = issuer
	}
	if opt.Audience == "" {
		opt.Audience = audience
	}
	j, err := auth.NewJWT(context.Background(), opt)
	if err != nil {
		t.Fatalf("NewJWT(%s): %v", opt.JWKS, err)
	}
	t.Cleanup(func() { j.Close(context.Background()) })
	return j
}

// bearer is the headers of a request with "Authorization: Bearer token".
func bearer(token string) auth.Headers {
	return headers("Authorization", "Bearer "+token)
}

func headers(kv ...string) auth.Headers {
	return func(name string) []string {
		var out []string
		for i := 0; i+1 < len(kv); i += 2 {
			if strings.EqualFold(kv[i], name) {
				out = append(out, kv[i+1])
			}
		}
		return out
	}
}

// waitReady waits until j has a key set.
func waitReady(t *testing.T, j *auth.JWT) {
	t.Helper()
	waitUntil(t, "a key set is fetched", func() bool { ok, _ := j.Ready(); return ok })
}

// waitUntil is await.Within with room for a fetch that fails first (the
// key set is retried every 10 s).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	await.Within(t, 20*time.Second, what, cond)
}

// TestTokensSignedByTheKeySetAuthenticate checks RS256 and ES256 tokens from
// keys generated here, published at a URL: each proves its subject, issuer
// and claims; a case-insensitive scheme works too.
func TestTokensSignedByTheKeySetAuthenticate(t *testing.T) {
	rs, es := jwttest.RSA(t, "rsa-1"), jwttest.EC(t, "ec-1")
	srv := jwttest.Serve(t, rs, es)
	j := newJWT(t, auth.JWTOptions{JWKS: srv.URL + "/.well-known/jwks.json"})
	waitReady(t, j)
	for _, s := range []jwttest.Key{rs, es} {
		t.Run(s.Alg.String(), func(t *testing.T) {
			tok := s.Sign(t, jwttest.Claims{Subject: "alice@example.com", Extra: map[string]any{"roles": []string{"admin", "billing"}}})
			for _, h := range []auth.Headers{bearer(tok), headers("authorization", "bearer  "+tok)} {
				id, err := j.Authenticate(context.Background(), h)
				if err != nil {
					t.Fatalf("Authenticate: %v", err)
				}
				if id.Subject != "alice@example.com" || id.Issuer != issuer || id.Source != auth.SourceJWT {
					t.Errorf("identity %+v", id)
				}
				var c map[string]any
				if err := json.Unmarshal(id.Claims, &c); err != nil || c["sub"] != "alice@example.com" || len(c["roles"].([]any)) != 2 {
					t.Errorf("claims %s (%v)", id.Claims, err)
				}
			}
		})
	}
}

// TestBadTokensAreRefused covers every way a token must fail: expired, not
// yet valid, another issuer, another audience, a key outside the set
// (under a key id the set holds, and under one it does not), no signature
// (alg none), an HMAC signed with the public key, no exp, no sub, garbage;
// and requests without a bearer token at all.
func TestBadTokensAreRefused(t *testing.T) {
	rs, es := jwttest.RSA(t, "rsa-1"), jwttest.EC(t, "ec-1")
	srv := jwttest.Serve(t, rs, es)
	j := newJWT(t, auth.JWTOptions{JWKS: srv.URL})
	waitReady(t, j)

	foreignSameKid, foreignNewKid := jwttest.RSA(t, "rsa-1"), jwttest.EC(t, "ec-9")
	none := func() string {
		// A token with "alg":"none" and no signature (RFC 7519 §6.1).
		enc := base64.RawURLEncoding.EncodeToString
		head := enc([]byte(`{"alg":"none","typ":"JWT","kid":"rsa-1"}`))
		body, _ := json.Marshal(map[string]any{"sub": "mallory", "iss": issuer, "aud": audience, "exp": time.Now().Add(time.Hour).Unix()})
		return head + "." + enc(body) + "."
	}()
	hmacWithPublicKey := func() string {
		pub, _ := rs.Private.PublicKey()
		pem, err := jwk.EncodePEM(pub)
		if err != nil {
			t.Fatal(err)
		}
		k, err := jwk.Import(pem)
		if err != nil {
			t.Fatal(err)
		}
		k.Set(jwk.KeyIDKey, "rsa-1")
		return jwttest.Key{Alg: jwa.HS256(), Private: k}.Sign(t, jwttest.Claims{})
	}()
	for _, tt := range []struct {
		name  string
		h     auth.Headers
		kind  error
		about string
	}{
		{"expired", bearer(rs.Sign(t, jwttest.Claims{Expires: time.Now().Add(-time.Hour)})), auth.ErrInvalidToken, "exp"},
		{"not yet valid", bearer(es.Sign(t, jwttest.Claims{NotBefore: time.Now().Add(time.Hour)})), auth.ErrInvalidToken, "nbf"},
		{"wrong issuer", bearer(rs.Sign(t, jwttest.Claims{Issuer: "https://evil.example/"})), auth.ErrInvalidToken, "iss"},
		{"wrong audience", bearer(es.Sign(t, jwttest.Claims{Audience: "another-service"})), auth.ErrInvalidToken, "aud"},
		{"foreign key under a known key id", bearer(foreignSameKid.Sign(t, jwttest.Claims{})), auth.ErrInvalidToken, ""},
		{"foreign key under an unknown key id", bearer(foreignNewKid.Sign(t, jwttest.Claims{})), auth.ErrInvalidToken, ""},
		{"alg none", bearer(none), auth.ErrInvalidToken, ""},
		{"HMAC keyed with the public key", bearer(hmacWithPublicKey), auth.ErrInvalidToken, ""},
		{"no exp", bearer(rs.Sign(t, jwttest.Claims{NoExpiry: true})), auth.ErrInvalidToken, "exp"},
		{"garbage", bearer("not.a.jwt"), auth.ErrInvalidToken, ""},
		{"two Authorization headers", headers("Authorization", "Bearer "+rs.Sign(t, jwttest.Claims{}), "Authorization", "Bearer x"), auth.ErrInvalidToken, "several"},
		{"no Authorization header", headers(), auth.ErrNoCredentials, ""},
		{"Basic credentials", headers("Authorization", "Basic YWxpY2U6c2VjcmV0"), auth.ErrNoCredentials, "Bearer"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			id, err := j.Authenticate(context.Background(), tt.h)
			if id != nil || !errors.Is(err, tt.kind) {
				t.Fatalf("Authenticate = %+v, %v; want %v", id, err, tt.kind)
			}
			if !strings.Contains(err.Error(), tt.about) {
				t.Errorf("the error %q does not name %q", err, tt.about)
			}
		})
	}
	// A token without sub proves no one: it is refused too.
	if _, err := j.Authenticate(context.Background(), bearer(rs.Sign(t, jwttest.Claims{Subject: "-"}))); err != nil {
		t.Fatalf("a token with a subject: %v", err)
	}
	noSub := func() string {
		tok, _ := jwt.NewBuilder().Issuer(issuer).Audience([]string{audience}).Expiration(time.Now().Add(time.Hour)).Build()
		b, err := jwt.Sign(tok, jwt.WithKey(rs.Alg, rs.Private))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}()
	if _, err := j.Authenticate(context.Background(), bearer(noSub)); !errors.Is(err, auth.ErrInvalidToken) || !strings.Contains(err.Error(), "sub") {
		t.Errorf("a token without sub: %v, want ErrInvalidToken naming sub", err)
	}
}

// TestKeysRotateWithoutARestart rotates the published key set while the
// Authenticator runs: a token signed by the new key authenticates at its
// first request (its unknown key id fetches the set at once), and once the
// old key is gone from the set its tokens no longer do. Then, with the
// periodic refresh alone, a removed key stops verifying.
func TestKeysRotateWithoutARestart(t *testing.T) {
	old, next, third := jwttest.RSA(t, "2026-01"), jwttest.EC(t, "2026-02"), jwttest.RSA(t, "2026-03")
	srv := jwttest.Serve(t, old)
	j := newJWT(t, auth.JWTOptions{JWKS: srv.URL, Refresh: time.Second})
	waitReady(t, j)
	oldTok, nextTok := old.Sign(t, jwttest.Claims{}), next.Sign(t, jwttest.Claims{Subject: "bob"})
	if _, err := j.Authenticate(context.Background(), bearer(oldTok)); err != nil {
		t.Fatalf("before the rotation, the old key's token: %v", err)
	}

	srv.Publish(t, next) // the issuer rotates: only the next key
	id, err := j.Authenticate(context.Background(), bearer(nextTok))
	if err != nil || id.Subject != "bob" {
		t.Fatalf("after the rotation, the next key's token = %+v, %v", id, err)
	}
	if _, err := j.Authenticate(context.Background(), bearer(oldTok)); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("after the rotation, the old key's token: %v, want it refused", err)
	}

	// The periodic refresh (every second here) takes up a set that drops
	// a key without any request asking.
	srv.Publish(t, third)
	waitUntil(t, "the periodic refresh drops the next key", func() bool {
		_, err := j.Authenticate(context.Background(), bearer(nextTok))
		return errors.Is(err, auth.ErrInvalidToken)
	})
	if _, err := j.Authenticate(context.Background(), bearer(third.Sign(t, jwttest.Claims{}))); err != nil {
		t.Fatalf("the third key's token: %v", err)
	}
}

// TestAnUnknownKeyIDCannotHammerTheIssuer pins the bound on fetches that
// tokens with forged key ids cause: a burst of them fetches the set once.
func TestAnUnknownKeyIDCannotHammerTheIssuer(t *testing.T) {
	known := jwttest.RSA(t, "known")
	srv := jwttest.Serve(t, known)
	j := newJWT(t, auth.JWTOptions{JWKS: srv.URL})
	waitReady(t, j)
	before := srv.Fetches()
	var wg sync.WaitGroup
	for i := range 50 {
		forged := jwttest.EC(t, "forged-"+string(rune('a'+i%26)))
		tok := forged.Sign(t, jwttest.Claims{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := j.Authenticate(context.Background(), bearer(tok)); !errors.Is(err, auth.ErrInvalidToken) {
				t.Errorf("a forged key's token: %v", err)
			}
		}()
	}
	wg.Wait()
	if n := srv.Fetches() - before; n != 1 {
		t.Errorf("50 tokens with unknown key ids fetched the set %d times, want once", n)
	}
}

// TestAKeySetThatCannotBeFetchedFailsClosed covers the issuer being down:
// before any set was fetched, tokens are refused as unavailable and Ready
// says not ready; after one was, its keys keep verifying while Ready says
// degraded and the failures are counted; a good fetch clears it.
func TestAKeySetThatCannotBeFetchedFailsClosed(t *testing.T) {
	k := jwttest.RSA(t, "k1")
	srv := jwttest.Serve(t, k)
	srv.Fail(true)
	reg := prometheus.NewRegistry()
	j := newJWT(t, auth.JWTOptions{JWKS: srv.URL, Refresh: time.Second, Registerer: reg})
	tok := k.Sign(t, jwttest.Claims{})

	waitUntil(t, "a failed fetch is recorded", func() bool {
		return metric(t, reg, "aguard_auth_jwks_fetches_total", "error") > 0
	})
	if ok, why := j.Ready(); ok || !strings.Contains(why, "no key set fetched yet") || !strings.Contains(why, "500") {
		t.Errorf("Ready before any fetch = %v, %q", ok, why)
	}
	if _, err := j.Authenticate(context.Background(), bearer(tok)); !errors.Is(err, auth.ErrUnavailable) {
		t.Fatalf("a valid token before any key set: %v, want ErrUnavailable", err)
	}

	srv.Publish(t, k)
	waitReady(t, j)
	if _, err := j.Authenticate(context.Background(), bearer(tok)); err != nil {
		t.Fatalf("once fetched: %v", err)
	}
	failures := metric(t, reg, "aguard_auth_jwks_fetches_total", "error")
	srv.Fail(true)
	waitUntil(t, "Ready says degraded", func() bool { ok, why := j.Ready(); return ok && why != "" })
	if _, why := j.Ready(); !strings.Contains(why, "last good set") {
		t.Errorf("degraded reason %q", why)
	}
	if got := metric(t, reg, "aguard_auth_jwks_fetches_total", "error"); got <= failures {
		t.Errorf("failed fetches counted %v, want more than %v", got, failures)
	}
	if _, err := j.Authenticate(context.Background(), bearer(tok)); err != nil {
		t.Fatalf("with the issuer down, a token of the last good set: %v", err)
	}
	srv.Publish(t, k)
	waitUntil(t, "Ready is clear again", func() bool { ok, why := j.Ready(); return ok && why == "" })
	if got := metric(t, reg, "aguard_auth_jwks_keys", ""); got != 1 {
		t.Errorf("aguard_auth_jwks_keys = %v, want 1", got)
	}
}

// TestAKeySetFile reads the set from a file: one that does not exist or
// holds a secret key stops NewJWT; a file rewritten with a new key is taken
// up by the first token signed with it.
func TestAKeySetFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "jwks.json")
	if _, err := auth.NewJWT(context.Background(), auth.JWTOptions{JWKS: path, Issuer: issuer, Audience: audience}); err == nil {
		t.Fatal("NewJWT with a missing file succeeded")
	}
	os.WriteFile(path, []byte(`{"keys":[{"kty":"oct","kid":"s","k":"c2VjcmV0"}]}`), 0o600)
	if _, err := auth.NewJWT(context.Background(), auth.JWTOptions{JWKS: path, Issuer: issuer, Audience: audience}); err == nil || !strings.Contains(err.Error(), "symmetric") {
		t.Fatalf("NewJWT with a secret key = %v, want an error naming it", err)
	}
	if _, err := auth.NewJWT(context.Background(), auth.JWTOptions{JWKS: path}); err == nil || !strings.Contains(err.Error(), "issuer and an audience") {
		t.Fatalf("NewJWT without issuer and audience = %v", err)
	}

	a, b := jwttest.EC(t, "a"), jwttest.RSA(t, "b")
	os.WriteFile(path, jwttest.JWKS(t, a), 0o600)
	j := newJWT(t, auth.JWTOptions{JWKS: path})
	if ok, why := j.Ready(); !ok || why != "" {
		t.Fatalf("a file key set is not ready at once: %v %q", ok, why)
	}
	if _, err := j.Authenticate(context.Background(), bearer(a.Sign(t, jwttest.Claims{}))); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path+".new", jwttest.JWKS(t, b), 0o600)
	os.Rename(path+".new", path)
	if _, err := j.Authenticate(context.Background(), bearer(b.Sign(t, jwttest.Claims{}))); err != nil {
		t.Fatalf("a key added to the file: %v", err)
	}
}

// TestTheTrustedHeader covers --auth-header: the subject as the ingress
// set it; missing, empty and repeated headers refused.
func TestTheTrustedHeader(t *testing.T) {
	h := auth.Header{Name: "X-Authenticated-User"}
	id, err := h.Authenticate(context.Background(), headers("x-authenticated-user", " alice "))
	if err != nil || id.Subject != "alice" || id.Source != auth.SourceHeader || id.Claims != nil {
		t.Fatalf("Authenticate = %+v, %v", id, err)
	}
	for name, hs := range map[string]auth.Headers{
		"missing":  headers("X-User", "alice"),
		"empty":    headers("X-Authenticated-User", " "),
		"repeated": headers("X-Authenticated-User", "admin", "X-Authenticated-User", "alice"),
	} {
		want := auth.ErrNoCredentials
		if name == "repeated" {
			want = auth.ErrInvalidToken
		}
		if id, err := h.Authenticate(context.Background(), hs); id != nil || !errors.Is(err, want) {
			t.Errorf("%s: %+v, %v; want %v", name, id, err, want)
		}
	}
}

// metric is the value of the series name{result=…} (any series when
// result is "") in reg, summed.
func metric(t *testing.T, reg *prometheus.Registry, name, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := result == ""
			for _, l := range m.GetLabel() {
				match = match || (l.GetName() == "result" && l.GetValue() == result)
			}
			if match {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

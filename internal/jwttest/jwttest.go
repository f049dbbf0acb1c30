// Package jwttest is test support: an identity provider in a test. It
// generates signing keys (RSA and ECDSA), signs JWTs with them, and serves
// their public key set over real HTTP, where a test can rotate the keys or
// make the provider fail. It is not part of aguard's runtime.
package jwttest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"
)

// The issuer and audience tokens carry unless Claims says otherwise.
const (
	Issuer   = "https://idp.example.test/"
	Audience = "aguard-data-plane"
)

// Key is a signing key generated for a test, with its algorithm.
type Key struct {
	Alg     jwa.SignatureAlgorithm
	Private jwk.Key
}

// RSA returns a new 2048-bit RSA key that signs RS256, with key id kid.
func RSA(t testing.TB, kid string) Key {
	t.Helper()
	raw, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return importKey(t, raw, kid, jwa.RS256())
}

// EC returns a new P-256 key that signs ES256, with key id kid.
func EC(t testing.TB, kid string) Key {
	t.Helper()
	raw, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return importKey(t, raw, kid, jwa.ES256())
}

// Import makes a Key of raw (a private key or HMAC secret) signing alg.
func Import(t testing.TB, raw any, kid string, alg jwa.SignatureAlgorithm) Key {
	t.Helper()
	return importKey(t, raw, kid, alg)
}

func importKey(t testing.TB, raw any, kid string, alg jwa.SignatureAlgorithm) Key {
	t.Helper()
	k, err := jwk.Import(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Set(jwk.KeyIDKey, kid); err != nil {
		t.Fatal(err)
	}
	return Key{Alg: alg, Private: k}
}

// Claims are a token's claims. The zero value is a valid token's: subject
// "alice", Issuer, Audience, issued now, expiring in an hour.
type Claims struct {
	Subject, Issuer, Audience string
	Expires, NotBefore        time.Time
	// NoExpiry leaves exp out.
	NoExpiry bool
	// Extra claims, by name.
	Extra map[string]any
}

// Sign returns a compact JWT with c, signed by k.
func (k Key) Sign(t testing.TB, c Claims) string {
	t.Helper()
	b := jwt.NewBuilder().Subject("alice").Issuer(Issuer).Audience([]string{Audience}).
		IssuedAt(time.Now()).Expiration(time.Now().Add(time.Hour))
	if c.Subject != "" {
		b = b.Subject(c.Subject)
	}
	if c.Issuer != "" {
		b = b.Issuer(c.Issuer)
	}
	if c.Audience != "" {
		b = b.Audience([]string{c.Audience})
	}
	if !c.Expires.IsZero() {
		b = b.Expiration(c.Expires)
	}
	if !c.NotBefore.IsZero() {
		b = b.NotBefore(c.NotBefore)
	}
	for name, v := range c.Extra {
		b = b.Claim(name, v)
	}
	tok, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if c.NoExpiry {
		if err := tok.Remove(jwt.ExpirationKey); err != nil {
			t.Fatal(err)
		}
	}
	signed, err := jwt.Sign(tok, jwt.WithKey(k.Alg, k.Private))
	if err != nil {
		t.Fatal(err)
	}
	return string(signed)
}

// JWKS is the public key set of keys, as an issuer publishes it.
func JWKS(t testing.TB, keys ...Key) []byte {
	t.Helper()
	set := jwk.NewSet()
	for _, k := range keys {
		pub, err := k.Private.PublicKey()
		if err != nil {
			t.Fatal(err)
		}
		if err := set.AddKey(pub); err != nil {
			t.Fatal(err)
		}
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Server publishes a key set over HTTP on loopback and counts its fetches.
type Server struct {
	*httptest.Server
	mu      sync.Mutex
	body    []byte
	fail    bool
	fetches atomic.Int64
}

// Serve starts a Server publishing keys; it stops with the test.
func Serve(t testing.TB, keys ...Key) *Server {
	t.Helper()
	s := &Server{body: JWKS(t, keys...)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		body, fail := s.body, s.fail
		s.mu.Unlock()
		if fail {
			http.Error(w, "identity provider down", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

// Publish replaces the key set served: a rotation.
func (s *Server) Publish(t testing.TB, keys ...Key) {
	body := JWKS(t, keys...)
	s.mu.Lock()
	s.body, s.fail = body, false
	s.mu.Unlock()
}

// Fail makes the server answer 500 (down) or serve its key set again.
func (s *Server) Fail(down bool) {
	s.mu.Lock()
	s.fail = down
	s.mu.Unlock()
}

// Fetches is the number of requests the server answered so far.
func (s *Server) Fetches() int64 { return s.fetches.Load() }

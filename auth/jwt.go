package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lestrrat-go/httprc/v3"
	"github.com/lestrrat-go/httprc/v3/errsink"
	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"github.com/prometheus/client_golang/prometheus"
)

// Bounds and defaults of the JWT Authenticator (README, limits table).
const (
	// DefaultRefresh is how often the key set is fetched again.
	DefaultRefresh = 5 * time.Minute
	// DefaultLeeway is the clock skew allowed on exp, nbf and iat.
	DefaultLeeway = 30 * time.Second
	// MaxJWKSBytes bounds a key set document.
	MaxJWKSBytes = 1 << 20
	// retryFailed is the longest wait before a failed fetch is tried again.
	retryFailed = 10 * time.Second
	// forceEvery bounds the fetches a token with an unknown key id may
	// cause: one at a time, at most one per this interval, so that forged
	// key ids cannot make aguard hammer the key set's server.
	forceEvery = 10 * time.Second
	// forceTimeout bounds the wait of a request for such a fetch.
	forceTimeout = 5 * time.Second
	// fetchTimeout bounds one fetch of a URL.
	fetchTimeout = 10 * time.Second
)

// JWTOptions configure NewJWT.
type JWTOptions struct {
	// JWKS is where the key set is: an http:// or https:// URL, or a file
	// path. Both are fetched again every Refresh.
	JWKS string
	// Issuer is the iss a token must carry, and Audience one of its aud.
	// Both are required.
	Issuer, Audience string
	// Refresh is how often the key set is fetched again (default 5m). A
	// failed fetch is retried within 10 s; a token whose key id the set does
	// not hold makes it fetched at once (at most once per 10 s), so that a
	// rotated key is taken up by the first request that uses it.
	Refresh time.Duration
	// Leeway is the clock skew allowed on exp, nbf and iat (default 30s).
	Leeway time.Duration
	// Client fetches a URL (default: 10 s timeout).
	Client *http.Client
	// Logger receives fetch failures and recoveries (default: discard).
	Logger *slog.Logger
	// Registerer, when set, registers aguard_auth_jwks_fetches_total
	// {result="ok|error"} and aguard_auth_jwks_keys.
	Registerer prometheus.Registerer
	// Now is the clock tokens are validated by (default time.Now).
	Now func() time.Time
}

// JWT is the Authenticator for bearer JWTs (RFC 6750, RFC 7519): a token
// must be signed by a key of the key set (an asymmetric algorithm; "none"
// and keys outside the set never verify), carry exp and sub, be unexpired
// and already valid (nbf, iat) within the leeway, come from the issuer and
// name the audience. Create it with NewJWT; Close it.
type JWT struct {
	source   string // what the key set is fetched from, as configured
	fetchURL string // the URL httprc fetches (file:// for a file)
	issuer   string
	audience string
	leeway   time.Duration
	now      func() time.Time
	log      *slog.Logger
	m        *metrics

	ctrl httprc.Controller
	res  *httprc.ResourceBase[jwk.Set]

	mu           sync.Mutex // guards the fields below
	fetchedAt    time.Time  // the last successful fetch
	failing      error      // the last fetch's error while fetches fail; nil after a success
	failingSince time.Time

	forceMu    sync.Mutex // one forced fetch at a time
	lastForced time.Time
}

// NewJWT checks opt and starts fetching the key set. A key set in a file
// must be readable and valid at once (an error otherwise); one at a URL is
// fetched in the background, and until it arrives Ready reports false and
// Authenticate refuses with ErrUnavailable.
func NewJWT(ctx context.Context, opt JWTOptions) (*JWT, error) {
	if opt.JWKS == "" {
		return nil, errors.New("auth: no key set (JWKS) given")
	}
	if opt.Issuer == "" || opt.Audience == "" {
		return nil, fmt.Errorf("auth: key set %s: an issuer and an audience are required: a token for another audience or from another issuer must not pass", opt.JWKS)
	}
	if opt.Refresh <= 0 {
		opt.Refresh = DefaultRefresh
	}
	if opt.Leeway <= 0 {
		opt.Leeway = DefaultLeeway
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	m, err := newMetrics(opt.Registerer)
	if err != nil {
		return nil, err
	}
	j := &JWT{source: opt.JWKS, issuer: opt.Issuer, audience: opt.Audience, leeway: opt.Leeway, now: opt.Now,
		log: opt.Logger.With("component", "auth", "jwks", redact(opt.JWKS)), m: m}

	client := opt.Client
	file := !strings.HasPrefix(opt.JWKS, "http://") && !strings.HasPrefix(opt.JWKS, "https://")
	if file {
		abs, err := filepath.Abs(opt.JWKS)
		if err != nil {
			return nil, fmt.Errorf("auth: key set file %s: %w", opt.JWKS, err)
		}
		j.fetchURL = (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
		client = &http.Client{Transport: http.NewFileTransport(http.Dir("/"))}
	} else {
		if _, err := url.Parse(opt.JWKS); err != nil {
			return nil, fmt.Errorf("auth: key set URL: %w", err)
		}
		j.fetchURL = opt.JWKS
		if client == nil {
			client = &http.Client{Timeout: fetchTimeout}
		}
	}
	res, err := httprc.NewResource[jwk.Set](j.fetchURL, setTransformer{j},
		httprc.WithHTTPClient(client),
		httprc.WithConstantInterval(opt.Refresh),
		httprc.WithMinInterval(min(opt.Refresh, retryFailed)))
	if err != nil {
		return nil, fmt.Errorf("auth: key set %s: %w", redact(opt.JWKS), err)
	}
	j.res = res
	// The controller outlives ctx: Close stops it.
	j.ctrl, err = httprc.NewClient(httprc.WithWorkers(1),
		httprc.WithErrorSink(errsink.NewFunc(func(_ context.Context, err error) { j.failed(err) })),
	).Start(context.WithoutCancel(ctx))
	if err != nil {
		return nil, fmt.Errorf("auth: start fetching the key set: %w", err)
	}
	if err := j.ctrl.Add(ctx, res, httprc.WithWaitReady(false)); err != nil {
		j.ctrl.ShutdownContext(ctx)
		return nil, fmt.Errorf("auth: key set %s: %w", redact(opt.JWKS), err)
	}
	if file {
		// A file is there or not: say so now, not at the first request.
		if err := j.ctrl.Refresh(ctx, j.fetchURL); err != nil {
			j.ctrl.ShutdownContext(ctx)
			return nil, fmt.Errorf("auth: key set file %s: %w", opt.JWKS, err)
		}
	}
	return j, nil
}

// Authenticate implements Authenticator.
func (j *JWT) Authenticate(ctx context.Context, h Headers) (*Identity, error) {
	vs := h("Authorization")
	switch {
	case len(vs) == 0:
		return nil, &Error{Kind: ErrNoCredentials, Detail: "the request has no Authorization header"}
	case len(vs) > 1:
		return nil, &Error{Kind: ErrInvalidToken, Detail: "the request has several Authorization headers"}
	}
	scheme, token, _ := strings.Cut(vs[0], " ")
	token = strings.TrimLeft(token, " ")
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return nil, &Error{Kind: ErrNoCredentials, Detail: "the Authorization header is not a Bearer token"}
	}
	set := j.res.Resource()
	if set == nil {
		return nil, &Error{Kind: ErrUnavailable, Detail: j.unavailable()}
	}
	id, err := j.verify(set, token)
	if err != nil && j.unknownKey(set, token) {
		// A key the set does not hold yet: the issuer may have rotated
		// its keys. Fetch the set again (bounded), and try once more.
		if fresh := j.force(ctx); fresh != nil && fresh != set {
			id, err = j.verify(fresh, token)
		}
	}
	return id, err
}

// verify checks token against set, the issuer and the audience.
func (j *JWT) verify(set jwk.Set, token string) (*Identity, error) {
	tok, err := jwt.Parse([]byte(token),
		jwt.WithKeySet(set, jws.WithInferAlgorithmFromKey(true), jws.WithUseDefault(true)),
		jwt.WithValidate(true),
		jwt.WithIssuer(j.issuer),
		jwt.WithAudience(j.audience),
		jwt.WithRequiredClaim(jwt.ExpirationKey),
		jwt.WithRequiredClaim(jwt.SubjectKey),
		jwt.WithAcceptableSkew(j.leeway),
		jwt.WithClock(jwt.ClockFunc(j.now)),
	)
	if err != nil {
		return nil, &Error{Kind: ErrInvalidToken, Detail: err.Error()}
	}
	sub, _ := tok.Subject()
	iss, _ := tok.Issuer()
	claims, err := json.Marshal(tok)
	if err != nil {
		return nil, &Error{Kind: ErrInvalidToken, Detail: "its claims cannot be encoded: " + err.Error()}
	}
	return &Identity{Subject: sub, Issuer: iss, Claims: claims, Source: SourceJWT}, nil
}

// unknownKey reports a token whose key id the set does not hold.
func (j *JWT) unknownKey(set jwk.Set, token string) bool {
	msg, err := jws.Parse([]byte(token))
	if err != nil || len(msg.Signatures()) != 1 {
		return false
	}
	kid, ok := msg.Signatures()[0].ProtectedHeaders().KeyID()
	if !ok || kid == "" {
		return false
	}
	_, held := set.LookupKeyID(kid)
	return !held
}

// force fetches the key set at once, unless a fetch was forced less than
// forceEvery ago, and returns the set then current. Concurrent callers wait
// for the one fetch.
func (j *JWT) force(ctx context.Context) jwk.Set {
	j.forceMu.Lock()
	defer j.forceMu.Unlock()
	if now := time.Now(); now.Sub(j.lastForced) >= forceEvery {
		j.lastForced = now
		ctx, cancel := context.WithTimeout(ctx, forceTimeout)
		err := j.ctrl.Refresh(ctx, j.fetchURL)
		cancel()
		if err != nil {
			// The controller reports a refresh's failure to its caller
			// only.
			j.failed(err)
		}
	}
	return j.res.Resource()
}

// Ready implements Authenticator: not ready until a key set has been
// fetched; degraded while fetches fail after one was.
func (j *JWT) Ready() (bool, string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.fetchedAt.IsZero() {
		return false, "auth: " + j.unavailableLocked()
	}
	if j.failing != nil {
		return true, fmt.Sprintf("auth: the key set cannot be fetched from %s since %s (%v); tokens are verified with the last good set, fetched at %s",
			redact(j.source), j.failingSince.UTC().Format(time.RFC3339), j.failing, j.fetchedAt.UTC().Format(time.RFC3339))
	}
	return true, ""
}

func (j *JWT) unavailable() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.unavailableLocked()
}

func (j *JWT) unavailableLocked() string {
	if j.failing != nil {
		return fmt.Sprintf("no key set fetched yet from %s: %v", redact(j.source), j.failing)
	}
	return "no key set fetched yet from " + redact(j.source)
}

// Close implements Authenticator: it stops the fetches.
func (j *JWT) Close(ctx context.Context) error {
	return j.ctrl.ShutdownContext(ctx)
}

// fetched records a successful fetch of set.
func (j *JWT) fetched(set jwk.Set) {
	j.m.fetches.WithLabelValues("ok").Inc()
	j.m.keys.Set(float64(set.Len()))
	j.mu.Lock()
	recovered, first := j.failing, j.fetchedAt.IsZero()
	j.fetchedAt, j.failing = time.Now(), nil
	j.mu.Unlock()
	switch {
	case recovered != nil:
		j.log.Info("key set fetched again", "keys", set.Len())
	case first:
		j.log.Info("key set fetched", "keys", set.Len())
	}
}

// failed records a failed fetch: the last good set, if any, stays in use.
func (j *JWT) failed(err error) {
	j.m.fetches.WithLabelValues("error").Inc()
	j.mu.Lock()
	if j.failing == nil {
		j.failingSince = time.Now()
	}
	j.failing = err
	have := !j.fetchedAt.IsZero()
	j.mu.Unlock()
	j.log.Warn("key set fetch failed", "err", err, "servingLastGoodSet", have)
}

// setTransformer reads a fetched key set: at most MaxJWKSBytes, with at
// least one key and no symmetric key (a key set publishes public keys; a
// secret one would let whoever read it sign tokens).
type setTransformer struct{ j *JWT }

func (t setTransformer) Transform(_ context.Context, res *http.Response) (jwk.Set, error) {
	body, err := io.ReadAll(io.LimitReader(res.Body, MaxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read the key set: %w", err)
	}
	if len(body) > MaxJWKSBytes {
		return nil, fmt.Errorf("the key set is larger than %d bytes", MaxJWKSBytes)
	}
	set, err := jwk.Parse(body)
	if err != nil {
		return nil, fmt.Errorf("the key set is not a JWK set: %w", err)
	}
	if set.Len() == 0 {
		return nil, errors.New("the key set holds no key")
	}
	for i := range set.Len() {
		k, _ := set.Key(i)
		if k.KeyType() == jwa.OctetSeq() {
			kid, _ := k.KeyID()
			return nil, fmt.Errorf("the key set holds a symmetric key (kid %q): it must hold public keys only", kid)
		}
	}
	t.j.fetched(set)
	return set, nil
}

// redact is a key set's source for logs and messages: a URL without its
// user info and query, which may hold credentials.
func redact(source string) string {
	u, err := url.Parse(source)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return source
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

type metrics struct {
	fetches *prometheus.CounterVec
	keys    prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aguard_auth_jwks_fetches_total",
			Help: "Fetches of the JWT key set (--auth-jwks), by result: ok, error (the last good set stays in use)."}, []string{"result"}),
		keys: prometheus.NewGauge(prometheus.GaugeOpts{Name: "aguard_auth_jwks_keys",
			Help: "Keys in the JWT key set in use."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.fetches, m.keys} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("auth: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/aguard/aguard/admin"
	"github.com/aguard/aguard/auth"
	"github.com/aguard/aguard/config"
	"github.com/aguard/aguard/internal/logging"
	"github.com/aguard/aguard/internal/memtidy"
	"github.com/aguard/aguard/internal/procs"
	"github.com/aguard/aguard/internal/tracing"
	"github.com/aguard/aguard/policy"
	"github.com/aguard/aguard/proxy"
	"github.com/aguard/aguard/state"
	"github.com/aguard/aguard/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
)

// serve runs the proxy until ctx is done (SIGTERM), then drains.
func serve(ctx context.Context, cfg *config.Config, stderr io.Writer) error {
	// Lines go out in batches (logging.BatchDelay): flushed when serve
	// returns, after the last line of the drain.
	out := logging.Batch(stderr)
	defer out.Close()
	log := logging.New(cfg.LogFormat, out)
	defer logging.Capture(log)()
	ready, err := startServe(ctx, cfg, log)
	if err != nil {
		log.Error("aguard could not start", "err", err)
		return errReported
	}
	<-ctx.Done()
	if err := ready.shutdown(cfg.DrainTimeout); err != nil {
		log.Error("aguard did not stop cleanly", "err", err)
		return errReported
	}
	return nil
}

// errReported is an error already written to the structured log: the
// command exits 1 without printing it again.
var errReported = errors.New("reported in the log")

// running is a started proxy with its admin listener.
type running struct {
	proxy     *proxy.Proxy
	authn     auth.Authenticator // nil: consumers are not authenticated
	policy    *policy.Engine
	store     *state.Store
	hooks     *webhook.Notifier
	traces    *tracing.Provider // nil: tracing is off
	admin     *http.Server
	addr      net.Addr
	adminAddr net.Addr
	log       *slog.Logger
	serveErr  chan error
	// hooksRedis holds the webhook deliveries (nil without Redis).
	hooksRedis redis.UniversalClient
	// tidy returns memory to the system when aguard goes quiet after a
	// burst (idle streams hold less).
	tidy *memtidy.Tidy
	// procs fits GOMAXPROCS to the load (nil when GOMAXPROCS is set).
	procs *procs.Governor
}

// closeRedis closes c, if any.
func closeRedis(c redis.UniversalClient) {
	if c != nil {
		_ = c.Close()
	}
}

func startServe(ctx context.Context, cfg *config.Config, log *slog.Logger) (*running, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo())
	traces, err := tracing.New(ctx, lookupEnv, version, log)
	if err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			traces.Shutdown(context.Background())
		}
	}()
	budget, err := newBudget(cfg, log, reg)
	if err != nil {
		return nil, err
	}
	engine, policyReady, err := newPolicyEngine(ctx, cfg, log, reg)
	if err != nil {
		return nil, err
	}
	reviewers, err := newReviewers(cfg, log)
	if err != nil {
		return nil, err
	}
	// With Redis, webhook deliveries wait in it, for whichever replica is
	// alive to deliver.
	var hooksRedis redis.UniversalClient
	if cfg.Redis != "" && len(cfg.Webhooks) > 0 {
		if hooksRedis, err = state.NewRedisClient(cfg.RedisMode, cfg.Redis); err != nil {
			return nil, fmt.Errorf("webhook: %w", err)
		}
	}
	hooks, err := webhook.New(webhook.Options{URLs: cfg.Webhooks, Secret: cfg.WebhookSecret, QueueBytes: cfg.WebhookQueueBytes,
		Logger: log, Registerer: reg, Redis: hooksRedis})
	if err != nil {
		closeRedis(hooksRedis)
		return nil, fmt.Errorf("webhook: %w", err)
	}
	authn, err := newAuthenticator(ctx, cfg, log, reg)
	if err != nil {
		hooks.Close(context.Background())
		return nil, err
	}
	ready := []admin.Check{}
	if authn != nil {
		ready = append(ready, authn.Ready)
	}
	// Redis being down at start is not fatal: the store starts degraded and
	// catches up when Redis answers. The calls the store ends by itself
	// (approvals past their deadline, calls of runs lost with a replica)
	// get their webhook like any other.
	store, err := state.Open(ctx, state.Options{
		RedisURL: cfg.Redis, RedisMode: cfg.RedisMode, RedisTimeout: cfg.RedisTimeout, WriteDelay: writeDelay(cfg.RedisWriteDelay), CacheSize: cfg.LedgerCache, CacheBytes: cfg.LedgerCacheBytes,
		ProtectedBytes: cfg.LedgerProtected, Logger: log, Registerer: reg,
		OnEnd: func(c *state.ToolCall) { hooks.Notify(state.CallEnded, c) },
	})
	if err != nil {
		hooks.Close(context.Background())
		closeAuth(authn)
		closeRedis(hooksRedis)
		return nil, fmt.Errorf("state: %w", err)
	}
	routes := make([]proxy.Route, len(cfg.Routes))
	for i, r := range cfg.Routes {
		routes[i] = proxy.Route{Path: r.Path, Upstream: r.Upstream, Protocol: r.Protocol}
	}
	p, err := proxy.New(proxy.Options{
		Upstream:            cfg.Upstream,
		UpstreamProtocol:    cfg.UpstreamProtocol,
		Routes:              routes,
		MaxBody:             cfg.MaxBody,
		MaxEvent:            cfg.MaxEvent,
		MaxHeld:             cfg.MaxHeld,
		Heartbeat:           cfg.Heartbeat,
		UpstreamTimeout:     cfg.UpstreamTimeout,
		UpstreamIdleTimeout: cfg.UpstreamIdleTimeout,
		UpstreamKeepalive:   cfg.UpstreamKeepalive,
		Monitor:             cfg.Mode == "monitor",
		Policy:              engine,
		ApprovalTimeout:     cfg.ApprovalTimeout,
		State:               store,
		ClientToolTimeout:   cfg.ClientToolTimeout,
		Notifier:            notifier(hooks, cfg.Webhooks),
		Auth:                authn,
		AdminToken:          cfg.AdminToken,
		Logger:              log,
		Metrics:             proxy.NewMetrics(reg),
		Tracer:              traces.TracerProvider(),
		Propagator:          traces.Propagator(),
		Memory:              budget,
	})
	if err != nil {
		store.Close()
		closeAuth(authn)
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		store.Close()
		closeAuth(authn)
		return nil, fmt.Errorf("data plane: %w", err)
	}
	adminLn, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		ln.Close()
		store.Close()
		closeAuth(authn)
		return nil, fmt.Errorf("admin listener: %w", err)
	}
	r := &running{
		proxy: p, authn: authn, policy: engine, store: store, hooks: hooks, hooksRedis: hooksRedis, traces: traces, log: log, addr: ln.Addr(), adminAddr: adminLn.Addr(), serveErr: make(chan error, 2),
		admin: &http.Server{
			Handler: admin.Handler(admin.Options{
				Reviewers: reviewers,
				Logger:    log,
				Gatherer:  reg,
				Ready:     append([]admin.Check{p.Ready, policyReady, store.Ready, budget.Ready}, ready...),
				API:       admin.API(admin.APIOptions{Store: store, ClientToolTimeout: cfg.ClientToolTimeout, Notifier: hooks, Logger: log}),
			}),
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			IdleTimeout:       120 * time.Second,
		},
	}
	go func() { r.serveErr <- p.Serve(ln) }()
	go func() {
		if err := r.admin.Serve(adminLn); !errors.Is(err, http.ErrServerClosed) {
			r.serveErr <- err
		}
	}()
	revision, _ := engine.Status()
	tracesTo := "off"
	if traces != nil {
		tracesTo = traces.Protocol
	}
	log.Info("aguard listening", "listen", r.addr.String(), "admin", r.adminAddr.String(),
		"upstream", cfg.Upstream, "routes", len(cfg.Routes), "mode", cfg.Mode, "policy", policySource(cfg), "revision", revision, "redis", cfg.Redis != "",
		"auth", authSource(cfg), "reviewers", reviewers.Len(), "traces", tracesTo)
	r.tidy = memtidy.Start(memtidy.Options{Logger: log})
	r.procs = procs.Start(procs.Options{Wakeups: r.proxy.Wakeups, Logger: log})
	started = true
	return r, nil
}

// shutdown drains running streams for up to timeout, then stops both listeners.
func (r *running) shutdown(timeout time.Duration) error {
	r.log.Info("draining", "timeout", timeout)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := r.proxy.Drain(ctx); err != nil {
		r.log.Warn("drain timeout ran out; running streams ended with AGUARD_SHUTDOWN")
	}
	err := r.proxy.Close()
	closeAuth(r.authn)
	r.policy.Close(context.Background()) // the last decision-log upload
	// The ledger first: its last writes pass their webhooks on
	// (state.Store.Tell), which the notifier then delivers.
	if serr := r.store.Close(); serr != nil {
		r.log.Warn("closing the ledger", "err", serr)
	}
	hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer hcancel()
	if herr := r.hooks.Close(hctx); herr != nil {
		r.log.Warn("webhook deliveries left unsent at shutdown", "err", herr)
	}
	closeRedis(r.hooksRedis)
	tctx, tcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer tcancel()
	if terr := r.traces.Shutdown(tctx); terr != nil {
		r.log.Warn("spans left unexported at shutdown", "err", terr)
	}
	actx, acancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer acancel()
	r.admin.Shutdown(actx)
	r.tidy.Stop()
	r.procs.Stop()
	r.log.Info("stopped")
	return err
}

// newAuthenticator is who authenticates consumers: JWTs against
// --auth-jwks, the header a trusted ingress sets (--auth-header), or no one
// (nil).
func newAuthenticator(ctx context.Context, cfg *config.Config, log *slog.Logger, reg prometheus.Registerer) (auth.Authenticator, error) {
	switch {
	case cfg.AuthJWKS != "":
		j, err := auth.NewJWT(ctx, auth.JWTOptions{JWKS: cfg.AuthJWKS, Issuer: cfg.AuthIssuer, Audience: cfg.AuthAudience,
			Refresh: cfg.AuthJWKSRefresh, Logger: log, Registerer: reg})
		if err != nil {
			return nil, err
		}
		return j, nil
	case cfg.AuthHeader != "":
		return auth.Header{Name: cfg.AuthHeader}, nil
	}
	log.Warn("consumers are not authenticated: set --auth-jwks, or --auth-header behind an ingress that authenticates")
	return nil, nil
}

func closeAuth(a auth.Authenticator) {
	if a == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	a.Close(ctx)
}

// authSource names how consumers are authenticated, for the start line.
func authSource(cfg *config.Config) string {
	switch {
	case cfg.AuthJWKS != "":
		return "jwt"
	case cfg.AuthHeader != "":
		return "header"
	}
	return "none"
}

// newReviewers is the admin API's reviewers: --admin-tokens and
// --admin-token.
func newReviewers(cfg *config.Config, log *slog.Logger) (*admin.Reviewers, error) {
	var list []admin.Reviewer
	if cfg.AdminTokens != "" {
		var err error
		if list, err = admin.ReadReviewers(cfg.AdminTokens); err != nil {
			return nil, err
		}
	}
	rs, err := admin.NewReviewers(list, cfg.AdminToken)
	if err != nil {
		return nil, err
	}
	if rs.Len() == 0 {
		log.Warn("the admin API answers 401 to everything: no --admin-tokens and no --admin-token")
	}
	return rs, nil
}

// writeDelay is --redis-write-delay as state.Options takes it, where 0 is
// the default and a negative delay none.
func writeDelay(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// notifier is hooks as the proxy takes it: nil without webhook URLs, so
// that the ledger keeps no notices (state.Store.Tell) for webhooks no one
// receives.
func notifier(hooks *webhook.Notifier, urls []string) state.Notifier {
	if len(urls) == 0 {
		return nil
	}
	return hooks
}

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"time"

	"github.com/aguard/aguard/admin"
	"github.com/aguard/aguard/config"
	"github.com/aguard/aguard/policy"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/prometheus/client_golang/prometheus"
)

// policyPoll is how often a policy folder is checked for changes when the
// operating system cannot notify aguard of them.
const policyPoll = 2 * time.Second

// newPolicyEngine starts the policy engine of aguard serve: a folder (or
// bundle file) watched for changes, the embedded default policy, or, with
// --opa-config, OPA's plugin manager with its bundles, decision logs and
// status. A folder that does not load stops aguard here: it never serves
// without a policy. With --opa-config, aguard starts at once and /readyz
// answers 503 until the first bundle is active. It registers the policy
// metrics on reg and returns the readiness check.
func newPolicyEngine(ctx context.Context, cfg *config.Config, log *slog.Logger, reg prometheus.Registerer) (*policy.Engine, admin.Check, error) {
	caps, err := loadCapabilities(cfg.PolicyCapabilities)
	if err != nil {
		return nil, nil, err
	}
	opt := policy.Options{Dir: cfg.Policy, Capabilities: caps, Logger: log, Registerer: reg}
	if cfg.OPAConfig != "" {
		if opt.OPAConfig, err = readOPAConfig(cfg.OPAConfig); err != nil {
			return nil, nil, err
		}
	}
	engine, err := policy.New(ctx, opt)
	if err != nil {
		return nil, nil, err // policy's errors say "policy: …"
	}
	go engine.Watch(ctx, policyPoll)
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "aguard_policy_reload_failing",
			Help: "1 while the last load of the policy (folder reload, or bundle download or activation) failed; the last good policy keeps serving.",
		}, func() float64 {
			if _, err := engine.Status(); err != nil {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "aguard_policy_load_failures_total",
			Help: "Policy loads that failed: folder reloads, and bundle downloads or activations (OPA retries at its polling interval).",
		}, func() float64 { return float64(engine.LoadFailures()) }),
	)
	return engine, engine.Ready, nil
}

// policySource names where the policy comes from, for the startup log line.
func policySource(cfg *config.Config) string {
	switch {
	case cfg.OPAConfig != "":
		return "bundles of " + cfg.OPAConfig
	case cfg.Policy != "":
		return cfg.Policy
	}
	return "built-in default"
}

// loadCapabilities reads --policy-capabilities; "" means the default: nothing
// that reaches outside the process.
func loadCapabilities(path string) (*ast.Capabilities, error) {
	if path == "" {
		return nil, nil
	}
	return policy.LoadCapabilities(path)
}

// envRef is a ${NAME} reference in an OPA configuration file.
var envRef = regexp.MustCompile(`\$\{([^}]+)\}`)

// readOPAConfig reads an OPA configuration file and replaces each ${NAME}
// with the environment variable NAME, as `opa run --config-file` does: a
// reference to a variable that is not set is left as it is.
func readOPAConfig(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("opa-config: %w", err)
	}
	return envRef.ReplaceAllFunc(raw, func(ref []byte) []byte {
		if v, ok := os.LookupEnv(string(ref[2 : len(ref)-1])); ok {
			return []byte(v)
		}
		return ref
	}), nil
}

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"

	"github.com/aguard/aguard/config"
	"github.com/aguard/aguard/internal/tracing"
	"github.com/aguard/aguard/policy"
	"github.com/aguard/aguard/state"
	"github.com/spf13/cobra"
)

// settingsHelp is what serve and config check say about their flags.
const settingsHelp = `Each setting is a flag, an environment variable (named in the flag's help) or a
top-level key of the YAML file given with --config, spelled like the flag; a
flag beats the environment, which beats the file. Routes are set in the file
only. "aguard config check" prints what a set of flags, variables and file
resolves to. Traces are set by the standard OTEL_* variables
(OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_SERVICE_NAME,
OTEL_PROPAGATORS, …; see the README), not by flags.`

// newServeCmd is aguard serve: the proxy, with the settings of config.Flags.
func newServeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve [flags]",
		Short: "run the proxy in front of an agent server",
		Long: "Run the proxy in front of an agent server until SIGTERM or Ctrl-C, then drain\nrunning streams for up to --drain-timeout.\n\n" +
			settingsHelp,
		Example: "  aguard serve --upstream http://127.0.0.1:8000\n  AGUARD_UPSTREAM=http://127.0.0.1:8000 aguard serve --mode=monitor\n  aguard serve --config aguard.yaml",
		Args:    noArgs,
	}
	settings := config.AddFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := settings.Load(lookupEnv)
		if err != nil {
			return err
		}
		return serve(cmd.Context(), cfg, cmd.ErrOrStderr())
	}
	return cmd
}

// newConfigCmd is aguard config, which groups config check.
func newConfigCmd() *cobra.Command {
	group := &cobra.Command{
		Use:   "config",
		Short: "check the configuration of aguard serve",
		Args:  unknownCommand,
		RunE:  helpWithoutArgs,
	}
	check := &cobra.Command{
		Use:   "check [flags]",
		Short: "validate and print the configuration aguard serve would run with",
		Long: `Resolve the settings as aguard serve does, from the same flags, environment
variables and --config file; check them and load the policy they name; and
print each setting with its value and where the value came from (flag, env,
file or default), then where traces go (OTEL_* variables). Credentials
(settings named *-token, *-secret, *-password) are redacted, as are passwords
and query values in URLs (except the servers a Redis URL names: addr,
master_name). It reads the --admin-tokens file and the policy as serve does,
and parses --redis as --redis-mode says. Exits 1 on a bad configuration,
naming the setting, where its value came from, and the value. It does not
listen, connect to Redis or a collector, or fetch bundles or key sets.

` + settingsHelp,
		Example: "  aguard config check --upstream http://127.0.0.1:8000\n  AGUARD_CONFIG=/etc/aguard/aguard.yaml aguard config check",
		Args:    noArgs,
	}
	settings := config.AddFlags(check.Flags())
	check.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := settings.Load(lookupEnv)
		if err != nil {
			return err
		}
		return configCheck(cmd.Context(), cfg, cmd.OutOrStdout())
	}
	group.AddCommand(check)
	return group
}

// configCheck prints cfg's settings, with where each came from, then loads
// the policy it names.
func configCheck(ctx context.Context, cfg *config.Config, w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SETTING\tVALUE\tSOURCE")
	for _, s := range cfg.Settings {
		v := s.String()
		if v == "" {
			v = "(none)"
		}
		src := string(s.Source)
		if s.Origin != "" {
			src += " " + s.Origin
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, v, src)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(cfg.Routes) > 0 {
		fmt.Fprintf(w, "\nroutes (file %s):\n", cfg.ConfigFile)
		for _, r := range cfg.Routes {
			proto := r.Protocol
			if proto == "" {
				proto = "1.0"
			}
			fmt.Fprintf(w, "  %s -> %s (AG-UI %s)\n", r.Path, config.RedactURL(r.Upstream), proto)
		}
	}
	if cfg.Redis != "" {
		if err := state.CheckRedisURL(cfg.RedisMode, cfg.Redis); err != nil {
			return fmt.Errorf("config: redis (from %s): %w", settingOrigin(cfg, "redis"), err)
		}
	}
	traces, err := tracing.FromEnv(lookupEnv)
	if err != nil {
		return err
	}
	reviewers, err := newReviewers(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	msg, err := checkPolicy(ctx, cfg)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "\nconsumers: %s\nreviewers: %d\npolicy: %s\ntraces: %s\nconfiguration OK\n",
		consumerAuth(cfg), reviewers.Len(), msg, tracesTo(traces))
	return err
}

// settingOrigin names where the setting name of cfg came from: its flag,
// its variable, the file, or "default".
func settingOrigin(cfg *config.Config, name string) string {
	for _, s := range cfg.Settings {
		if s.Name == name && s.Origin != "" {
			return s.Origin
		}
	}
	return string(config.FromDefault)
}

// tracesTo says where spans go, as the standard OTEL_* variables set it.
func tracesTo(e tracing.Export) string {
	if e.Off != "" {
		return "off (" + e.Off + ")"
	}
	return fmt.Sprintf("OTLP %s to %s (env %s), propagators %s", e.Protocol, config.RedactURL(e.Endpoint), e.EndpointVar, e.Propagators)
}

// consumerAuth says how consumers are authenticated. The key set of
// --auth-jwks is not fetched by config check.
func consumerAuth(cfg *config.Config) string {
	switch {
	case cfg.AuthJWKS != "":
		return "JWTs signed by a key of " + config.RedactURL(cfg.AuthJWKS) + " (not fetched by config check)"
	case cfg.AuthHeader != "":
		return "the " + cfg.AuthHeader + " header a trusted ingress sets"
	}
	return "not authenticated"
}

// checkPolicy loads the policy cfg names as aguard serve would, without
// watching it, and says what serves. Bundles of an OPA configuration are
// not downloaded: only the file is read.
func checkPolicy(ctx context.Context, cfg *config.Config) (string, error) {
	caps, err := loadCapabilities(cfg.PolicyCapabilities)
	if err != nil {
		return "", err
	}
	if cfg.OPAConfig != "" {
		if _, err := readOPAConfig(cfg.OPAConfig); err != nil {
			return "", err
		}
		return fmt.Sprintf("from the bundles of %s (not downloaded by config check)", cfg.OPAConfig), nil
	}
	engine, err := policy.New(ctx, policy.Options{Dir: cfg.Policy, Capabilities: caps})
	if err != nil {
		return "", err
	}
	defer engine.Close(ctx)
	revision, _ := engine.Status()
	return fmt.Sprintf("%s: loads, revision %s", policySource(cfg), revision), nil
}

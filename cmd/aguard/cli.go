package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/agnivade/levenshtein"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newRootCmd builds aguard's command tree. Help goes to the command's
// output (stdout) and exits 0; errors are returned, not printed.
func newRootCmd() *cobra.Command {
	cobra.EnableCommandSorting = false // as added: serve first
	root := &cobra.Command{
		Use:   "aguard",
		Short: "a reverse proxy that enforces the AG-UI 1.0 tool-call rules",
		Long: `aguard is a reverse proxy for AG-UI agent servers. It checks and enforces the
AG-UI 1.0 tool-call rules on every event stream it carries, puts each tool call
to an OPA policy (allow, deny, decline, or hold for approval), keeps a ledger of
them, and bridges 1.0 agents to clients on the 0.x line.`,
		Version:       buildVersion().String(),
		Args:          unknownCommand,
		RunE:          helpWithoutArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		CompletionOptions: cobra.CompletionOptions{
			DisableDefaultCmd: true,
		},
	}
	root.SetVersionTemplate("{{.Version}}")
	root.SetUsageTemplate(usageTemplate)
	root.SetFlagErrorFunc(flagError)
	root.AddCommand(newServeCmd(), newConfigCmd(), newDemoCmd(), newReplayCmd(), newPolicyCmd(), newVersionCmd())
	root.InitDefaultHelpCmd()
	for _, c := range root.Commands() {
		if c.Name() == "help" {
			c.Short = "print the help of a command (as --help does)"
		}
	}
	var helpFlags func(c *cobra.Command)
	helpFlags = func(c *cobra.Command) {
		c.InitDefaultHelpFlag()
		c.Flags().Lookup("help").Usage = "print this help"
		for _, sub := range c.Commands() {
			helpFlags(sub)
		}
	}
	helpFlags(root)
	root.InitDefaultVersionFlag()
	root.Flags().Lookup("version").Usage = "print the version and the VCS revision"
	return root
}

// usageError is a command line aguard cannot run: an unknown command or
// flag, or arguments a command does not take. aguard exits 2 on one and
// points at the command's help.
type usageError struct {
	cmd *cobra.Command
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErrorf(cmd *cobra.Command, format string, a ...any) error {
	return &usageError{cmd, fmt.Errorf(format, a...)}
}

// unknownCommand is the Args of a command that only groups others: an
// argument names a command it does not have.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	}
	return &usageError{cmd, errors.New(msg)}
}

// helpWithoutArgs is the RunE of a command that only groups others.
func helpWithoutArgs(cmd *cobra.Command, _ []string) error { return cmd.Help() }

// noArgs is the Args of a command that takes flags only.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf(cmd, "unexpected argument %q (%s takes flags only)", args[0], cmd.CommandPath())
	}
	return nil
}

// flagError turns a flag parse error into a usageError, suggesting the
// closest flag for an unknown one.
func flagError(cmd *cobra.Command, err error) error {
	var nx *pflag.NotExistError
	if !errors.As(err, &nx) {
		return &usageError{cmd, err}
	}
	if short := nx.GetSpecifiedShortnames(); short != "" {
		// -upstream: a long flag with one dash, as Go's flag package took it.
		if f := cmd.Flags().Lookup(strings.SplitN(short, "=", 2)[0]); f != nil {
			return usageErrorf(cmd, "unknown flag -%s: long flags take two dashes: --%s", short, f.Name)
		}
		if s := closestFlag(cmd.Flags(), short); s != "" {
			return usageErrorf(cmd, "unknown flag -%s; did you mean --%s?", short, s)
		}
		return &usageError{cmd, err}
	}
	if s := closestFlag(cmd.Flags(), nx.GetSpecifiedName()); s != "" {
		return usageErrorf(cmd, "unknown flag --%s; did you mean --%s?", nx.GetSpecifiedName(), s)
	}
	return usageErrorf(cmd, "unknown flag --%s", nx.GetSpecifiedName())
}

// closestFlag is the name of the flag of fs closest to name: one that starts
// with it, or within an edit distance of a quarter of its length (at least
// 2). "" when none is close.
func closestFlag(fs *pflag.FlagSet, name string) string {
	name = strings.SplitN(name, "=", 2)[0]
	best, bestD := "", -1
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		d := levenshtein.ComputeDistance(name, f.Name)
		if d > max(2, len(name)/4) && !strings.HasPrefix(f.Name, name) {
			return
		}
		if bestD < 0 || d < bestD {
			best, bestD = f.Name, d
		}
	})
	return best
}

// exactlyArgs is the Args of a command that takes n arguments, described by
// what.
func exactlyArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf(cmd, "%s: want %s, got %d arguments", cmd.CommandPath(), what, len(args))
		}
		return nil
	}
}

// atMostArgs is the Args of a command that takes up to n arguments.
func atMostArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > n {
			return usageErrorf(cmd, "%s: want at most %s, got %q", cmd.CommandPath(), what, args)
		}
		return nil
	}
}

package main

import (
	"context"
	"fmt"
	"io"

	"github.com/aguard/aguard/policy"
	"github.com/spf13/cobra"
)

// newPolicyCmd is aguard policy, which groups policy test.
func newPolicyCmd() *cobra.Command {
	group := &cobra.Command{
		Use:   "policy",
		Short: "work with Rego policies",
		Args:  unknownCommand,
		RunE:  helpWithoutArgs,
	}
	var capsFile string
	test := &cobra.Command{
		Use:   "test [flags] [DIR|BUNDLE.tar.gz]",
		Short: "run the Rego tests of a policy folder or bundle file (as opa test)",
		Long: `Run the Rego unit tests (*_test.rego) of a policy folder or bundle file
(.tar.gz, as opa build writes them), as opa test does; without one, those of
the built-in default policy. Exits 1 when a test fails. Its flags are
command-line only.`,
		Example: "  aguard policy test policies/examples/approval",
		Args:    atMostArgs(1, "one policy folder or bundle file"),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := ""
			if len(args) == 1 {
				dir = args[0]
			}
			return policyTest(cmd.Context(), dir, capsFile, cmd.OutOrStdout())
		},
	}
	test.Flags().StringVar(&capsFile, "policy-capabilities", "", "OPA capabilities file listing the built-in functions the policy may call (none: those that do not reach outside the process)")
	group.AddCommand(test)
	return group
}

// policyTest runs the Rego unit tests of a policy folder or bundle file
// (.tar.gz), or of the built-in default policy when dir is "".
func policyTest(ctx context.Context, dir, capsFile string, stdout io.Writer) error {
	caps, err := loadCapabilities(capsFile)
	if err != nil {
		return err
	}
	failed, err := policy.RunTests(ctx, policy.TestOptions{Dir: dir, Capabilities: caps}, stdout)
	if err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("policy test: %d failed", failed)
	}
	return nil
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/aguard/aguard/policy"
)

// policyCmd runs `aguard policy test [--policy-capabilities FILE] [DIR|BUNDLE]`:
// the Rego unit tests of a policy folder or bundle file (.tar.gz), or of the
// built-in default policy.
func policyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	usage := func() {
		fmt.Fprintln(stderr, "usage: aguard policy test [--policy-capabilities FILE] [DIR|BUNDLE.tar.gz]")
	}
	if len(args) == 0 || args[0] != "test" {
		usage()
		return errors.New("policy: want `policy test [DIR|BUNDLE.tar.gz]`")
	}
	fs := flag.NewFlagSet("aguard policy test", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { usage(); fs.PrintDefaults() }
	capsFile := fs.String("policy-capabilities", "", "OPA capabilities file listing the built-in functions the policy may call (default: none that reach outside the process)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		usage()
		return errors.New("policy: want `policy test [DIR|BUNDLE.tar.gz]`")
	}
	caps, err := loadCapabilities(*capsFile)
	if err != nil {
		return err
	}
	failed, err := policy.RunTests(ctx, policy.TestOptions{Dir: fs.Arg(0), Capabilities: caps}, stdout)
	if err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("policy test: %d failed", failed)
	}
	return nil
}

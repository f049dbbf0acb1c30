package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/aguard/aguard/policy"
)

// policyCmd runs `aguard policy test [DIR]`: the Rego unit tests of a policy
// folder, or of the built-in default policy.
func policyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "test" || len(args) > 2 {
		fmt.Fprintln(stderr, "usage: aguard policy test [DIR]")
		return errors.New("policy: want `policy test [DIR]`")
	}
	dir := ""
	if len(args) == 2 {
		dir = args[1]
	}
	failed, err := policy.RunTests(ctx, dir, stdout)
	if err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("policy test: %d failed", failed)
	}
	return nil
}

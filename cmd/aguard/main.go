// Command aguard is a reverse proxy for AG-UI agent servers that checks and
// enforces the AG-UI 1.0 tool-call rules on every event stream it carries.
//
// Usage:
//
//	aguard serve [flags]          run the proxy
//	aguard config check [flags]   validate and print the configuration serve would run with
//	aguard demo [--keep]          run a scripted agent behind aguard and show what it does
//	aguard replay --input RUN-INPUT.json [flags] UPSTREAM.sse
//	                              run a recorded agent stream through the checks, offline
//	aguard policy test [flags] [DIR|BUNDLE.tar.gz]
//	                              run the Rego tests of a policy folder or bundle (as opa test)
//	aguard version                print the version and the VCS revision (also --version)
//
// Every command takes --help. The README lists the commands and the settings
// of serve.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one aguard command line and returns the process exit code:
// 0, 1 when the command failed, 2 when the command line is wrong.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(append([]string{}, args...)) // never nil: cobra would read os.Args
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	var usage *usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "aguard: %v\nRun '%s --help' for usage.\n", err, usage.cmd.CommandPath())
		return 2
	case errors.Is(err, errReported):
		return 1
	}
	fmt.Fprintln(stderr, "aguard:", err)
	return 1
}

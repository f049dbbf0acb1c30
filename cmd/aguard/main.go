// Command aguard is a reverse proxy for AG-UI agent servers that checks and
// enforces the AG-UI 1.0 tool-call rules on every event stream it carries.
//
// Usage:
//
//	aguard serve [flags]   run the proxy (aguard serve -h lists the flags)
//	aguard demo            run a scripted agent behind aguard and show what it does
//	aguard replay --input run-input.json upstream.sse
//	                       run a recorded agent stream through the checks, offline
//	aguard policy test [DIR|BUNDLE.tar.gz]
//	                       run the Rego tests of a policy folder or bundle (as opa test)
//	aguard version
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

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

const usage = `aguard: a reverse proxy that enforces the AG-UI 1.0 tool-call rules.

Usage:
  aguard serve [flags]   run the proxy (aguard serve -h lists the flags)
  aguard demo            run a scripted agent behind aguard and show what it does
  aguard replay --input run-input.json upstream.sse
                         run a recorded agent stream through the checks, offline;
                         the consumer's stream on stdout, a JSON report on stderr
  aguard policy test [--policy-capabilities FILE] [DIR|BUNDLE.tar.gz]
                         run the Rego tests of a policy folder or bundle file
                         (as opa test); without one, those of the built-in
                         default policy
  aguard version         print the version
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one aguard command and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:], stderr)
	case "demo":
		err = demo(ctx, args[1:], stdout, stderr)
	case "replay":
		err = replay(ctx, args[1:], stdout, stderr)
	case "policy":
		err = policyCmd(ctx, args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "aguard", version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "aguard: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		if !errors.Is(err, errReported) {
			fmt.Fprintln(stderr, "aguard:", err)
		}
		return 1
	}
	return 0
}

package policy

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// testTimeout bounds each Rego test, as `opa test` does by default.
const testTimeout = 5 * time.Second

// TestOptions configures RunTests.
type TestOptions struct {
	// Dir is the policy folder, or bundle file (.tar.gz), whose tests run;
	// "" selects the embedded set.
	Dir string
	// Capabilities are the built-in functions the policy and its tests may
	// call, as in Options; nil means DefaultCapabilities.
	Capabilities *ast.Capabilities
}

// RunTests runs the Rego unit tests (rules named test_*, usually in
// *_test.rego files) of the policy folder or bundle file opt.Dir, or of the
// embedded set, the way `opa test` does: the folder is read and parsed as
// the Engine reads it (data files at the path of their folder), built-in
// errors are errors and the capabilities apply, as they do in the Engine.
// It writes one line per test — PASS, FAIL, ERROR or SKIP (todo_test_*), its
// name, duration and, for a failure, where and why — then a summary.
//
// failed counts the tests that failed or errored. err is set when the tests
// could not run (a file that does not parse or compile, a call to a
// built-in function the capabilities leave out, an unreadable folder, no
// tests at all) or when writing to w failed.
func RunTests(ctx context.Context, opt TestOptions, w io.Writer) (failed int, err error) {
	src := newSource(opt.Dir)
	caps := opt.Capabilities
	if caps == nil {
		caps = DefaultCapabilities()
	}
	snap, err := readSnapshot(src, true)
	if err != nil {
		return 0, fmt.Errorf("policy: test %s: %w", src.name("."), err)
	}
	p, err := parse(snap)
	if err != nil {
		return 0, fmt.Errorf("policy: test %s: %w", src.name("."), err)
	}
	compiler := ast.NewCompiler().
		WithCapabilities(caps).
		WithEnablePrintStatements(true).
		WithDefaultRegoVersion(ast.RegoV1)
	ch, err := tester.NewRunner().
		SetCompiler(compiler).
		SetStore(inmem.NewFromObject(p.data)).
		SetModules(p.modules).
		RaiseBuiltinErrors(true).
		CapturePrintOutput(true).
		EnableTracing(true). // to say which expression failed
		SetTimeout(testTimeout).
		RunTests(ctx, nil)
	if errs, ok := err.(ast.Errors); ok {
		err = explainCapabilityErrors(errs, caps)
	}
	if err != nil {
		return 0, fmt.Errorf("policy: test %s: %w", src.name("."), err)
	}
	var results []*tester.Result
	for r := range ch {
		results = append(results, r)
	}
	if len(results) == 0 {
		return 0, fmt.Errorf("policy: test %s: no test_ rules found", src.name("."))
	}
	slices.SortFunc(results, func(a, b *tester.Result) int {
		if c := cmp.Compare(a.Location.File, b.Location.File); c != 0 {
			return c
		}
		return cmp.Compare(a.Location.Row, b.Location.Row)
	})

	var buf bytes.Buffer
	passed, skipped := 0, 0
	for _, r := range results {
		writeResult(&buf, r)
		switch {
		case r.Skip:
			skipped++
		case r.Pass():
			passed++
		default:
			failed++
		}
	}
	buf.WriteString(strings.Repeat("-", 72) + "\n")
	fmt.Fprintf(&buf, "PASS: %d/%d", passed, len(results))
	if failed > 0 {
		fmt.Fprintf(&buf, "  FAIL: %d/%d", failed, len(results))
	}
	if skipped > 0 {
		fmt.Fprintf(&buf, "  SKIP: %d/%d", skipped, len(results))
	}
	buf.WriteByte('\n')
	if _, err := w.Write(buf.Bytes()); err != nil {
		return failed, fmt.Errorf("policy: write test report: %w", err)
	}
	return failed, nil
}

func writeResult(buf *bytes.Buffer, r *tester.Result) {
	name := r.Package + "." + r.Name
	switch {
	case r.Skip:
		fmt.Fprintf(buf, "SKIP  %s  %s\n", name, r.Location)
		return
	case r.Pass():
		fmt.Fprintf(buf, "PASS  %s (%v)\n", name, r.Duration.Round(time.Microsecond))
		return
	case r.Error != nil:
		fmt.Fprintf(buf, "ERROR %s (%v)  %s\n", name, r.Duration.Round(time.Microsecond), r.Location)
		fmt.Fprintf(buf, "      %s\n", indent(r.Error.Error()))
	default:
		fmt.Fprintf(buf, "FAIL  %s (%v)  %s\n", name, r.Duration.Round(time.Microsecond), r.Location)
		if expr := failedExpr(r); expr != nil {
			fmt.Fprintf(buf, "      failed at %s: %s\n", expr.Location, expr.Location.Text) // the source, not the rewritten expression
		}
	}
	if len(r.Output) > 0 {
		fmt.Fprintf(buf, "      output:\n      %s\n", indent(strings.TrimRight(string(r.Output), "\n")))
	}
}

// failedExpr finds, in the trace of a failed test, the last expression of the
// test itself that failed: the assertion that did not hold.
func failedExpr(r *tester.Result) *ast.Expr {
	if r.Location == nil {
		return nil
	}
	var last *ast.Expr
	for _, ev := range r.Trace {
		expr, ok := ev.Node.(*ast.Expr)
		if ev.Op != topdown.FailOp || !ok || expr.Location == nil {
			continue
		}
		if expr.Location.File == r.Location.File && expr.Location.Row >= r.Location.Row {
			last = expr
		}
	}
	return last
}

func indent(s string) string {
	return strings.ReplaceAll(s, "\n", "\n      ")
}

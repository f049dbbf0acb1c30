package policy

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/open-policy-agent/opa/v1/ast"
)

// The decision memo: a policy whose output is a function of the input
// values it reads (and of its own rules and data, fixed for a revision)
// gives the same decision for the same values. Most tool calls put the same
// few values to it — the phase, the tool's name, whether it was advertised,
// whether its arguments parsed and matched their schema — while an OPA
// evaluation of even the default policy costs a hundred microseconds or more
// on a loaded host (bench/README.md). So a revision that qualifies keeps its
// recent decisions, keyed by exactly those values, and a call that brings
// the same ones gets the decision again without an evaluation: a decision id
// of its own, logged, counted and traced like any other.
//
// A revision qualifies only when nothing but the input's values can change
// its output:
//   - every reference to the input is to a fixed path (input.call.name);
//     a path read through a computed key (input.call[k]) is keyed whole
//     from its fixed part (input.call), and a policy that reads the input
//     whole (x := input, f(input), input[k]) does not qualify;
//   - every function it calls is its own or one of the built-in functions
//     of OPA memoBuiltinsVersion that do not read the clock, draw random
//     numbers, reach outside the process or print (OPA marks most of them
//     non-deterministic; impure names the rest). A built-in function added
//     by a later OPA is not trusted until memoBuiltinsVersion is moved past
//     it.
//
// Decisions made from bundles (OPA's plugin manager, whose store can change
// under a revision and whose decision log wants each evaluation) are not
// memoized, nor is a decision that failed: an error or a timeout is
// evaluated again next time.

const (
	// memoEntries bounds the decisions a revision keeps; the least recently
	// used goes first (README, "Limits").
	memoEntries = 1024
	// memoEntryBytes bounds one kept decision: its key (the values read)
	// and its reason. A larger one is not kept, so a revision's memo holds
	// at most memoEntries × memoEntryBytes (4 MiB).
	memoEntryBytes = 4 << 10
	// memoBuiltinsVersion is the OPA version whose built-in functions were
	// reviewed for purity (see impure).
	memoBuiltinsVersion = "v1.22.4"
)

// impure names the built-in functions of memoBuiltinsVersion whose result
// is not a function of their arguments alone and that OPA does not mark
// non-deterministic: they print, or verify certificates against the clock.
var impure = map[string]bool{
	"print":              true,
	"internal.print":     true,
	"trace":              true,
	"internal.test_case": true,
	"crypto.x509.parse_and_verify_certificates":              true,
	"crypto.x509.parse_and_verify_certificates_with_options": true,
}

// pureBuiltins returns the built-in functions a memoized policy may call,
// read from OPA's capabilities file of memoBuiltinsVersion at the first
// policy load (not at every start of a program that imports the package).
var pureBuiltins = sync.OnceValue(func() map[string]bool {
	caps, err := ast.LoadCapabilitiesVersion(memoBuiltinsVersion)
	if err != nil {
		return map[string]bool{} // nothing trusted: no policy is memoized
	}
	pure := make(map[string]bool, len(caps.Builtins))
	for _, b := range caps.Builtins {
		if !b.Nondeterministic && !impure[b.Name] {
			pure[b.Name] = true
		}
	}
	return pure
})

// memo keeps a revision's decisions by the input values the policy reads.
type memo struct {
	paths []ast.Ref // the input paths read, without the leading input
	cache *lru.Cache[string, memoized]
	// hits counts the decisions served from the memo (tests read it).
	hits atomic.Uint64
}

// memoized is a kept decision: what the policy's output said.
type memoized struct {
	action, reason string
	timeout        time.Duration
}

// newMemo returns the memo for the compiled policy c, or nil when c does
// not qualify (see above).
func newMemo(c *ast.Compiler) *memo {
	paths, ok := memoPaths(c)
	if !ok {
		return nil
	}
	cache, err := lru.New[string, memoized](memoEntries)
	if err != nil {
		return nil
	}
	return &memo{paths: paths, cache: cache}
}

// memoPaths returns the input paths the policy's modules read (each
// without a path that extends another), and false when a module reads the
// input whole or calls a function that is not pure.
func memoPaths(c *ast.Compiler) ([]ast.Ref, bool) {
	ok := true
	var paths []ast.Ref
	var vis *ast.GenericVisitor
	vis = ast.NewGenericVisitor(func(x any) bool {
		if !ok {
			return true
		}
		switch x := x.(type) {
		case *ast.With:
			// `with input.x as v` replaces what the expression sees; its
			// target is not a read of the input.
			vis.Walk(x.Value)
			return true
		case *ast.Expr:
			if x.IsCall() && !pureCall(x.Operator()) {
				ok = false
			}
		case ast.Call:
			if r, isRef := x[0].Value.(ast.Ref); !isRef || !pureCall(r) {
				ok = false
			}
		case ast.Var:
			if x.Equal(ast.InputRootDocument.Value) {
				ok = false // the input itself, outside a reference
			}
		case ast.Ref:
			if len(x) == 0 || !x[0].Equal(ast.InputRootDocument) {
				break
			}
			var p ast.Ref
			for _, t := range x[1:] {
				if _, isString := t.Value.(ast.String); !isString {
					break
				}
				p = append(p, t)
			}
			if len(p) == 0 {
				ok = false // the input read whole
				return true
			}
			paths = append(paths, p)
			for _, t := range x[1:] {
				vis.Walk(t) // a computed key may read more (input.a[input.b])
			}
			return true
		}
		return false
	})
	for _, m := range c.Modules {
		vis.Walk(m)
	}
	if !ok {
		return nil, false
	}
	return minimalPaths(paths), true
}

// pureCall reports whether a call to op gives the same result for the same
// arguments: a function of the policy's own (data.…), or a pure built-in.
func pureCall(op ast.Ref) bool {
	if op == nil {
		return false
	}
	if op[0].Equal(ast.DefaultRootDocument) {
		return true // the policy's own function: its body is walked too
	}
	return pureBuiltins()[op.String()]
}

// minimalPaths returns paths without duplicates and without a path that
// extends another one (input.call covers input.call.name).
func minimalPaths(paths []ast.Ref) []ast.Ref {
	var out []ast.Ref
next:
	for i, p := range paths {
		for j, q := range paths {
			if i != j && p.HasPrefix(q) && (len(q) < len(p) || j < i) {
				continue next // q covers p (or is the same path, seen first)
			}
		}
		out = append(out, p)
	}
	return out
}

// key returns the memo key of input at phase: the phase and the value at
// each path, as OPA writes values (strings quoted and escaped, so a newline
// separates them unambiguously), and false when the key would exceed
// memoEntryBytes.
func (m *memo) key(phase string, input ast.Value) (string, bool) {
	obj, isObject := input.(ast.Object)
	if !isObject {
		return "", false
	}
	var b strings.Builder
	b.WriteString(phase)
	for _, p := range m.paths {
		b.WriteByte('\n')
		v, err := obj.Find(p)
		if err != nil {
			b.WriteByte('!') // absent: no value is written so
			continue
		}
		b.WriteString(v.String())
		if b.Len() > memoEntryBytes {
			return "", false
		}
	}
	return b.String(), true
}

// lookup returns the memo key of input at phase and the decision kept under
// it. The key is "" when m is nil (the revision is not memoized) or the key
// would exceed memoEntryBytes.
func (m *memo) lookup(phase string, input ast.Value) (key string, kept memoized, hit bool) {
	if m == nil {
		return "", memoized{}, false
	}
	key, ok := m.key(phase, input)
	if !ok {
		return "", memoized{}, false
	}
	if kept, hit = m.cache.Get(key); hit {
		m.hits.Add(1)
	}
	return key, kept, hit
}

// put keeps d under key, unless key is "" or the two exceed memoEntryBytes.
func (m *memo) put(key string, d memoized) {
	if m == nil || key == "" || len(key)+len(d.reason) > memoEntryBytes {
		return
	}
	m.cache.Add(key, d)
}

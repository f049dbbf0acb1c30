package policy

import (
	"github.com/open-policy-agent/opa/v1/ast"
)

// reads reports whether any rule of the compiled policy may read the input
// value at path (input.<path[0]>.<path[1]>…). It errs on the side of yes:
// a reference to the whole input, to a prefix of path (input.call), or
// through a computed key (input.call[k]) counts as reading it. Imports are
// resolved by the compiler, so an aliased reference is seen whole.
//
// The engine uses it to leave out of the input what the policy never looks
// at: converting large tool arguments into OPA values is most of the cost of
// a decision, and the default policy reads only whether they parsed and
// matched their schema.
func reads(c *ast.Compiler, path ...string) bool {
	found := false
	for _, m := range c.Modules {
		ast.WalkRefs(m, func(r ast.Ref) bool {
			if found || len(r) == 0 || !r[0].Equal(ast.InputRootDocument) {
				return found
			}
			for i, seg := range path {
				if len(r) <= i+1 {
					found = true // input, or a prefix of path, read whole
					return true
				}
				s, ok := r[i+1].Value.(ast.String)
				if !ok {
					found = true // a computed key may be seg
					return true
				}
				if string(s) != seg {
					return false // another member
				}
			}
			found = true
			return true
		})
		if found {
			return true
		}
	}
	return false
}

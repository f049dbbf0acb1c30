package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// reachOut names the built-in functions that reach outside the process by
// themselves: a policy that could call them could send a tool call's
// arguments anywhere. They are left out of DefaultCapabilities.
var reachOut = map[string]bool{
	"http.send":          true, // any HTTP request
	"net.lookup_ip_addr": true, // a DNS query, whose name can carry data
}

// inProcess names the built-in functions OPA marks non-deterministic that
// still stay inside the process (they read the clock, draw random numbers or
// return what aguard gives them). OPA marks every function that reaches the
// network non-deterministic (ast.Builtin.Nondeterministic); one that it adds
// in a later version is left out of DefaultCapabilities until it is listed
// here, so that an upgrade of OPA never opens the network to policies.
var inProcess = map[string]bool{
	"io.jwt.decode_verify":   true, // reads the clock
	"io.jwt.encode_sign":     true, // random numbers
	"io.jwt.encode_sign_raw": true, // random numbers
	"json.match_schema":      true, // remote $refs need a host in allow_net, and allow_net is empty
	"json.verify_schema":     true, // likewise
	"opa.runtime":            true, // aguard gives policies no runtime information
	"rand.intn":              true,
	"time.now_ns":            true,
	"uuid.rfc4122":           true,
}

// DefaultCapabilities returns what policies may use when no capabilities file
// is given: the built-in functions of the OPA version aguard is built with,
// less those that reach outside the process (http.send, net.lookup_ip_addr,
// and any non-deterministic function not known to stay inside), with an
// empty allow_net, so that json.match_schema and json.verify_schema fetch no
// remote $ref either. A capabilities file (OPA's format, as `opa build
// --capabilities` takes) replaces it whole.
func DefaultCapabilities() *ast.Capabilities {
	c := ast.CapabilitiesForThisVersion()
	c.Builtins = slices.DeleteFunc(c.Builtins, func(b *ast.Builtin) bool {
		return reachOut[b.Name] || (b.Nondeterministic && !inProcess[b.Name])
	})
	c.AllowNet = []string{}
	return c
}

// LoadCapabilities reads an OPA capabilities file (JSON, as written by `opa
// capabilities` and read by `opa build --capabilities`).
func LoadCapabilities(path string) (*ast.Capabilities, error) {
	c, err := ast.LoadCapabilitiesFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy: read capabilities %s: %w", path, err)
	}
	if len(c.Builtins) == 0 {
		return nil, fmt.Errorf("policy: capabilities %s allow no built-in function: is it an OPA capabilities file?", path)
	}
	return c, nil
}

// capabilityError is a policy that needs a built-in function the
// capabilities do not allow.
type capabilityError struct {
	builtin  string
	location *ast.Location
}

func (e *capabilityError) Error() string {
	why := "the policy capabilities do not allow it"
	if reachOut[e.builtin] {
		why = "it reaches outside the process, and the policy capabilities do not allow it (allow it with --policy-capabilities FILE)"
	}
	msg := fmt.Sprintf("built-in function %s is not allowed: %s", e.builtin, why)
	if e.location != nil {
		return e.location.String() + ": " + msg
	}
	return msg
}

// explainCapabilityErrors rewrites the compiler's "undefined function X"
// errors about a built-in function of OPA that caps leave out into one that
// names the function and why it is refused. Other errors are kept.
func explainCapabilityErrors(errs ast.Errors, caps *ast.Capabilities) error {
	allowed := builtinNames(caps)
	out := make([]error, 0, len(errs))
	for _, e := range errs {
		name, ok := strings.CutPrefix(e.Message, "undefined function ")
		if _, known := ast.BuiltinMap[name]; ok && e.Code == ast.TypeErr && known && !allowed[name] {
			out = append(out, &capabilityError{builtin: name, location: e.Location})
			continue
		}
		out = append(out, e)
	}
	return errors.Join(out...)
}

// checkCapabilities reports every built-in function that the compiled policy
// c needs (c.Required, as the compiler found it) and caps do not allow, with
// where it is first called.
func checkCapabilities(c *ast.Compiler, caps *ast.Capabilities) error {
	if c.Required == nil {
		return nil
	}
	allowed := builtinNames(caps)
	var errs []error
	for _, b := range c.Required.Builtins {
		if !allowed[b.Name] {
			errs = append(errs, &capabilityError{builtin: b.Name, location: firstCall(c, b.Name)})
		}
	}
	return errors.Join(errs...)
}

func builtinNames(caps *ast.Capabilities) map[string]bool {
	m := make(map[string]bool, len(caps.Builtins))
	for _, b := range caps.Builtins {
		m[b.Name] = true
	}
	return m
}

// firstCall finds where the compiled modules of c first refer to the
// built-in function name, in module order; nil when it cannot be found.
func firstCall(c *ast.Compiler, name string) *ast.Location {
	ref := ast.MustParseRef(name)
	var found *ast.Location
	for _, mod := range c.Modules {
		ast.WalkRefs(mod, func(r ast.Ref) bool {
			if r.Equal(ref) && r[0].Location != nil {
				if found == nil || r[0].Location.File < found.File ||
					(r[0].Location.File == found.File && r[0].Location.Row < found.Row) {
					found = r[0].Location
				}
			}
			return false
		})
	}
	return found
}

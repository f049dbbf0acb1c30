// Package policies holds the Rego policy set that aguard ships and evaluates
// when no --policy folder is given.
//
// The set lives in the aguard/ folder (package aguard, entry point
// data.aguard.decision) together with its Rego unit tests, and is embedded in
// the binary. It implements the default policy (README, "Policies"): hold a
// call to a tool the application did not advertise until it is judged, deny a
// frontend tool call whose arguments are not JSON or do not match the tool's
// parameters schema, decline unadvertised calls still pending when the run
// finishes, and allow the rest.
//
// The examples/ folder is not embedded. Each of its sub-folders is a complete
// policy folder that operators copy and adapt, then pass to aguard with
// --policy; every one keeps the rules of the default policy and adds its own.
//
// This package only carries files. Loading, evaluating and testing them is
// the job of package policy.
package policies

import (
	"embed"
	"io/fs"
)

//go:embed aguard/*.rego
var files embed.FS

// FS returns the embedded default policy set: the .rego files of the aguard/
// folder, their *_test.rego unit tests included, rooted so that the policy
// sits at aguard/default.rego.
func FS() fs.FS {
	return files
}

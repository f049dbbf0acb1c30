package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// Set at build time with -ldflags:
//
//	go build -ldflags "-X main.version=v1.2.0 -X main.revision=$(git rev-parse HEAD)" ./cmd/aguard
//
// A revision given so takes precedence over the one Go stamps into the build
// information (vcs.revision), which is missing when the build runs with
// -buildvcs=false or outside a git checkout (a container build without .git,
// a git worktree).
var (
	version  = "dev"
	revision = ""
)

// versionInfo is what aguard --version prints.
type versionInfo struct {
	Version  string
	Revision string // "" when unknown
	Modified string // "true" or "false" (uncommitted changes); "" when unknown
	Go       string
}

// buildVersion reads the version and revision of the running binary.
func buildVersion() versionInfo {
	info, _ := debug.ReadBuildInfo()
	return readVersion(version, revision, info)
}

// readVersion combines the values set with -ldflags and the build
// information: a revision set with -ldflags wins; vcs.modified is reported
// only for the revision it describes.
func readVersion(version, revision string, info *debug.BuildInfo) versionInfo {
	v := versionInfo{Version: version, Revision: revision, Go: runtime.Version()}
	if info == nil {
		return v
	}
	var vcsRev, vcsModified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			vcsRev = s.Value
		case "vcs.modified":
			vcsModified = s.Value
		}
	}
	if v.Revision == "" {
		v.Revision = vcsRev
	}
	if v.Revision != "" && v.Revision == vcsRev {
		v.Modified = vcsModified
	}
	return v
}

// String renders v as aguard --version prints it, one fact a line.
func (v versionInfo) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "aguard %s\n", v.Version)
	if v.Revision == "" {
		b.WriteString("revision: unknown (built without VCS stamping; build with -ldflags \"-X main.revision=$(git rev-parse HEAD)\")\n")
	} else {
		fmt.Fprintf(&b, "revision: %s\n", v.Revision)
	}
	if v.Modified != "" {
		fmt.Fprintf(&b, "modified: %s\n", v.Modified)
	}
	fmt.Fprintf(&b, "go: %s %s/%s\n", v.Go, runtime.GOOS, runtime.GOARCH)
	return b.String()
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:                   "version",
		Short:                 "print the version and the VCS revision (also aguard --version)",
		DisableFlagsInUseLine: true, // --help only
		Args:                  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(cmd.OutOrStdout(), buildVersion())
			return err
		},
	}
}

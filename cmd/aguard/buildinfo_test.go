package main

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestBuildInfoRevisionIsTheVersionsRevision pins that aguard_build_info
// carries the revision aguard --version prints, including one set with
// -ldflags "-X main.revision=…" where Go stamped none.
func TestBuildInfoRevisionIsTheVersionsRevision(t *testing.T) {
	defer func(r string) { revision = r }(revision)
	revision = "0123456789abcdef0123456789abcdef01234567"
	want := `aguard_build_info{goversion="` + buildVersion().Go + `",revision="0123456789abcdef0123456789abcdef01234567",version="` + version + `"} 1`
	if err := testutil.CollectAndCompare(buildInfo(), strings.NewReader(
		"# HELP aguard_build_info Always 1; its labels say which aguard runs: version, revision (the VCS commit), goversion.\n"+
			"# TYPE aguard_build_info gauge\n"+want+"\n"), "aguard_build_info"); err != nil {
		t.Fatal(err)
	}
}

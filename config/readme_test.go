package config

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the README's configuration reference")

const (
	refStart = "<!-- config-reference:start -->\n"
	refEnd   = "<!-- config-reference:end -->"
)

// TestREADMEReference pins that the README's configuration reference is the
// one the flag definitions produce. Run with -update to rewrite it.
func TestREADMEReference(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	before, rest, ok1 := strings.Cut(readme, refStart)
	_, after, ok2 := strings.Cut(rest, refEnd)
	if !ok1 || !ok2 {
		t.Fatalf("README.md lacks the %q … %q markers", strings.TrimSpace(refStart), refEnd)
	}
	want := before + refStart + reference() + refEnd + after
	if readme == want {
		return
	}
	if *update {
		if err := os.WriteFile("../README.md", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("README.md's configuration reference is stale; run: go test ./config -run TestREADMEReference -update\nwant:\n%s", reference())
}

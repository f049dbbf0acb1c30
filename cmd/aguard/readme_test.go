package main

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var updateREADME = flag.Bool("update", false, "rewrite the README's command list")

// moduleRoot is the repository root, from cmd/aguard.
const moduleRoot = "../.."

const (
	commandsStart = "<!-- commands:start -->\n"
	commandsEnd   = "<!-- commands:end -->"
)

// TestREADMECommandList pins that the README's command list is the one the
// command tree produces: every command, its usage line and what it does. Run
// with -update to rewrite it.
func TestREADMECommandList(t *testing.T) {
	const path = moduleRoot + "/README.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	before, rest, ok1 := strings.Cut(readme, commandsStart)
	_, after, ok2 := strings.Cut(rest, commandsEnd)
	if !ok1 || !ok2 {
		t.Fatalf("README.md lacks the %q … %q markers", strings.TrimSpace(commandsStart), commandsEnd)
	}
	list := commandList(newRootCmd())
	want := before + commandsStart + list + commandsEnd + after
	if readme == want {
		return
	}
	if *updateREADME {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("README.md's command list is stale; run: go test ./cmd/aguard -run TestREADMECommandList -update\nwant:\n%s", list)
}

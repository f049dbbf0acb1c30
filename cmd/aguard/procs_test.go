package main

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
)

// TestServeRunsOnOneProcessorWhileQuiet starts the binary with the
// runtime's default GOMAXPROCS and reads, on /metrics, that a quiet aguard
// comes down to one processor (README, "Operating it").
func TestServeRunsOnOneProcessorWhileQuiet(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skipf("%d CPU here: the default is one processor already", runtime.NumCPU())
	}
	t.Setenv("GOMAXPROCS", "") // restored after the test
	os.Unsetenv("GOMAXPROCS")  // the child gets the runtime's default
	bin := buildAguard(t)
	agent := newScriptedAgent(t)
	a := startJSONAguard(t, bin, "--upstream", agent.URL)
	const series = "go_sched_gomaxprocs_threads"
	if got := metric(t, a.admin, series); got < 1 {
		t.Fatalf("%s is %v at the start, want the runtime's default", series, got)
	}
	// Scraping /metrics costs CPU: a look every 200 ms leaves aguard quiet.
	await.Every(t, 200*time.Millisecond, await.Default, series+" 1 while aguard is quiet",
		func() bool { return metric(t, a.admin, series) == 1 })
}

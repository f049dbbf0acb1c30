package main

import (
	"os"
	"testing"
)

// Work in the process's own code shows as user time, not system time:
// the split run.sh reports (where a proxy's CPU goes: its code, or the
// kernel working for it) is not swapped.
func TestCPUTimesCountOwnCodeAsUserTime(t *testing.T) {
	pids := []int{os.Getpid()}
	before, err := cpuTimes(pids)
	if err != nil {
		t.Fatal(err)
	}
	x := uint64(1)
	var now cpuTime
	for now.user-before.user < 0.05 { // until the clock has seen 50 ms of it
		for range 1 << 20 {
			x = x*6364136223846793005 + 1442695040888963407
		}
		if now, err = cpuTimes(pids); err != nil {
			t.Fatal(err)
		}
	}
	if x == 0 {
		t.Log(x) // keeps the loop
	}
	user, system := now.user-before.user, now.system-before.system
	if system >= user {
		t.Fatalf("a loop of arithmetic read as %.2f s user, %.2f s system", user, system)
	}
}

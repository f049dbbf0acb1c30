//go:build !linux

package procs

import "time"

// runQueueWait has no figure off Linux: the Governor never finds the host
// contended there.
func runQueueWait() (time.Duration, bool) { return 0, false }

// cpuLimited says limited off Linux, where the Governor cannot tell.
func cpuLimited(string) bool { return true }

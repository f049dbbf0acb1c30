//go:build !unix

package procs

import "time"

// cpuTime has no figure where getrusage(2) is missing: the Governor then
// changes nothing, and GOMAXPROCS stays the runtime's default.
func cpuTime() (time.Duration, bool) { return 0, false }

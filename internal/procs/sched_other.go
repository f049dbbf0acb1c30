//go:build !linux

package procs

import "time"

// waitReader has no figure off Linux: the Governor never finds the host
// contended there.
type waitReader struct{}

func newWaitReader() *waitReader                { return &waitReader{} }
func (*waitReader) read() (time.Duration, bool) { return 0, false }
func (*waitReader) close()                      {}

// cpuLimits says limited off Linux, where the Governor cannot tell.
func cpuLimits(string) limits { return limits{limited: true} }

// idleReader has no figure off Linux.
type idleReader struct{}

func newIdleReader() *idleReader                { return &idleReader{} }
func (*idleReader) read() (time.Duration, bool) { return 0, false }
func (*idleReader) close()                      {}

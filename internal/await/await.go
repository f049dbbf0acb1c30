// Package await is the one poll loop aguard's tests share: it waits for a
// condition that another goroutine or process makes true, and fails the test
// with what it was waiting for when that does not happen in time.
//
// It is for tests only. A test that must show something did not happen waits
// for an event that proves it (a later event, a counter, a log line), never
// for a while.
package await

import (
	"testing"
	"time"
)

// Default is how long For waits: long enough for a loaded CI machine, short
// enough that a broken test fails before the package's timeout.
const Default = 10 * time.Second

// interval is the pause between two looks at the condition.
const interval = 5 * time.Millisecond

// For polls cond until it holds, and fails t naming what after Default.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Within(t, Default, what, cond)
}

// Within is For with its own limit d.
func Within(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	Every(t, interval, d, what, cond)
}

// Every is Within looking at cond once every pause, for conditions whose
// look costs the process under test (a scrape of its /metrics) enough to
// disturb what is awaited.
func Every(t testing.TB, pause, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !poll(pause, d, cond) {
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
}

// Until polls cond for at most d, and reports whether it came to hold. It
// is for goroutines other than the test's, which must not end the test
// (t.Fatal): they report a false with t.Error and return.
func Until(d time.Duration, cond func() bool) bool { return poll(interval, d, cond) }

// poll looks at cond once every pause until it holds (true) or d has
// passed (false).
func poll(pause, d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
	}
	return true
}

//go:build race

package state

// raceBuild is set when the tests run with the race detector, which makes
// the largest tests several times slower.
const raceBuild = true

//go:build !race

package state

const raceBuild = false

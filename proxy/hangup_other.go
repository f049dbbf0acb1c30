//go:build !linux

package proxy

import (
	"errors"
	"net"
)

// hangups has no shared implementation here: every stream's consumer is
// watched by a goroutine of its own (watchByReading); nothing else is watched.
type hangups struct{}

func newHangups() (*hangups, error) {
	return nil, errors.New("no shared hang-up watcher on this platform")
}

func (*hangups) add(net.Conn, watcher) (func(), bool) { return nil, false }

func (*hangups) close() error { return nil }

//go:build !unix

package proxy

import (
	"errors"
	"net"
)

// consumerWriter is not available here: streams write through net.Conn.
type consumerWriter struct{}

func newConsumerWriter(net.Conn) *consumerWriter { return nil }

func (*consumerWriter) Write([]byte) (int, error) {
	return 0, errors.New("aguard: raw socket writes are not supported on this platform")
}

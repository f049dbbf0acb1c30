//go:build !linux

package proxy

import "net"

// peerClosed cannot look into the connection here: it counts as open (a
// request sent on it after the agent closed it fails as it would anyway, and
// is retried only when the method allows it).
func peerClosed(net.Conn) bool { return false }

// ackedBytes cannot ask the kernel here.
func ackedBytes(net.Conn) (uint64, bool) { return 0, false }

// awaitReadable does not wait here: the server's own read timeout bounds
// the wait for the next request instead of its idle timeout.
func awaitReadable(net.Conn) error { return nil }

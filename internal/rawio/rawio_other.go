//go:build !unix

package rawio

import "net"

// Conn returns c: connections read and write through the net package here.
func Conn(c net.Conn) net.Conn { return c }

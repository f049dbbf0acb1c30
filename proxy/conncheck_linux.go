package proxy

import (
	"net"

	"github.com/aguard/aguard/internal/rawio"
	"golang.org/x/sys/unix"
)

// peerClosed reports whether the peer of c, a connection nothing is expected
// on, has closed or reset it, or sent something (an agent has nothing to
// send on an idle connection, and what it sent would be read as the next
// answer). It peeks without blocking and consumes nothing. A connection it
// cannot check counts as open.
func peerClosed(c net.Conn) bool {
	raw, ok := rawConn(c)
	if !ok {
		return false
	}
	closed := false
	raw.Control(func(fd uintptr) {
		var b [1]byte
		for {
			n, err := rawio.Peek(int(fd), b[:])
			if err == unix.EINTR {
				continue
			}
			closed = n > 0 || (n == 0 && err == nil) || (err != nil && err != unix.EAGAIN)
			return
		}
	})
	return closed
}

// ackedBytes is how many bytes sent on c the peer's TCP stack has
// acknowledged (tcpi_bytes_acked, Linux 4.1 and later; RFC 4898's
// tcpEStatsAppHCThruOctetsAcked). ok is false when the kernel cannot say.
func ackedBytes(c net.Conn) (n uint64, ok bool) {
	raw, isRaw := rawConn(c)
	if !isRaw {
		return 0, false
	}
	var err error
	if cerr := raw.Control(func(fd uintptr) {
		n, err = rawio.BytesAcked(int(fd))
	}); cerr != nil || err != nil {
		return 0, false
	}
	return n, true
}

// awaitReadable waits until c has something to read (a byte, the peer's
// close, or an error) or c's read deadline passes, and consumes nothing. It
// returns an error when the wait ended without a byte to read.
func awaitReadable(c net.Conn) error {
	raw, ok := rawConn(c)
	if !ok {
		return nil // let the reader wait itself
	}
	var readErr error
	err := raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, err := rawio.Peek(int(fd), b[:])
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
			return false // wait for more
		case err != nil:
			readErr = err
		case n == 0:
			readErr = errPeerClosed
		}
		return true
	})
	if err != nil {
		return err
	}
	return readErr
}

//go:build unix

package proxy

import (
	"net"
	"os"
	"syscall"
)

// consumerWriter writes to a consumer's TCP connection with raw system
// calls (rawWrite), waiting through Go's netpoller only when the socket's
// buffer is full, as net.Conn.Write does, deadlines included.
type consumerWriter struct{ rc syscall.RawConn }

// newConsumerWriter returns a writer for c, or nil when c is not a plain
// TCP connection.
func newConsumerWriter(c net.Conn) *consumerWriter {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return &consumerWriter{rc: rc}
}

// Write writes all of b, or fails as net.Conn.Write fails (a passed
// deadline is os.ErrDeadlineExceeded).
func (w *consumerWriter) Write(b []byte) (int, error) {
	n := 0
	var werr error
	err := w.rc.Write(func(fd uintptr) bool {
		for n < len(b) {
			m, err := rawWrite(int(fd), b[n:])
			switch err {
			case nil:
				n += m
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				werr = os.NewSyscallError("write", err)
				return true
			}
		}
		return true
	})
	if werr != nil {
		err = werr
	}
	return n, err
}

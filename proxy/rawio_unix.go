//go:build unix

package proxy

import (
	"io"
	"net"
	"os"
	"syscall"
)

// consumerWriter writes to a consumer's TCP connection with raw system
// calls (rawWrite), waiting through Go's netpoller only when the socket's
// buffer is full, as net.Conn.Write does, deadlines included.
type consumerWriter struct{ rc syscall.RawConn }

// newConsumerWriter returns the writer a stream writes c with: a
// consumerWriter when c is a plain TCP connection, else c.
func newConsumerWriter(c net.Conn) io.Writer {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
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

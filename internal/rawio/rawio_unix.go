//go:build unix

package rawio

import (
	"io"
	"net"
	"os"
	"syscall"
)

// Conn returns c reading and writing with raw system calls when c is a
// plain TCP connection (*net.TCPConn), else c itself. Everything but Read
// and Write is c's own: deadlines, Close, addresses, SyscallConn.
func Conn(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &conn{TCPConn: tc, rc: rc}
}

// conn is a TCP connection whose Read and Write are raw system calls made
// inside its RawConn's Read and Write, which keep the descriptor open
// meanwhile and wait through the netpoller, deadlines included, whenever
// the function reports that the socket was not ready.
type conn struct {
	*net.TCPConn
	rc syscall.RawConn
}

// Read reads into b as net.Conn.Read does: it waits for data, returns
// io.EOF once the peer has closed, and fails with a *net.OpError (a passed
// deadline is os.ErrDeadlineExceeded within it).
func (c *conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n := 0
	var rerr error
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			m, err := Read(int(fd), b)
			switch err {
			case nil:
				n = m
				if m == 0 {
					rerr = io.EOF
				}
				return true
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				rerr = c.opError("read", os.NewSyscallError("read", err))
				return true
			}
		}
	})
	if err != nil {
		return n, asOp("read", err)
	}
	return n, rerr
}

// Write writes all of b, or fails as net.Conn.Write fails (a passed
// deadline is os.ErrDeadlineExceeded within a *net.OpError).
func (c *conn) Write(b []byte) (int, error) {
	n := 0
	var werr error
	err := c.rc.Write(func(fd uintptr) bool {
		for n < len(b) {
			m, err := Write(int(fd), b[n:])
			switch err {
			case nil:
				n += m
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				werr = c.opError("write", os.NewSyscallError("write", err))
				return true
			}
		}
		return true
	})
	if err != nil {
		return n, asOp("write", err)
	}
	return n, werr
}

// opError wraps err as the net package wraps a failed read or write.
func (c *conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// asOp names the failed operation op in an error of the RawConn (which
// names it "raw-read" or "raw-write"), so that a timeout or a close reads
// in a log as the net package's own read or write would.
func asOp(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok && oe.Op != op {
		e := *oe
		e.Op = op
		return &e
	}
	return err
}

//go:build unix

package rawio

import (
	"io"
	"net"
	"os"
	"sync"
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
	rw := &conn{TCPConn: tc, rc: rc}
	rw.r.fn, rw.w.fn = rw.readFD, rw.writeFD
	return rw
}

// conn is a TCP connection whose Read and Write are raw system calls made
// inside its RawConn's Read and Write, which keep the descriptor open
// meanwhile and wait through the netpoller, deadlines included, whenever
// the function reports that the socket was not ready.
//
// The function handed to the RawConn is made once per connection, with
// the call's buffer, count and error in r or w: a closure made per call
// would escape to the heap (RawConn is an interface), an allocation for
// every event a stream writes. r and w each serve one call at a time, as
// net.Conn's own reads and writes do.
type conn struct {
	*net.TCPConn
	rc syscall.RawConn
	r  rawOp
	w  rawOp
}

// rawOp is the state of a read or a write in progress on a conn.
type rawOp struct {
	mu  sync.Mutex
	fn  func(fd uintptr) bool // conn.readFD or conn.writeFD
	b   []byte
	n   int
	err error
}

// do runs op.fn on b through f (the RawConn's Read or Write), and returns
// the count and error fn left, or f's own error (named after op).
func (o *rawOp) do(f func(func(uintptr) bool) error, op string, b []byte) (int, error) {
	o.mu.Lock()
	o.b, o.n, o.err = b, 0, nil
	err := f(o.fn)
	n, oerr := o.n, o.err
	o.b, o.err = nil, nil
	o.mu.Unlock()
	if err != nil {
		return n, asOp(op, err)
	}
	return n, oerr
}

// Read reads into b as net.Conn.Read does: it waits for data, returns
// io.EOF once the peer has closed, and fails with a *net.OpError (a passed
// deadline is os.ErrDeadlineExceeded within it).
func (c *conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	return c.r.do(c.rc.Read, "read", b)
}

// readFD is Read's system call on fd, into c.r.b.
func (c *conn) readFD(fd uintptr) bool {
	o := &c.r
	for {
		m, err := Read(int(fd), o.b)
		switch err {
		case nil:
			o.n = m
			if m == 0 {
				o.err = io.EOF
			}
			return true
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			o.err = c.opError("read", os.NewSyscallError("read", err))
			return true
		}
	}
}

// Write writes all of b, or fails as net.Conn.Write fails (a passed
// deadline is os.ErrDeadlineExceeded within a *net.OpError).
func (c *conn) Write(b []byte) (int, error) {
	return c.w.do(c.rc.Write, "write", b)
}

// writeFD is Write's system calls on fd, of what is left of c.w.b.
func (c *conn) writeFD(fd uintptr) bool {
	o := &c.w
	for o.n < len(o.b) {
		m, err := Write(int(fd), o.b[o.n:])
		switch err {
		case nil:
			o.n += m
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			o.err = c.opError("write", os.NewSyscallError("write", err))
			return true
		}
	}
	return true
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

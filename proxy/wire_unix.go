//go:build unix

package proxy

import (
	"io"
	"os"
	"syscall"

	"github.com/aguard/aguard/internal/rawio"
)

// wireReadsFD: the wire can read its socket directly (wire.readFD).
const wireReadsFD = true

// readFD reads the socket without blocking. It is called only inside the
// connection's RawConn.Read, which keeps the descriptor open meanwhile. A
// short read means the socket had nothing more: the next call reports
// EAGAIN without reading, so that waiting for the agent's next bytes costs
// no read that finds nothing (Go's netpoller reports readiness edge-
// triggered, and RawConn.Read keeps an edge that arrives between a read and
// its wait). Like Read, it runs the stream's flush before each read of the
// socket: under a backlog, where no read is short, output still goes out
// a read's worth at a time.
func (w *wire) readFD(b []byte) (int, error) {
	if w.drained {
		return 0, syscall.EAGAIN
	}
	if err := w.flushFirst(); err != nil {
		return 0, err
	}
	for {
		n, err := rawio.Read(w.fd, b)
		w.c.socketReads++
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			w.drained = true
			return 0, err
		case err != nil:
			return 0, os.NewSyscallError("read", err)
		case n == 0 && len(b) > 0:
			return 0, io.EOF
		}
		// A short read drains the socket of data, not of the agent's close
		// or aguard's shutdown: once either has happened, read on to the
		// end (poke).
		w.drained = n < len(b) && !w.c.peerGone.Load() && !w.c.shut.Load()
		w.c.read += int64(n)
		return n, nil
	}
}

package proxy

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
)

// hangups is one epoll set holding the connections aguard waits on for the
// peer's close (EPOLLRDHUP; EPOLLHUP and EPOLLERR for a reset): the consumer
// of every running stream, the consumer of every request waiting for the
// agent's headers, and every connection to an agent. The set's own
// descriptor is read through Go's netpoller, so the one goroutine serving it
// parks like any network read: no thread is held, and closing the set ends
// it.
//
// Each registration carries an id of its own in the event's data, not the
// descriptor: a connection may close and its descriptor be reused by the
// next between the kernel reporting an event and the event being handled,
// and the id keeps that event from reaching the wrong watcher.
type hangups struct {
	file *os.File // the epoll descriptor
	done chan struct{}

	mu       sync.Mutex
	epfd     int
	next     uint64
	watchers map[uint64]watcher
}

// hangupEvents: the peer's close or a reset, edge-triggered (EPOLLET does
// not fit uint32 as syscall types it).
const hangupEvents = syscall.EPOLLRDHUP | syscall.EPOLLHUP | syscall.EPOLLERR | 1<<31

func newHangups() (*hangups, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		syscall.Close(epfd)
		return nil, fmt.Errorf("epoll descriptor: set non-blocking: %w", err)
	}
	f := os.NewFile(uintptr(epfd), "aguard-hangups")
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("epoll descriptor: %w", err)
	}
	h := &hangups{file: f, done: make(chan struct{}), epfd: epfd, watchers: map[uint64]watcher{}}
	go h.serve(raw)
	return h, nil
}

// serve reads the set's events until the set is closed.
func (h *hangups) serve(raw syscall.RawConn) {
	defer close(h.done)
	events := make([]syscall.EpollEvent, 64)
	// Read returns only when the descriptor is closed: the function
	// handles what is ready and returns false to wait for more.
	raw.Read(func(fd uintptr) bool {
		for {
			n, err := syscall.EpollWait(int(fd), events, 0)
			if err == syscall.EINTR {
				continue
			}
			if err != nil || n <= 0 {
				return false
			}
			for _, ev := range events[:n] {
				h.hungUp(uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32)
			}
			if n < len(events) {
				return false
			}
		}
	})
}

// hungUp tells the watcher registered as id, if it still is.
func (h *hangups) hungUp(id uint64) {
	h.mu.Lock()
	w := h.watchers[id]
	h.mu.Unlock()
	if w != nil {
		w.hungUp()
	}
}

// add registers c for w. It reports false when c has no descriptor to watch.
func (h *hangups) add(c net.Conn, w watcher) (stop func(), ok bool) {
	sc, isSys := c.(syscall.Conn)
	if !isSys {
		return nil, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.watchers == nil { // closed
		return nil, false
	}
	h.next++
	id := h.next
	var cfd int
	var ctlErr error
	err = raw.Control(func(fd uintptr) {
		cfd = int(fd)
		ev := syscall.EpollEvent{Events: hangupEvents, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
		ctlErr = syscall.EpollCtl(h.epfd, syscall.EPOLL_CTL_ADD, cfd, &ev)
	})
	if err != nil || ctlErr != nil {
		return nil, false
	}
	h.watchers[id] = w
	return func() { h.remove(id, raw) }, true
}

// remove unregisters id. It must run before the connection is closed, while
// its descriptor still names it.
func (h *hangups) remove(id uint64, raw syscall.RawConn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.watchers[id]; !ok {
		return
	}
	delete(h.watchers, id)
	raw.Control(func(fd uintptr) {
		syscall.EpollCtl(h.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil)
	})
}

// close ends the watch of every connection and waits for the serving
// goroutine to return.
func (h *hangups) close() error {
	h.mu.Lock()
	h.watchers = nil
	h.mu.Unlock()
	err := h.file.Close()
	<-h.done
	if errors.Is(err, os.ErrClosed) {
		err = nil
	}
	return err
}

package redistest

import (
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
)

// Link is a TCP relay in front of a Server that a test can cut, as a network
// partition would: every open connection is closed, and connections made
// while it is cut are closed at once. The server keeps running and keeps its
// data, unlike Stop.
type Link struct {
	srv *Server
	ln  net.Listener

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// Link starts a relay to s on a free loopback port, closed at test cleanup.
func (s *Server) Link(tb testing.TB) *Link {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: link listener: %v", err)
	}
	l := &Link{srv: s, ln: ln, conns: map[net.Conn]struct{}{}}
	l.wg.Add(1)
	go l.accept()
	tb.Cleanup(l.close)
	return l
}

// URL is the relay's address as a redis:// URL (database 0).
func (l *Link) URL() string {
	return "redis://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(l.ln.Addr().(*net.TCPAddr).Port)) + "/0"
}

// Cut closes every relayed connection and refuses new ones until Heal.
func (l *Link) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	for c := range l.conns {
		c.Close()
	}
}

// Redirect closes every relayed connection and relays new ones to to, as
// a managed Redis's endpoint moves to a new primary after a failover.
func (l *Link) Redirect(to *Server) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.srv = to
	for c := range l.conns {
		c.Close()
	}
}

// Follow relays new connections to to and leaves open ones relaying to the
// server they reach, as an endpoint whose name a failover moves: a
// client's connections made before stay with the old primary until they
// close.
func (l *Link) Follow(to *Server) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.srv = to
}

// Heal relays new connections again.
func (l *Link) Heal() {
	l.mu.Lock()
	l.cut = false
	l.mu.Unlock()
}

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		if l.cut {
			l.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", l.srv.Addr())
		if err != nil {
			l.mu.Unlock()
			c.Close()
			continue
		}
		l.conns[c], l.conns[up] = struct{}{}, struct{}{}
		l.mu.Unlock()
		l.wg.Add(2)
		go l.pipe(c, up)
		go l.pipe(up, c)
	}
}

// pipe copies from src to dst and closes both when either side ends.
func (l *Link) pipe(dst, src net.Conn) {
	defer l.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	l.mu.Lock()
	delete(l.conns, dst)
	delete(l.conns, src)
	l.mu.Unlock()
}

func (l *Link) close() {
	l.ln.Close()
	l.Cut()
	l.wg.Wait()
}

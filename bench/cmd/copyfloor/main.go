//go:build linux

// Command copyfloor is a byte-copying HTTP/1.1 proxy for one request per
// connection, in two designs, to measure what the design alone costs
// against nginx at run.sh's paced load, before any parsing or checking:
//
//   - -mode go: a goroutine per stream reads the agent's socket through
//     Go's net package (which reads until EAGAIN before it parks) and
//     writes what it read to the consumer, as aguard's pump did;
//   - -mode ev: the agent's socket is taken off Go's netpoller (a
//     duplicate of its descriptor, the original closed) and put in an
//     edge-triggered epoll set of its own, one per GOMAXPROCS worker
//     goroutine blocked in epoll_wait, which reads each ready socket until
//     a short read and writes to the consumer without blocking (a consumer
//     that cannot take it all is written to by the worker, blocking: a
//     measurement, not a product), the way nginx's event loop works.
//
// It forwards the agent's answer byte for byte (head and chunked body), so
// loadgen reads it as it reads aguard's. For example, with agentsim on
// :18401:
//
//	copyfloor -mode go -listen 127.0.0.1:18490 &
//	loadgen -url 'http://127.0.0.1:18490/agent?events=1000000000&rate=20' -streams 1000 \
//	    -ramp 2s -warmup 3s -duration 15s -watch proxy=$!
//
// Linux only (epoll). Loopback use only: it checks nothing.
package main

import (
	"bufio"
	"flag"
	"io"
	"log"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18490", "address consumers connect to (loopback)")
	agent := flag.String("agent", "127.0.0.1:18401", "the agent's address")
	mode := flag.String("mode", "go", "go: a goroutine per stream; ev: epoll workers")
	flag.Parse()
	if *mode != "go" && *mode != "ev" {
		log.Fatalf("copyfloor: -mode: want go or ev, got %q", *mode)
	}
	var loop *loop
	if *mode == "ev" {
		loop = newLoop(runtime.GOMAXPROCS(0))
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go serve(c, *agent, loop)
	}
}

// serve reads one request from the consumer c, sends it to the agent and
// copies the answer back.
func serve(c net.Conn, agent string, l *loop) {
	req, err := readRequest(bufio.NewReader(c))
	if err != nil {
		c.Close()
		return
	}
	a, err := net.Dial("tcp", agent)
	if err != nil {
		c.Close()
		return
	}
	if _, err := a.Write(req); err != nil || l == nil {
		copyAnswer(a, c)
		return
	}
	l.add(a.(*net.TCPConn), c.(*net.TCPConn))
}

// readRequest reads a request's head and its Content-Length body.
func readRequest(br *bufio.Reader) ([]byte, error) {
	var req []byte
	length := 0
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		req = append(req, line...)
		if name, value, ok := strings.Cut(string(line), ":"); ok && strings.EqualFold(name, "Content-Length") {
			length, _ = strconv.Atoi(strings.TrimSpace(value))
		}
		if len(line) <= 2 {
			break
		}
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(br, body); err != nil {
		return nil, err
	}
	return append(req, body...), nil
}

// copyAnswer is -mode go: read the agent, write the consumer, until either
// ends.
func copyAnswer(a, c net.Conn) {
	defer a.Close()
	defer c.Close()
	buf := make([]byte, 4096)
	for {
		n, err := a.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// loop is -mode ev: epoll sets, one per worker.
type loop struct {
	mu      sync.Mutex
	workers []*worker
	next    int
}

type worker struct {
	epfd  int
	mu    sync.Mutex
	ready map[int32]func()
}

func newLoop(n int) *loop {
	l := &loop{}
	for range n {
		epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			log.Fatal(err)
		}
		w := &worker{epfd: epfd, ready: map[int32]func(){}}
		go w.run()
		l.workers = append(l.workers, w)
	}
	return l
}

func (w *worker) run() {
	events := make([]unix.EpollEvent, 128)
	for {
		n, err := unix.EpollWait(w.epfd, events, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		for _, ev := range events[:n] {
			w.mu.Lock()
			f := w.ready[ev.Fd]
			w.mu.Unlock()
			if f != nil {
				f()
			}
		}
	}
}

// add takes the agent's socket off Go's netpoller and copies what it sends
// to the consumer from a worker.
func (l *loop) add(a, c *net.TCPConn) {
	raw, err := a.SyscallConn()
	if err != nil {
		a.Close()
		c.Close()
		return
	}
	fd := -1
	raw.Control(func(f uintptr) { fd, err = unix.Dup(int(f)) })
	a.Close()
	craw, cerr := c.SyscallConn()
	if err != nil || cerr != nil {
		c.Close()
		return
	}
	l.mu.Lock()
	w := l.workers[l.next%len(l.workers)]
	l.next++
	l.mu.Unlock()
	buf := make([]byte, 4096)
	done := false
	end := func() {
		done = true
		w.mu.Lock()
		delete(w.ready, int32(fd))
		w.mu.Unlock()
		unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, fd, nil)
		unix.Close(fd)
		c.Close()
	}
	w.mu.Lock()
	w.ready[int32(fd)] = func() {
		for !done {
			n, err := unix.Read(fd, buf)
			if err == unix.EAGAIN {
				return
			}
			if n <= 0 {
				end()
				return
			}
			rest := buf[:n]
			var werr error
			craw.Write(func(f uintptr) bool {
				m, e := unix.Write(int(f), rest)
				if m > 0 {
					rest = rest[m:]
				}
				werr = e
				return true // one attempt: never wait here
			})
			if len(rest) > 0 && (werr == nil || werr == unix.EAGAIN) {
				_, werr = c.Write(rest)
			}
			if werr != nil && werr != unix.EAGAIN {
				end()
				return
			}
			if n < len(buf) {
				return
			}
		}
	}
	w.mu.Unlock()
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(fd)}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		end()
	}
}

//go:build unix

package rawio

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection: the one
// aguard would write to (a consumer's connection, as the server accepted
// it) and the consumer's.
func tcpPair(t *testing.T) (server, client *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return s.(*net.TCPConn), c.(*net.TCPConn)
}

// A write larger than the socket's buffers meets EAGAIN: the raw writer
// waits for the consumer to read and writes every byte, in order, in one
// call, as net.Conn.Write does.
func TestRawWritesWaitForAConsumerThatReadsSlowly(t *testing.T) {
	server, client := tcpPair(t)
	server.SetWriteBuffer(16 << 10)
	client.SetReadBuffer(16 << 10)
	w, ok := Conn(server).(*conn)
	if !ok {
		t.Fatal("no raw connection for a plain TCP connection")
	}
	want := make([]byte, 8<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, len(want))
		n := 0
		for n < len(b) {
			m, err := client.Read(b[n:min(n+4096, len(b))]) // small reads: the writer waits many times
			n += m
			if err != nil {
				break
			}
		}
		got <- b[:n]
	}()
	n, err := w.Write(want)
	if err != nil || n != len(want) {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(want))
	}
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("the consumer read %d bytes, not the %d written in order", len(b), len(want))
	}
}

// A consumer that reads nothing does not hold a stream for good: the
// connection's write deadline (aguard's stalled-consumer limit) ends the
// raw writer's wait as it ends net.Conn.Write's.
func TestRawWritesKeepTheWriteDeadline(t *testing.T) {
	server, _ := tcpPair(t)
	server.SetWriteBuffer(16 << 10)
	w := Conn(server)
	server.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	n, err := w.Write(make([]byte, 64<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write to a consumer that reads nothing = %d, %v; want os.ErrDeadlineExceeded", n, err)
	}
	if n >= 64<<20 {
		t.Fatalf("wrote all %d bytes to a consumer that reads nothing", n)
	}
	if !strings.HasPrefix(err.Error(), "write tcp ") {
		t.Fatalf("the timeout reads %q; want it named as net.Conn.Write names it (write tcp …)", err)
	}
}

// A consumer that has gone (its connection reset) makes the write fail
// with the socket's error, not wait.
func TestRawWritesReportAConsumerThatLeft(t *testing.T) {
	server, client := tcpPair(t)
	client.SetLinger(0) // close with a reset
	client.Close()
	w := Conn(server)
	var err error
	for range 1000 { // the reset may come after a write was taken
		if _, err = w.Write([]byte("data: {}\n\n")); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("writes to a consumer that reset its connection: %v; want EPIPE or ECONNRESET", err)
	}
}

// A read finds no data, waits through the netpoller, and returns what the
// peer writes once it writes it; the peer's close is io.EOF.
func TestRawReadsWaitForThePeer(t *testing.T) {
	server, client := tcpPair(t)
	c := Conn(server)
	type result struct {
		s   string
		err error
	}
	got := make(chan result, 1)
	go func() {
		b := make([]byte, 64)
		n, err := c.Read(b)
		got <- result{string(b[:n]), err}
	}()
	if _, err := client.Write([]byte("+PONG\r\n")); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r.err != nil || r.s != "+PONG\r\n" {
		t.Fatalf("first read = %q, %v; want the peer's reply", r.s, r.err)
	}
	client.Close()
	if n, err := c.Read(make([]byte, 64)); n != 0 || err != io.EOF {
		t.Fatalf("read after the peer closed = %d, %v; want io.EOF", n, err)
	}
}

// A read from a peer that sends nothing ends at the read deadline with a
// net.Error whose Timeout is true, as go-redis expects of a connection.
func TestRawReadsKeepTheReadDeadline(t *testing.T) {
	server, _ := tcpPair(t)
	c := Conn(server)
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	n, err := c.Read(make([]byte, 16))
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read from a silent peer = %d, %v; want a timeout", n, err)
	}
	if !strings.HasPrefix(err.Error(), "read tcp ") {
		t.Fatalf("the timeout reads %q; want it named as net.Conn.Read names it (read tcp …)", err)
	}
}

// A connection closed while a read waits ends the read with net.ErrClosed.
func TestRawReadsEndWhenTheConnectionCloses(t *testing.T) {
	server, _ := tcpPair(t)
	c := Conn(server)
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 16))
		done <- err
	}()
	c.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read on a connection closed under it = %v; want net.ErrClosed", err)
	}
}

// The raw connection still gives its descriptor to whoever asks
// (go-redis's health check peeks at it through syscall.Conn), and a
// connection that is not plain TCP is returned as it is.
func TestConnKeepsTheSocketsOwnMethods(t *testing.T) {
	server, _ := tcpPair(t)
	if _, ok := Conn(server).(syscall.Conn); !ok {
		t.Fatal("the raw connection hides SyscallConn")
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if Conn(a) != a {
		t.Fatal("Conn wrapped a connection that is not a TCP socket")
	}
}

// A read or write that finds the socket ready allocates nothing: a stream
// writes once per event, and what each write allocated was most of what
// aguard allocated at a paced load.
func TestRawReadsAndWritesAllocateNothing(t *testing.T) {
	server, client := tcpPair(t)
	w, r := Conn(server), Conn(client)
	out, in := []byte("data: {}\n\n"), make([]byte, 64)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := w.Write(out); err != nil {
			t.Fatal(err)
		}
		if n, err := r.Read(in); err != nil || n == 0 {
			t.Fatalf("read %d bytes: %v", n, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("a write and a read allocated %.1f times, want 0", allocs)
	}
}

// Writes from two goroutines at once each arrive whole: a conn's state for
// a call in progress serves one call at a time.
func TestConcurrentRawWritesArriveWhole(t *testing.T) {
	server, client := tcpPair(t)
	w := Conn(server)
	const writers, each = 4, 500
	lines := make([][]byte, writers)
	for i := range lines {
		lines[i] = bytes.Repeat([]byte{'a' + byte(i)}, 999)
		lines[i] = append(lines[i], '\n')
	}
	done := make(chan error, writers)
	for i := range writers {
		go func() {
			for range each {
				if _, err := w.Write(lines[i]); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	got := map[byte]int{}
	br := bufio.NewReader(client)
	for range writers * each {
		line, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		if len(line) != 1000 || bytes.Count(line, line[:1]) != 999 {
			t.Fatalf("a line arrived mixed with another: %q…", line[:min(len(line), 40)])
		}
		got[line[0]]++
	}
	for range writers {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for i := range writers {
		if got['a'+byte(i)] != each {
			t.Fatalf("writer %d: %d lines arrived, want %d", i, got['a'+byte(i)], each)
		}
	}
}

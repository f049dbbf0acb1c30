package rawio

import (
	"errors"
	"io"
	"syscall"
	"testing"
	"time"
)

// TestPeekSeesWithoutConsuming pins Peek on a loopback connection: nothing
// to read is EAGAIN at once; a byte sent is seen and then still read; the
// peer's close is 0 bytes and no error.
func TestPeekSeesWithoutConsuming(t *testing.T) {
	server, client := tcpPair(t)
	raw, err := server.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	peek := func() (n int, b byte, err error) {
		var buf [1]byte
		raw.Control(func(fd uintptr) { n, err = Peek(int(fd), buf[:]) })
		return n, buf[0], err
	}
	if n, _, err := peek(); n != 0 || !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("nothing sent: Peek = %d, %v; want EAGAIN", n, err)
	}
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	// The byte reaches the socket soon after the write returns.
	deadline := time.Now().Add(10 * time.Second)
	n, b, err := peek()
	for errors.Is(err, syscall.EAGAIN) && time.Now().Before(deadline) {
		n, b, err = peek()
	}
	if n != 1 || b != 'x' || err != nil {
		t.Fatalf("one byte sent: Peek = %d %q, %v", n, b, err)
	}
	var got [1]byte
	server.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(server, got[:]); err != nil || got[0] != 'x' {
		t.Fatalf("read after the peek: %q, %v", got, err)
	}
	client.Close()
	n, _, err = peek()
	for errors.Is(err, syscall.EAGAIN) && time.Now().Before(deadline) {
		n, _, err = peek()
	}
	if n != 0 || err != nil {
		t.Fatalf("peer closed: Peek = %d, %v; want 0, nil", n, err)
	}
}

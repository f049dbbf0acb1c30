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

// TestBytesAckedCountsWhatThePeerAcknowledged pins BytesAcked on a
// loopback connection: nothing sent is 0 acknowledged (the handshake
// aside, which Linux counts as one); once the peer's stack has the bytes
// sent, they are counted.
func TestBytesAckedCountsWhatThePeerAcknowledged(t *testing.T) {
	server, client := tcpPair(t)
	raw, err := server.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	acked := func() (n uint64, err error) {
		raw.Control(func(fd uintptr) { n, err = BytesAcked(int(fd)) })
		return n, err
	}
	before, err := acked()
	if err != nil || before > 1 {
		t.Fatalf("nothing sent: BytesAcked = %d, %v", before, err)
	}
	if _, err := server.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	var got [1000]byte
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(client, got[:]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	n, err := acked()
	for err == nil && n < before+1000 && time.Now().Before(deadline) {
		n, err = acked()
	}
	if err != nil || n != before+1000 {
		t.Fatalf("1000 bytes sent and read: BytesAcked = %d, %v; want %d", n, err, before+1000)
	}
}

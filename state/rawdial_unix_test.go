//go:build unix

package state

import (
	"context"
	"net"
	"syscall"
	"testing"
)

// The Store's dial hook hands go-redis a raw connection for a TCP one,
// still a syscall.Conn for go-redis's health check of idle connections.
func TestRedisConnectionsAreRaw(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			c.Write([]byte("+PONG\r\n"))
		}
	}()
	var d net.Dialer
	c, err := rawDial{}.DialHook(d.DialContext)(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, plain := c.(*net.TCPConn); plain {
		t.Fatal("the dial hook returned the net package's connection")
	}
	if _, ok := c.(syscall.Conn); !ok {
		t.Fatal("the raw connection hides SyscallConn from go-redis's health check")
	}
	b := make([]byte, 16)
	n, err := c.Read(b)
	if err != nil || string(b[:n]) != "+PONG\r\n" {
		t.Fatalf("Read = %q, %v", b[:n], err)
	}
}

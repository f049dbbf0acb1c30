// Package redistest runs throwaway redis-server processes for tests.
//
// Each Server is a real redis-server (Debian's 7.0 in CI; the test command
// installs it) bound to a free loopback port, without persistence, killed at
// test cleanup. Tests use it instead of an in-process fake so that they
// exercise the commands and Lua the production server runs.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 10 * time.Second

// Server is a running (or stopped) redis-server owned by one test.
type Server struct {
	tb   testing.TB
	bin  string
	dir  string
	port int
	args []string // more redis-server arguments

	mu     sync.Mutex
	proc   *os.Process // nil while stopped
	exited chan error  // receives the exit of proc
	n      int         // starts so far, to name log files
}

// Start starts a redis-server on a free loopback port and waits until it
// answers PING. It fails the test if redis-server is not on PATH or does not
// come up, and stops the server at test cleanup.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := launch(tb, tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// launch starts a redis-server with args on a free loopback port, in dir.
// tb is kept for Restart's failures only.
func launch(tb testing.TB, dir string, args ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server not found; the test command installs it (apt-get install -y redis-server)")
	}
	s := &Server{tb: tb, bin: bin, dir: dir}
	var lastErr error
	for range 5 { // another process may take the free port before redis binds it
		if s.port, err = freePort(); err != nil {
			return nil, fmt.Errorf("redistest: find a free port: %w", err)
		}
		s.args = args
		if len(args) > 0 && args[0] == "--cluster-enabled" {
			// The cluster bus needs a port of its own, free too.
			bus, err := freePort()
			if err != nil {
				return nil, fmt.Errorf("redistest: find a free port: %w", err)
			}
			s.args = append(slices.Clone(args), "--cluster-port", strconv.Itoa(bus),
				"--cluster-config-file", fmt.Sprintf("nodes-%d.conf", s.port))
		}
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, fmt.Errorf("redistest: %w", lastErr)
}

// URL is the server's address as a redis:// URL (database 0).
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Stop kills the server (SIGKILL, as a crash would) and waits for it to
// exit. Its data is gone. Stop on a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	_ = s.proc.Kill()
	<-s.exited
	s.proc = nil
}

// Restart stops the server if it runs, starts an empty one on the same port,
// and waits until it answers PING; it fails the test if that does not work.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Stop()
	deadline := time.Now().Add(startTimeout)
	for {
		err := s.start()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("redistest: restart on port %d: %v", s.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// start runs redis-server on s.port and waits for PING.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	logPath := filepath.Join(s.dir, fmt.Sprintf("redis-%d-%d.log", s.port, s.n))
	args := append([]string{
		"--bind", "127.0.0.1", "--port", strconv.Itoa(s.port),
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--dir", s.dir, "--logfile", logPath}, s.args...)
	cmd := exec.Command(s.bin, args...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(startTimeout)
	for {
		if ping(s.Addr()) == nil {
			s.proc, s.exited = cmd.Process, exited
			return nil
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("redis-server on port %d exited (%v): %s", s.port, err, log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("redis-server on port %d did not answer PING within %v: %s", s.port, startTimeout, log)
		}
	}
}

// ping sends PING over a fresh connection and expects +PONG.
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

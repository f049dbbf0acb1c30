package redistest

import (
	"bufio"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
)

func TestStartAnswersPingAndStopSilencesIt(t *testing.T) {
	s := Start(t)
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("PING after Start: %v", err)
	}
	if got, want := s.URL(), "redis://"+s.Addr()+"/0"; got != want {
		t.Errorf("URL() = %q, want %q", got, want)
	}
	s.Stop()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("PING answered after Stop")
	}
	s.Stop() // idempotent
}

func TestRestartServesOnTheSamePort(t *testing.T) {
	s := Start(t)
	addr := s.Addr()
	s.Restart()
	if s.Addr() != addr {
		t.Fatalf("Restart moved the server from %s to %s", addr, s.Addr())
	}
	if err := ping(addr); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	s.Stop()
	s.Restart() // from stopped
	if err := ping(addr); err != nil {
		t.Fatalf("PING after Stop and Restart: %v", err)
	}
}

func TestLinkCutClosesConnectionsAndHealRelaysAgain(t *testing.T) {
	s := Start(t)
	l := s.Link(t)
	addr := strings.TrimSuffix(strings.TrimPrefix(l.URL(), "redis://"), "/0")
	if err := ping(addr); err != nil {
		t.Fatalf("PING through the link: %v", err)
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("PING\r\n"))
	if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING on an open connection = %q, %v", line, err)
	}
	l.Cut()
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection survived Cut")
	}
	if err := ping(addr); err == nil {
		t.Fatal("PING answered through a cut link")
	}
	l.Heal()
	if err := ping(addr); err != nil {
		t.Fatalf("PING after Heal: %v", err)
	}
}

// fatalRecorder is a testing.TB whose Fatal records the message and ends the
// goroutine, as the real one does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

func TestStartWithoutRedisServerSaysHowToInstallIt(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(rec)
	}()
	<-done
	const want = "redis-server not found; the test command installs it (apt-get install -y redis-server)"
	if rec.msg != want {
		t.Fatalf("Fatal message = %q, want %q", rec.msg, want)
	}
}

package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
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

// Follow moves new connections to another server and leaves an open one
// where it was: each answers with its own server's port.
func TestLinkFollowMovesNewConnectionsOnly(t *testing.T) {
	a, b := Start(t), Start(t)
	l := a.Link(t)
	addr := strings.TrimSuffix(strings.TrimPrefix(l.URL(), "redis://"), "/0")
	open, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	rd := bufio.NewReader(open)
	if got := tcpPort(t, open, rd); got != strconv.Itoa(a.port) { // relayed: the link has dialed a
		t.Fatalf("the connection reaches port %s, want %d", got, a.port)
	}
	l.Follow(b)
	if got := tcpPort(t, open, rd); got != strconv.Itoa(a.port) {
		t.Fatalf("the connection opened before Follow reaches port %s, want %d", got, a.port)
	}
	fresh, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if got := tcpPort(t, fresh, bufio.NewReader(fresh)); got != strconv.Itoa(b.port) {
		t.Fatalf("a connection opened after Follow reaches port %s, want %d", got, b.port)
	}
}

// tcpPort asks the server at the end of c for its port (INFO server).
func tcpPort(t *testing.T, c net.Conn, rd *bufio.Reader) string {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("INFO server\r\n")); err != nil {
		t.Fatal(err)
	}
	head, err := rd.ReadString('\n') // $<length>
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if err != nil {
		t.Fatalf("INFO answered %q", head)
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(rd, body); err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "tcp_port:"); ok {
			return v
		}
	}
	t.Fatalf("INFO server has no tcp_port: %q", body)
	return ""
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

package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the master name a Sentinels set monitors.
const SentinelMaster = "mymaster"

// Sentinels is a primary with one replica, watched by three real
// redis-sentinel processes (quorum 2).
type Sentinels struct {
	Primary, Replica *Server
	procs            []*exec.Cmd
	ports            []int
	frozen           []bool
}

// StartSentinels starts a primary, its replica and three sentinels, waits
// until every sentinel knows the replica and the other sentinels, and stops
// them all at test cleanup.
func StartSentinels(tb testing.TB) *Sentinels {
	tb.Helper()
	bin, err := exec.LookPath("redis-sentinel")
	if err != nil {
		tb.Fatal("redis-sentinel not found; the test command installs it (apt-get install -y redis-sentinel)")
	}
	dir := tb.TempDir()
	s := &Sentinels{}
	tb.Cleanup(s.stop)
	if s.Primary, err = launch(tb, dir, "--repl-diskless-sync-delay", "0"); err != nil {
		tb.Fatal(err)
	}
	if s.Replica, err = launch(tb, dir, "--repl-diskless-sync-delay", "0", "--replicaof", "127.0.0.1", strconv.Itoa(s.Primary.port)); err != nil {
		tb.Fatal(err)
	}
	for i := range 3 {
		port, err := freePort()
		if err != nil {
			tb.Fatal(err)
		}
		conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", i))
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\nsentinel resolve-hostnames no\n"+
			"sentinel monitor %s 127.0.0.1 %d 2\nsentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 5000\n",
			port, dir, filepath.Join(dir, fmt.Sprintf("sentinel-%d.log", i)), SentinelMaster, s.Primary.port, SentinelMaster, SentinelMaster)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			tb.Fatal(err)
		}
		cmd := exec.Command(bin, conf)
		if err := cmd.Start(); err != nil {
			tb.Fatalf("redistest: start redis-sentinel: %v", err)
		}
		s.procs, s.ports, s.frozen = append(s.procs, cmd), append(s.ports, port), append(s.frozen, false)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	for _, p := range s.ports {
		c := redis.NewSentinelClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(p), DisableIdentity: true})
		for {
			reps, err1 := c.Replicas(ctx, SentinelMaster).Result()
			sens, err2 := c.Sentinels(ctx, SentinelMaster).Result()
			if err1 == nil && err2 == nil && len(reps) == 1 && len(sens) == 2 && !strings.Contains(fmt.Sprint(reps[0]), "s_down") {
				break
			}
			if ctx.Err() != nil {
				c.Close()
				tb.Fatalf("redistest: sentinel on %d did not learn the replica and the other sentinels: %v %v %v %v", p, reps, sens, err1, err2)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
	return s
}

// URL names the sentinels as go-redis's ParseFailoverURL reads them.
func (s *Sentinels) URL() string {
	return s.URLOf(0, 1, 2)
}

// URLOf is URL naming only the sentinels numbered which (0, 1, 2).
func (s *Sentinels) URLOf(which ...int) string {
	u := fmt.Sprintf("redis://127.0.0.1:%d/0?master_name=%s", s.ports[which[0]], SentinelMaster)
	for _, i := range which[1:] {
		u += fmt.Sprintf("&addr=127.0.0.1:%d", s.ports[i])
	}
	return u
}

// Freeze stops sentinel i (SIGSTOP): it answers nothing, and learns and
// tells nothing of a failover, until Thaw. Failover does not wait for it.
func (s *Sentinels) Freeze(tb testing.TB, i int) {
	tb.Helper()
	if err := s.procs[i].Process.Signal(syscall.SIGSTOP); err != nil {
		tb.Fatalf("redistest: freeze sentinel %d: %v", i, err)
	}
	s.frozen[i] = true
}

// Thaw resumes sentinel i (SIGCONT).
func (s *Sentinels) Thaw(tb testing.TB, i int) {
	tb.Helper()
	if err := s.procs[i].Process.Signal(syscall.SIGCONT); err != nil {
		tb.Fatalf("redistest: thaw sentinel %d: %v", i, err)
	}
	s.frozen[i] = false
}

// Client is a go-redis client on the primary the sentinels name, before
// and after a failover, for looking behind the code under test; closed at
// test cleanup.
func (s *Sentinels) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	opt, err := redis.ParseFailoverURL(s.URL())
	if err != nil {
		tb.Fatal(err)
	}
	opt.DisableIdentity = true
	rc := redis.NewFailoverClient(opt)
	tb.Cleanup(func() { rc.Close() })
	return rc
}

// Failover asks a sentinel to fail the primary over (SENTINEL FAILOVER) and
// waits until every sentinel names the replica as the master (every one
// not frozen).
func (s *Sentinels) Failover(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	asked := slices.Index(s.frozen, false)
	c := redis.NewSentinelClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(s.ports[asked]), DisableIdentity: true})
	defer c.Close()
	if err := c.Failover(ctx, SentinelMaster).Err(); err != nil {
		tb.Fatalf("redistest: SENTINEL FAILOVER: %v", err)
	}
	for i, p := range s.ports {
		if s.frozen[i] {
			continue
		}
		sc := redis.NewSentinelClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(p), DisableIdentity: true})
		for {
			addr, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
			if err == nil && len(addr) == 2 && addr[1] == strconv.Itoa(s.Replica.port) {
				break
			}
			if ctx.Err() != nil {
				sc.Close()
				tb.Fatalf("redistest: sentinel on %d still names %v as master", p, addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
		sc.Close()
	}
	s.Primary, s.Replica = s.Replica, s.Primary
}

func (s *Sentinels) stop() {
	for _, p := range s.procs {
		_ = p.Process.Signal(syscall.SIGCONT)
		_ = p.Process.Kill()
		_ = p.Wait()
	}
	if s.Primary != nil {
		s.Primary.Stop()
	}
	if s.Replica != nil {
		s.Replica.Stop()
	}
}

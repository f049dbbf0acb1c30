package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a real Redis Cluster made of redis-server processes
// (--cluster-enabled yes) joined by redis-cli --cluster create: masters
// masters with replicas replicas each, on free loopback ports.
type Cluster struct {
	Nodes    []*Server
	dir      string
	replicas int // in all
}

// clusterTimeout bounds the cluster's creation and each wait on its state.
const clusterTimeout = 30 * time.Second

// StartCluster starts a cluster of masters masters with replicas replicas
// each, waits until every node reports cluster_state:ok and every replica
// is in sync, and stops it at test cleanup.
func StartCluster(tb testing.TB, masters, replicas int) *Cluster {
	tb.Helper()
	c, err := startCluster(tb, tb.TempDir(), masters, replicas)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Stop)
	return c
}

var shared struct {
	mu  sync.Mutex
	c   *Cluster
	err error
}

// SharedCluster returns the package's one cluster (three masters, one
// replica each), starting it on first use, with every master flushed: tests
// of a package share it one after another, and the package's TestMain
// stops it with StopShared. A test may fail over or reshard it; it stays a
// working cluster of the same nodes.
func SharedCluster(tb testing.TB) *Cluster {
	tb.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.c == nil && shared.err == nil {
		dir, err := os.MkdirTemp("", "redistest-cluster-")
		if err == nil {
			shared.c, err = startCluster(nil, dir, 3, 1)
		}
		shared.err = err
	}
	if shared.err != nil {
		tb.Fatal(shared.err)
	}
	shared.c.Flush(tb)
	return shared.c
}

// StopShared stops the cluster SharedCluster started, if any.
func StopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.c != nil {
		shared.c.Stop()
		os.RemoveAll(shared.c.dir)
		shared.c = nil
	}
}

func startCluster(tb testing.TB, dir string, masters, replicas int) (*Cluster, error) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("redis-cli not found; the test command installs it with redis-server")
	}
	c := &Cluster{dir: dir, replicas: masters * replicas}
	for range masters * (1 + replicas) {
		s, err := launch(tb, dir, "--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
			"--cluster-require-full-coverage", "no", "--cluster-allow-replica-migration", "no",
			"--repl-diskless-sync-delay", "0")
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	for _, s := range c.Nodes {
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("redistest: redis-cli --cluster create: %v: %s", err, out)
	}
	if err := c.waitHealthy(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// URL is the cluster as go-redis's ParseClusterURL reads it: the first node,
// and every other one as addr=.
func (c *Cluster) URL() string {
	var b strings.Builder
	b.WriteString("redis://" + c.Nodes[0].Addr())
	for i, s := range c.Nodes[1:] {
		if i == 0 {
			b.WriteString("?")
		} else {
			b.WriteString("&")
		}
		b.WriteString("addr=" + s.Addr())
	}
	return b.String()
}

// Client is a go-redis cluster client for looking behind the code under
// test, closed at test cleanup.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	opt, err := redis.ParseClusterURL(c.URL())
	if err != nil {
		tb.Fatal(err)
	}
	opt.DisableIdentity = true
	rc := redis.NewClusterClient(opt)
	tb.Cleanup(func() { rc.Close() })
	return rc
}

// Node is a plain client on one node, closed at test cleanup.
func (c *Cluster) Node(tb testing.TB, s *Server) *redis.Client {
	tb.Helper()
	rc := redis.NewClient(&redis.Options{Addr: s.Addr(), DisableIdentity: true})
	tb.Cleanup(func() { rc.Close() })
	return rc
}

// Stop kills every node.
func (c *Cluster) Stop() {
	for _, s := range c.Nodes {
		s.Stop()
	}
}

// Flush empties every master (their replicas follow) and waits until the
// cluster is healthy.
func (c *Cluster) Flush(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := c.waitHealthy(ctx); err != nil {
		tb.Fatal(err)
	}
	for _, s := range c.Nodes {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr(), DisableIdentity: true})
		role, err := rc.Do(ctx, "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "master" {
			err = rc.FlushAll(ctx).Err()
		}
		rc.Close()
		if err != nil {
			tb.Fatalf("redistest: flush %s: %v", s.Addr(), err)
		}
	}
}

// MasterOf returns the node serving slot as master and one of its
// replicas (nil if none), as the cluster reports it now.
func (c *Cluster) MasterOf(tb testing.TB, slot int) (master, replica *Server) {
	tb.Helper()
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: c.Nodes[0].Addr(), DisableIdentity: true})
	defer rc.Close()
	slots, err := rc.ClusterSlots(ctx).Result()
	if err != nil {
		tb.Fatalf("redistest: CLUSTER SLOTS: %v", err)
	}
	for _, r := range slots {
		if slot < int(r.Start) || slot > int(r.End) {
			continue
		}
		master = c.byAddr(r.Nodes[0].Addr)
		// The master's own ROLE lists its replicas, without waiting for
		// gossip to tell node 0.
		mc := redis.NewClient(&redis.Options{Addr: master.Addr(), DisableIdentity: true})
		role, err := mc.Do(ctx, "ROLE").Slice()
		mc.Close()
		if err == nil && len(role) == 3 {
			if reps, ok := role[2].([]any); ok && len(reps) > 0 {
				if rep, ok := reps[0].([]any); ok && len(rep) >= 2 {
					replica = c.byAddr(fmt.Sprint(rep[0]) + ":" + fmt.Sprint(rep[1]))
				}
			}
		}
		return master, replica
	}
	tb.Fatalf("redistest: no node serves slot %d", slot)
	return nil, nil
}

// Masters returns the nodes that are masters now.
func (c *Cluster) Masters(tb testing.TB) []*Server {
	tb.Helper()
	var out []*Server
	for _, s := range c.Nodes {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr(), DisableIdentity: true})
		role, err := rc.Do(context.Background(), "ROLE").Slice()
		rc.Close()
		if err == nil && len(role) > 0 && role[0] == "master" {
			out = append(out, s)
		}
	}
	return out
}

// Failover makes replica take over from its master with CLUSTER FAILOVER
// (the graceful, manual failover: the master stops taking writes until the
// replica has them all), and waits until every node agrees.
func (c *Cluster) Failover(tb testing.TB, replica *Server) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr(), DisableIdentity: true})
	defer rc.Close()
	for {
		if err := rc.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
			tb.Fatalf("redistest: CLUSTER FAILOVER on %s: %v", replica.Addr(), err)
		}
		// A manual failover gives up after 5 s (CLUSTER_MF_TIMEOUT) if
		// the master did not answer; ask again then.
		asked := time.Now()
		for time.Since(asked) < 6*time.Second {
			role, err := rc.Do(ctx, "ROLE").Slice()
			if err == nil && len(role) > 0 && role[0] == "master" {
				if err := c.waitHealthy(ctx); err != nil {
					tb.Fatal(err)
				}
				return
			}
			select {
			case <-ctx.Done():
				tb.Fatalf("redistest: %s did not take over within %v", replica.Addr(), clusterTimeout)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

func (c *Cluster) byAddr(addr string) *Server {
	for _, s := range c.Nodes {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// waitHealthy waits until every running node says cluster_state:ok, knows
// every node, and every replica's link to its master is up.
func (c *Cluster) waitHealthy(ctx context.Context) error {
	var last string
	for {
		last = c.health(ctx)
		if last == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: cluster not healthy within %v: %s", clusterTimeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// health is "" when the cluster is healthy, else what is not.
func (c *Cluster) health(ctx context.Context) string {
	for _, s := range c.Nodes {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr(), DisableIdentity: true, MaxRetries: -1})
		info, err := rc.ClusterInfo(ctx).Result()
		repl, nodes := "", ""
		if err == nil {
			repl, err = rc.Info(ctx, "replication").Result()
		}
		if err == nil {
			nodes, err = rc.ClusterNodes(ctx).Result()
		}
		rc.Close()
		switch {
		case err != nil:
			return s.Addr() + ": " + err.Error()
		case !strings.Contains(info, "cluster_state:ok"):
			return s.Addr() + ": cluster_state not ok"
		case !strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(c.Nodes))+"\r\n"):
			return s.Addr() + ": does not know every node yet"
		case strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up"):
			return s.Addr() + ": replica link down"
		case strings.Count(nodes, " slave ")+strings.Count(nodes, ",slave ") != c.replicas:
			// A master ignores a manual failover asked by a replica it
			// does not know yet.
			return s.Addr() + ": does not know every replica yet"
		}
	}
	return ""
}

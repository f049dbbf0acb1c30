package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aguard/aguard/internal/redistest"
)

// TestServeDeliversTheWebhooksOfAKilledReplica runs a call through one
// aguard process while the webhook receiver is down, kills that process
// (-9) with its delivery queued, brings the receiver up and starts a second
// process on the same Redis: the second delivers the webhook, under the
// delivery id the first gave it, within 30 s.
func TestServeDeliversTheWebhooksOfAKilledReplica(t *testing.T) {
	srv := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr(), DisableIdentity: true})
	t.Cleanup(func() { rc.Close() })
	streams := func(ctx context.Context) ([]string, error) {
		return rc.Keys(ctx, "aguard:{wh:*}:deliveries").Result()
	}
	runs := func(ctx context.Context) ([]string, error) { return rc.Keys(ctx, "aguard:runs:*").Result() }
	checkKilledReplicasWebhooksDelivered(t, []string{"--redis", srv.URL()}, rc, streams, runs, []string{"/hook"})
}

// TestServeDeliversTheWebhooksOfAKilledReplicaOnARedisCluster is
// TestServeDeliversTheWebhooksOfAKilledReplica with --redis-mode cluster on
// a real Redis Cluster, and three webhook URLs whose delivery streams live
// on three different masters.
func TestServeDeliversTheWebhooksOfAKilledReplicaOnARedisCluster(t *testing.T) {
	c := redistest.SharedCluster(t)
	rc := c.Client(t)
	streams := func(ctx context.Context) ([]string, error) { return masterKeys(ctx, rc, "aguard:{wh:*}:deliveries") }
	// Paths whose streams hash to different masters (slots 0-5460,
	// 5461-10922 and 10923-16383 as redis-cli --cluster create splits
	// them), by the stream key README documents: the tag hashes the URL.
	// The test fails below if the keys it finds are not these.
	addr := reserveAddr(t)
	var paths, want []string
	taken := map[int]bool{}
	for i := 0; len(paths) < 3; i++ {
		path := fmt.Sprintf("/hook-%d", i)
		h := sha256.Sum256([]byte("http://" + addr + path))
		key := "aguard:{wh:" + hex.EncodeToString(h[:8]) + "}:deliveries"
		slot, err := rc.ClusterKeySlot(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if third := int(slot) * 3 / 16384; !taken[third] {
			taken[third] = true
			paths, want = append(paths, path), append(want, key)
		}
	}
	masters := map[string]bool{}
	for _, k := range want {
		slot, _ := rc.ClusterKeySlot(context.Background(), k).Result()
		m, _ := c.MasterOf(t, int(slot))
		masters[m.Addr()] = true
	}
	if len(masters) != 3 {
		t.Fatalf("the delivery streams' slots are served by %d masters, want 3", len(masters))
	}
	found := func(ctx context.Context) ([]string, error) {
		keys, err := streams(ctx)
		if err == nil && len(keys) == len(want) && !sameSet(keys, want) {
			t.Fatalf("delivery streams %v, want %v", keys, want)
		}
		return keys, err
	}
	runs := func(ctx context.Context) ([]string, error) { return masterKeys(ctx, rc, "aguard:{registry}:runs:*") }
	checkKilledReplicasWebhooksDelivered(t, []string{"--redis-mode", "cluster", "--redis", c.URL()}, rc, found, runs, paths, addr)
}

// masterKeys is KEYS pattern on every master of a cluster: KEYS on the
// cluster client asks one node, not necessarily the one holding the slot.
func masterKeys(ctx context.Context, rc *redis.ClusterClient, pattern string) ([]string, error) {
	var mu sync.Mutex
	var keys []string
	err := rc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		k, err := m.Keys(ctx, pattern).Result()
		mu.Lock()
		keys = append(keys, k...)
		mu.Unlock()
		return err
	})
	return keys, err
}

// sameSet reports whether a and b hold the same strings.
func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// reserveAddr is a loopback address free for now, for a receiver started
// later.
func reserveAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// checkKilledReplicasWebhooksDelivered runs a call through one aguard
// process (with redisArgs) while the webhook receiver, at addr (or a free
// address) with paths, is down; waits until every delivery stream that
// streams finds holds deliveries that process has claimed, and until the
// run is withdrawn from the registry hashes runs finds (the ledger is
// written behind the stream: killed before that, the process would leave
// a run another replica ends as lost, with webhooks of its own); kills it (-9);
// brings the receiver up and starts a second process: the second delivers
// every queued webhook, under the delivery id the first gave it, within
// 30 s.
func checkKilledReplicasWebhooksDelivered(t *testing.T, redisArgs []string, rc redis.Cmdable,
	streams, runs func(context.Context) ([]string, error), paths []string, addr ...string) {
	t.Helper()
	bin := buildAguard(t)
	agent := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range []string{
			`{"type":"RUN_STARTED","threadId":"t-hook","runId":"run-h1"}`,
			`{"type":"TOOL_CALL_START","toolCallId":"call-h1","toolCallName":"confirm_order"}`,
			`{"type":"TOOL_CALL_ARGS","toolCallId":"call-h1","delta":"{}"}`,
			`{"type":"TOOL_CALL_END","toolCallId":"call-h1"}`,
			`{"type":"RUN_FINISHED","threadId":"t-hook","runId":"run-h1"}`,
		} {
			io.WriteString(w, "data: "+e+"\n\n")
		}
	})}
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go agent.Serve(aln)
	t.Cleanup(func() { agent.Close() })

	// The receiver's port, free until the receiver starts.
	hookAddr := ""
	if len(addr) > 0 {
		hookAddr = addr[0]
	} else {
		hookAddr = reserveAddr(t)
	}
	args := append([]string{"--upstream", "http://" + aln.Addr().String(), "--admin-token", "tok"}, redisArgs...)
	for _, p := range paths {
		args = append(args, "--webhook", "http://"+hookAddr+p)
	}
	doomed := startAguard(t, bin, args...)

	input := `{"threadId":"t-hook","runId":"run-h1","protocolVersion":"1.0","messages":[],` +
		`"tools":[{"name":"confirm_order","description":"ask","parameters":{"type":"object"}}]}`
	resp, err := http.Post("http://"+doomed.listen+"/agent", "application/json", strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	ctx := context.Background()
	var queued []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		keys, _ := streams(ctx)
		queued = queued[:0]
		held := 0
		for _, k := range keys {
			pending, _ := rc.XPending(ctx, k, "aguard").Result()
			entries, _ := rc.XRange(ctx, k, "-", "+").Result()
			if pending != nil && pending.Count > 0 && len(entries) > 0 { // queued, and in the doomed replica's hands
				held++
			}
			for _, e := range entries {
				queued = append(queued, e.Values["i"].(string))
			}
		}
		live := int64(0)
		regs, _ := runs(ctx)
		for _, k := range regs {
			live += rc.HLen(ctx, k).Val()
		}
		if len(keys) == len(paths) && held == len(paths) && live == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d webhook URLs have deliveries queued in redis and claimed by the first replica; %d runs registered", held, len(paths), live)
		}
		time.Sleep(20 * time.Millisecond)
	}
	doomed.cmd.Process.Kill()
	doomed.cmd.Wait()

	var mu sync.Mutex
	got := map[string]bool{} // path and delivery id
	hl, err := net.Listen("tcp", hookAddr)
	if err != nil {
		t.Fatalf("listen on the receiver's port: %v", err)
	}
	receiver := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		got[r.URL.Path+" "+r.Header.Get("webhook-id")] = true
		mu.Unlock()
	})}
	go receiver.Serve(hl)
	t.Cleanup(func() { receiver.Close() })
	up := time.Now()
	startAguard(t, bin, args...)

	slices.Sort(queued)
	for {
		mu.Lock()
		var ids []string
		for k := range got {
			_, id, _ := strings.Cut(k, " ")
			ids = append(ids, id)
		}
		mu.Unlock()
		slices.Sort(ids)
		if len(ids) >= len(queued) {
			if !slices.Equal(ids, queued) {
				t.Fatalf("delivered ids %v, want the ids the killed replica queued %v", ids, queued)
			}
			break
		}
		if time.Since(up) > 30*time.Second {
			t.Fatalf("within 30 s of the receiver coming up, %d of the %d queued deliveries arrived", len(ids), len(queued))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d deliveries to %d URLs queued by the killed replica arrived %v after the receiver came up", len(queued), len(paths), time.Since(up).Round(time.Millisecond))
}

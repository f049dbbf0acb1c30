package state

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aguard/aguard/internal/rawio"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Redis deployments a Store can use (Options.RedisMode).
const (
	// ModeSingle is one Redis server (or a managed endpoint that always
	// names the primary): RedisURL is parsed by go-redis's ParseURL.
	ModeSingle = "single"
	// ModeSentinel is a primary found through Redis Sentinel: RedisURL names
	// the sentinels, parsed by go-redis's ParseFailoverURL
	// (redis://sentinel:26379/0?master_name=mymaster&addr=other:26379).
	ModeSentinel = "sentinel"
	// ModeCluster is a Redis Cluster: RedisURL names seed nodes, parsed by
	// go-redis's ParseClusterURL (redis://node1:6379?addr=node2:6379).
	ModeCluster = "cluster"
)

// ParseRedisMode checks a --redis-mode value ("" is ModeSingle).
func ParseRedisMode(mode string) (string, error) {
	switch mode {
	case "", ModeSingle:
		return ModeSingle, nil
	case ModeSentinel, ModeCluster:
		return mode, nil
	}
	return "", fmt.Errorf("state: redis mode %q is not single, sentinel or cluster", mode)
}

// redisClients are the clients of one Store: rdb for ordinary round trips,
// bulk for those whose size a request sets (see Store.client).
type redisClients struct {
	rdb, bulk redis.UniversalClient
	db        int
	cluster   bool
	// serverOpts configures a client of the one server at addr, as rdb's
	// (nil on a cluster): the Store marks a replaced primary with it
	// (fence.go).
	serverOpts func(addr string) *redis.Options
}

// redisOptions is a --redis URL parsed as its mode says: exactly one of
// single, failover and cluster is set.
type redisOptions struct {
	single   *redis.Options
	failover *redis.FailoverOptions
	cluster  *redis.ClusterOptions
}

// parseRedisURL parses u with the go-redis parser of mode. The URL is
// echoed in errors with its passwords redacted (redactRedisURL).
func parseRedisURL(mode, u string) (redisOptions, error) {
	mode, err := ParseRedisMode(mode)
	if err != nil {
		return redisOptions{}, err
	}
	pu, err := url.Parse(u)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return redisOptions{}, fmt.Errorf("state: malformed redis url: %w", err)
	}
	shown := redactRedisURL(pu)
	switch mode {
	case ModeSentinel:
		fo, err := redis.ParseFailoverURL(u)
		if err != nil {
			return redisOptions{}, fmt.Errorf("state: redis sentinel url %s: %w", shown, err)
		}
		if fo.MasterName == "" {
			return redisOptions{}, fmt.Errorf("state: redis sentinel url %s: no master_name", shown)
		}
		return redisOptions{failover: fo}, nil
	case ModeCluster:
		co, err := redis.ParseClusterURL(u)
		if err != nil {
			return redisOptions{}, fmt.Errorf("state: redis cluster url %s: %w", shown, err)
		}
		return redisOptions{cluster: co}, nil
	}
	ro, err := redis.ParseURL(u)
	if err != nil {
		return redisOptions{}, fmt.Errorf("state: redis url %s: %w", shown, err)
	}
	return redisOptions{single: ro}, nil
}

// redactRedisURL is u with the password of its user info, and the
// password go-redis reads from the query of a sentinel URL (the primary's),
// replaced by "xxxxx".
func redactRedisURL(u *url.URL) string {
	pairs := strings.Split(u.RawQuery, "&")
	for i, p := range pairs {
		k, _, _ := strings.Cut(p, "=")
		if k, err := url.QueryUnescape(k); err == nil && k == "password" {
			pairs[i] = "password=xxxxx"
		}
	}
	r := *u
	r.RawQuery = strings.Join(pairs, "&")
	return r.Redacted()
}

// CheckRedisURL reports whether mode's go-redis parser takes u as a Store
// would parse it (a sentinel URL with a master_name), without connecting.
func CheckRedisURL(mode, u string) error {
	_, err := parseRedisURL(mode, u)
	return err
}

// newRedisClients parses u as mode says, with go-redis's own parser, and
// applies aguard's defaults: short timeouts and a single retry, since the
// Store's queue does the retrying, and connections that read and write
// with raw system calls (rawDial). onConnect (nil: none) runs on every new
// connection to one Redis (single, sentinel), before it serves anything;
// conns (nil: none) is where both clients' connections to one Redis are
// kept track of (fence.go).
func newRedisClients(mode, u string, onConnect func(context.Context, *redis.Conn) error, conns *connSet) (*redisClients, error) {
	rc, err := configureRedisClients(mode, u, onConnect)
	if err != nil {
		return nil, err
	}
	for _, c := range []redis.UniversalClient{rc.rdb, rc.bulk} {
		if cc, ok := c.(*redis.ClusterClient); ok {
			// A cluster's connections are its node clients'.
			cc.OnNewNode(func(n *redis.Client) { n.AddHook(rawDial{}) })
		} else {
			c.AddHook(rawDial{conns: conns})
		}
	}
	return rc, nil
}

// rawDial is the go-redis hook that hands every plain TCP connection a
// client dials to rawio.Conn: the write-behind's round trips, a few a
// second per run, then read and write without entering Go's system-call
// state (see package rawio). TLS connections are left as they are. Every
// connection is tracked in conns, when set.
type rawDial struct{ conns *connSet }

func (d rawDial) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c = rawio.Conn(c)
		if d.conns != nil {
			c = d.conns.track(c)
		}
		return c, nil
	}
}

func (rawDial) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (rawDial) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// configureRedisClients is newRedisClients without the dial hook.
func configureRedisClients(mode, u string, onConnect func(context.Context, *redis.Conn) error) (*redisClients, error) {
	o, err := parseRedisURL(mode, u)
	if err != nil {
		return nil, err
	}
	switch {
	case o.failover != nil:
		fo := o.failover
		fo.DialTimeout, fo.ReadTimeout, fo.WriteTimeout = orIO(fo.DialTimeout), orIO(fo.ReadTimeout), orIO(fo.WriteTimeout)
		if fo.MaxRetries == 0 {
			fo.MaxRetries = 1
		}
		fo.DialerRetries = 1
		fo.DisableIdentity = true
		fo.OnConnect = onConnect
		bo := *fo
		bo.ReadTimeout, bo.WriteTimeout, bo.ContextTimeoutEnabled, bo.PoolSize = bulkIOTimeout, bulkIOTimeout, true, 4
		server := func(addr string) *redis.Options {
			return oneServer(&redis.Options{Addr: addr, Dialer: fo.Dialer, Protocol: fo.Protocol, Username: fo.Username, Password: fo.Password,
				CredentialsProvider: fo.CredentialsProvider, CredentialsProviderContext: fo.CredentialsProviderContext,
				StreamingCredentialsProvider: fo.StreamingCredentialsProvider, DB: fo.DB, TLSConfig: fo.TLSConfig})
		}
		return &redisClients{rdb: redis.NewFailoverClient(fo), bulk: redis.NewFailoverClient(&bo), db: fo.DB, serverOpts: server}, nil
	case o.cluster != nil:
		co := o.cluster
		co.DialTimeout, co.ReadTimeout, co.WriteTimeout = orIO(co.DialTimeout), orIO(co.ReadTimeout), orIO(co.WriteTimeout)
		if co.MaxRetries == 0 {
			co.MaxRetries = 1
		}
		co.DialerRetries = 1
		co.DisableIdentity = true
		co.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		bo := *co
		bo.ReadTimeout, bo.WriteTimeout, bo.ContextTimeoutEnabled, bo.PoolSize = bulkIOTimeout, bulkIOTimeout, true, 4
		return &redisClients{rdb: redis.NewClusterClient(co), bulk: redis.NewClusterClient(&bo), cluster: true}, nil
	}
	ro := o.single
	ro.DialTimeout, ro.ReadTimeout, ro.WriteTimeout = orIO(ro.DialTimeout), orIO(ro.ReadTimeout), orIO(ro.WriteTimeout)
	if ro.MaxRetries == 0 {
		ro.MaxRetries = 1
	}
	ro.DialerRetries = 1      // go-redis would otherwise spend 5 dials and 400 ms per command on a dead server
	ro.DisableIdentity = true // CLIENT SETINFO needs Redis 7.2
	ro.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	ro.OnConnect = onConnect
	bo := *ro
	bo.ReadTimeout, bo.WriteTimeout, bo.ContextTimeoutEnabled, bo.PoolSize = bulkIOTimeout, bulkIOTimeout, true, 4
	server := func(addr string) *redis.Options {
		so := *ro
		so.Addr = addr
		return oneServer(&so)
	}
	return &redisClients{rdb: redis.NewClient(ro), bulk: redis.NewClient(&bo), db: ro.DB, serverOpts: server}, nil
}

// oneServer sets o up for a few commands to one server within a deadline:
// one connection, no retries, no OnConnect, the deadline's timeouts.
func oneServer(o *redis.Options) *redis.Options {
	o.OnConnect = nil
	o.PoolSize, o.MinIdleConns, o.MaxRetries, o.DialerRetries = 1, 0, -1, 1
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.ContextTimeoutEnabled = markTimeout, markTimeout, markTimeout, true
	o.DisableIdentity = true
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return o
}

// orIO is d, or redisIOTimeout when the URL left it unset.
func orIO(d time.Duration) time.Duration {
	if d == 0 {
		return redisIOTimeout
	}
	return d
}

// eachMaster runs fn on the client of every master: on a cluster each
// master node (as go-redis last saw the cluster), otherwise the one client.
func (s *Store) eachMaster(ctx context.Context, fn func(ctx context.Context, c *redis.Client) error) error {
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	}
	// A failover client is a *redis.Client too; anything else is a bug.
	return fmt.Errorf("state: redis client %T has no masters to visit", s.rdb)
}

// masterInfo is what the loss detector reads of each master's INFO: run_id
// -> evicted_keys.
func (s *Store) masterInfo(ctx context.Context) (map[string]int64, error) {
	var mu sync.Mutex
	out := map[string]int64{}
	err := s.eachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "server", "stats").Result()
		if err != nil {
			return err
		}
		if si := parseInfo(info); si.runID != "" {
			mu.Lock()
			out[si.runID] = si.evicted
			mu.Unlock()
		}
		return nil
	})
	return out, err
}

// NewRedisClient returns a client on the Redis that u names in mode
// (ModeSingle, ModeSentinel, ModeCluster), parsed and configured as a
// Store's, for other parts of aguard that share that Redis (webhook
// deliveries). The caller closes it.
func NewRedisClient(mode, u string) (redis.UniversalClient, error) {
	rc, err := newRedisClients(mode, u, nil, nil)
	if err != nil {
		return nil, err
	}
	_ = rc.bulk.Close()
	return rc.rdb, nil
}

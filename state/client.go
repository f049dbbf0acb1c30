package state

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

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
}

// newRedisClients parses u as mode says, with go-redis's own parser, and
// applies aguard's defaults: short timeouts and a single retry, since the
// Store's queue does the retrying. The URL is echoed in errors with its
// password redacted.
func newRedisClients(mode, u string) (*redisClients, error) {
	mode, err := ParseRedisMode(mode)
	if err != nil {
		return nil, err
	}
	shown := "(unparsable)"
	if pu, err := url.Parse(u); err == nil {
		shown = pu.Redacted()
	} else {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return nil, fmt.Errorf("state: malformed redis url: %w", err)
	}
	switch mode {
	case ModeSentinel:
		fo, err := redis.ParseFailoverURL(u)
		if err != nil {
			return nil, fmt.Errorf("state: redis sentinel url %s: %w", shown, err)
		}
		if fo.MasterName == "" {
			return nil, fmt.Errorf("state: redis sentinel url %s: no master_name", shown)
		}
		fo.DialTimeout, fo.ReadTimeout, fo.WriteTimeout = orIO(fo.DialTimeout), orIO(fo.ReadTimeout), orIO(fo.WriteTimeout)
		if fo.MaxRetries == 0 {
			fo.MaxRetries = 1
		}
		fo.DialerRetries = 1
		fo.DisableIdentity = true
		bo := *fo
		bo.ReadTimeout, bo.WriteTimeout, bo.ContextTimeoutEnabled, bo.PoolSize = bulkIOTimeout, bulkIOTimeout, true, 4
		return &redisClients{rdb: redis.NewFailoverClient(fo), bulk: redis.NewFailoverClient(&bo), db: fo.DB}, nil
	case ModeCluster:
		co, err := redis.ParseClusterURL(u)
		if err != nil {
			return nil, fmt.Errorf("state: redis cluster url %s: %w", shown, err)
		}
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
	ro, err := redis.ParseURL(u)
	if err != nil {
		return nil, fmt.Errorf("state: redis url %s: %w", shown, err)
	}
	ro.DialTimeout, ro.ReadTimeout, ro.WriteTimeout = orIO(ro.DialTimeout), orIO(ro.ReadTimeout), orIO(ro.WriteTimeout)
	if ro.MaxRetries == 0 {
		ro.MaxRetries = 1
	}
	ro.DialerRetries = 1      // go-redis would otherwise spend 5 dials and 400 ms per command on a dead server
	ro.DisableIdentity = true // CLIENT SETINFO needs Redis 7.2
	ro.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	bo := *ro
	bo.ReadTimeout, bo.WriteTimeout, bo.ContextTimeoutEnabled, bo.PoolSize = bulkIOTimeout, bulkIOTimeout, true, 4
	return &redisClients{rdb: redis.NewClient(ro), bulk: redis.NewClient(&bo), db: ro.DB}, nil
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
		id, evicted := parseInfo(info)
		if id != "" {
			mu.Lock()
			out[id] = evicted
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
	rc, err := newRedisClients(mode, u)
	if err != nil {
		return nil, err
	}
	_ = rc.bulk.Close()
	return rc.rdb, nil
}

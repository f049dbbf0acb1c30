package state

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Errors a Store reports. Compare with errors.Is; the returned errors wrap
// them with what failed and for which record.
var (
	// ErrNotFound: there is no record with that Ref.
	ErrNotFound = errors.New("state: not found")
	// ErrQueued: the write is held in this process's queue because Redis is
	// unreachable (or did not acknowledge it in time), and will be written
	// when Redis answers again. The data is not lost, but other replicas do
	// not see it yet.
	ErrQueued = errors.New("state: queued for redis, not yet acknowledged")
	// ErrUnavailable: Redis is unreachable, or lost data, and this process
	// does not hold the requested data in memory: the Store cannot vouch
	// for it.
	ErrUnavailable = errors.New("state: redis unreachable")
	// ErrProtectedFull: the protected set (held approvals, pending calls and
	// the threads that list them) is full; a new hold is refused.
	ErrProtectedFull = errors.New("state: protected set full")
)

// errClosed is returned by every method after Close.
var errClosed = errors.New("state: store is closed")

const (
	defaultCacheSize      = 100_000
	defaultCacheBytes     = 32 << 20
	defaultProtectedBytes = 256 << 20
	defaultTTL            = 7 * 24 * time.Hour
	defaultQueueSize      = 100_000
	defaultQueueBytes     = 64 << 20
	defaultRedisTimeout   = 250 * time.Millisecond
	defaultWriteDelay     = 250 * time.Millisecond

	minBackoff        = 25 * time.Millisecond // first retry after Redis failed
	maxBackoff        = time.Second           // retry interval while Redis stays down
	drainBatch        = 256                   // queued items per round trip
	probeTimeout      = time.Second           // PING while down, and at Open
	drainTimeout      = 5 * time.Second       // one queued batch
	closeFlushTimeout = 2 * time.Second       // what Close spends on the queue
	maxCASAttempts    = 100                   // compare-and-set conflicts before giving up
	redisIOTimeout    = 2 * time.Second       // dial/read/write, unless the URL sets them
	bulkIOTimeout     = 2 * time.Minute       // the bulk client's ceiling
	bulkThreshold     = 512                   // records from which ReadThread and ApplyAnswers use the bulk client
	bulkPerRecord     = time.Millisecond

	// recentInvalidations is how many invalidated refs a Store remembers to
	// judge records it is reading at the same time. If more invalidations
	// than that arrive during one read, the record is not cached as fresh.
	recentInvalidations = 8192

	defaultHeartbeat = time.Second      // liveness, registry and loss checks
	defaultSweep     = time.Second      // deadlines, lost runs, protected set upkeep
	defaultLiveness  = 10 * time.Second // a replica silent this long is dead
	defaultLossHold  = 10 * time.Second // degraded at least this long after a loss
	defaultSlowHold  = 10 * time.Second // degraded at least this long after a slow answer
	recoveringTTL    = time.Minute      // bounds the recovering flag of a replica that died writing back
	reservationTTL   = time.Minute      // a hold reserved and never recorded is released after this
)

// Options configure a Store. The zero value is an in-process store with
// default sizes.
type Options struct {
	// RedisURL is redis://[user:password@]host:port[/db] (go-redis URL
	// syntax, query options included). Empty: records live in this process
	// only, and are lost on exit.
	RedisURL string
	// RedisMode says how RedisURL names Redis: ModeSingle (the default),
	// ModeSentinel or ModeCluster; see those constants for each URL's form.
	RedisMode string
	// CacheSize is the number of records the LRU holds, and separately the
	// number of threads (default 100_000). It also bounds the protected set:
	// held approvals, pending calls and the threads listing them are kept
	// apart from the LRU, never evicted, up to CacheSize entries.
	CacheSize int
	// CacheBytes bounds the estimated bytes of the records and threads the
	// LRU holds, together (default 32 MiB): past it the least recently
	// used are evicted, whatever their count.
	CacheBytes int64
	// ProtectedBytes bounds the protected set's estimated size (default
	// 256 MiB). When the set is full (CacheSize entries or ProtectedBytes),
	// new holds are refused (ReserveHold).
	ProtectedBytes int64
	// TTL is how long records, threads and index entries live in Redis after
	// their last write (default 7 days); a record with a deadline lives until
	// TTL after it.
	TTL time.Duration
	// QueueSize is how many writes (records and threads, one per key) may
	// wait for Redis (default 100_000), and QueueBytes their estimated
	// bytes (default 64 MiB). Beyond either the least recently written are
	// dropped and counted in aguard_state_queue_dropped_total.
	QueueSize  int
	QueueBytes int64
	// RedisTimeout is how long RecordSync's callers are meant to wait for
	// Redis (the proxy gives a RUN_FINISHED's write that long), and the
	// answer time past which Redis is reported slow: degraded (Ready),
	// logged, counted in aguard_state_redis_slow_total (default 250ms).
	RedisTimeout time.Duration
	// WriteDelay is how long a write made behind its caller may wait for
	// others before the writer sends them together: one round trip for
	// every record written meanwhile, one write for a record changed
	// several times (default 250ms; negative: none). A write a caller
	// waits for (RecordSync, a compare-and-set on a record still waiting,
	// Close) and a call held for approval, which reviewers on any replica
	// read from Redis, are sent at once, with everything waiting before
	// them.
	WriteDelay time.Duration
	// Logger receives outage, loss, recovery and drop reports (default:
	// discard).
	Logger *slog.Logger
	// Registerer, if set, receives the Store's metrics (see metrics.go).
	Registerer prometheus.Registerer
	// OnEnd, if set, is told about each call the Store ends by itself: an
	// approval whose deadline passed (TIMED_OUT), a call of a run lost with
	// its replica (CANCELLED). Exactly one replica reports each. It must
	// not block.
	OnEnd func(c *ToolCall)
	// Now is the clock deadlines are judged by (default time.Now).
	Now func() time.Time
	// Hooks are added to the Redis client, e.g. to count round trips.
	Hooks []redis.Hook

	// Intervals, for tests; zero takes the defaults above.
	heartbeat, sweep, liveness, lossHold, slowHold time.Duration
}

// Filter selects records for ListCalls; empty fields match everything.
type Filter struct {
	// ThreadID selects the calls of one thread.
	ThreadID string
	// Status selects calls in one status (aliases and numbers accepted).
	Status Status
	// RequestedBy selects the calls of runs one consumer started (the
	// record's requestedBy, compared exactly).
	RequestedBy string
}

func (f Filter) match(c *ToolCall) bool {
	return (f.ThreadID == "" || c.ThreadID == f.ThreadID) && (f.Status == "" || c.Status == f.Status) &&
		(f.RequestedBy == "" || c.RequestedBy == f.RequestedBy)
}

// Store is aguard's tool-call ledger and thread memory: an LRU and a
// protected set in front of an optional Redis. It is safe for concurrent
// use; Close it when done.
//
// Its parts, one file each: the public reads and writes (calls.go,
// threads.go, check.go), memory (cache.go, protect.go), the write queue and
// its writer (queue.go, writer.go), Redis commands and scripts (redis.go),
// invalidations from other replicas (subscriber.go), loss detection and
// write-back (loss.go), the registry of running runs (runs.go), and the
// sweeper that fires deadlines and recovers lost runs (sweeper.go).
type Store struct {
	opt Options
	log *slog.Logger
	met *metrics
	now func() time.Time

	// Memory; see cache.go.
	cacheMu sync.Mutex // orders version-checked updates of calls, recent and prot
	calls   *lru.Cache[Ref, *callEntry]
	threads *lru.Cache[string, *threadEntry]
	// lruBytes is the estimated size of what calls and threads hold,
	// bounded by Options.CacheBytes; guarded by cacheMu.
	lruBytes int64
	// recent holds, per record, the highest version announced by another
	// Store's invalidation (bounded; guarded by cacheMu). A record read
	// from Redis at a lower version than that is stale.
	recent  *lru.Cache[Ref, int64]
	prot    *protectedSet // guarded by cacheMu
	localMu sync.Mutex    // serialises read-modify-write on memory-only data

	// Redis; all nil in memory-only mode.
	rdb redis.UniversalClient
	// bulk is a second client for operations whose size a request sets
	// (ReadThread, ApplyAnswers over many calls): its commands are bounded
	// by a deadline that grows with their size (bulkDeadline), not by the
	// I/O timeouts of rdb, which a big but healthy round trip would exceed.
	bulk    redis.UniversalClient
	cluster bool     // rdb is a Redis Cluster's client
	conns   *connSet // rdb's and bulk's connections on one Redis (fence.go)
	// serverOpts configures a client of one server (nil on a cluster).
	serverOpts func(addr string) *redis.Options
	ks         keyspace // names of the keys apart from the threads'
	scripts    *scripts
	ps         *redis.PubSub
	origin     string // this Store's replica id
	channel    string

	mu       sync.Mutex // guards q, downErr, progress, dropping
	q        *queue
	downErr  error         // why Redis is considered unreachable; nil while up
	progress chan struct{} // closed and replaced when the queue drains or Redis goes up or down
	qlen     atomic.Int64  // q.len(), readable without mu
	up       atomic.Bool   // downErr == nil, readable without mu
	dropping bool          // a drop was logged since the queue was last empty

	subLive  atomic.Bool   // the invalidation subscription is established
	epoch    atomic.Uint64 // bumped whenever invalidations may have been missed
	invalSeq atomic.Uint64 // counts invalidations from other Stores

	loss  lossState   // see loss.go
	runs  runRegistry // see runs.go
	slow  slowState   // see slow.go
	acks  inflight    // writes whose acknowledgement is not yet in memory; see inflight.go
	tells tellQueue   // notices due to Notifiers; see tell.go

	kick      chan struct{} // wakes the writer
	rush      chan struct{} // ends the writer's wait for more writes (gather)
	check     chan struct{} // wakes the monitor (a loss suspected, Redis back)
	stop      chan struct{}
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup

	// catchUpQueued: markCaughtUp waits for queued writes; the writer
	// wakes the monitor as it acknowledges writes.
	catchUpQueued atomic.Bool
}

// Open returns a Store configured by opt. It starts the sweeper, and with a
// RedisURL it connects to Redis, subscribes to invalidations and starts the
// writer and the monitor. Open does not fail when Redis is down: the Store
// starts degraded and keeps retrying. It fails on a malformed URL, bad
// options or a metrics registration conflict.
func Open(ctx context.Context, opt Options) (*Store, error) {
	if opt.CacheSize <= 0 {
		opt.CacheSize = defaultCacheSize
	}
	if opt.ProtectedBytes <= 0 {
		opt.ProtectedBytes = defaultProtectedBytes
	}
	if opt.TTL <= 0 {
		opt.TTL = defaultTTL
	}
	if opt.TTL < time.Millisecond {
		return nil, fmt.Errorf("state: ttl %v is shorter than a millisecond", opt.TTL)
	}
	if opt.QueueSize <= 0 {
		opt.QueueSize = defaultQueueSize
	}
	if opt.CacheBytes <= 0 {
		opt.CacheBytes = defaultCacheBytes
	}
	if opt.QueueBytes <= 0 {
		opt.QueueBytes = defaultQueueBytes
	}
	if opt.RedisTimeout <= 0 {
		opt.RedisTimeout = defaultRedisTimeout
	}
	if opt.WriteDelay == 0 {
		opt.WriteDelay = defaultWriteDelay
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.heartbeat <= 0 {
		opt.heartbeat = defaultHeartbeat
	}
	if opt.sweep <= 0 {
		opt.sweep = defaultSweep
	}
	if opt.liveness <= 0 {
		opt.liveness = defaultLiveness
	}
	if opt.lossHold <= 0 {
		opt.lossHold = defaultLossHold
	}
	if opt.slowHold <= 0 {
		opt.slowHold = defaultSlowHold
	}
	// The gauge of approvals reads the store, and each new connection
	// reports to it (onConnect); it is built below, before either can
	// happen.
	var s *Store
	var rc *redisClients
	conns := &connSet{byAddr: opt.RedisMode == ModeSentinel}
	if opt.RedisURL != "" {
		var err error
		onConnect := func(ctx context.Context, cn *redis.Conn) error { return s.onConnect(ctx, cn) }
		if rc, err = newRedisClients(opt.RedisMode, opt.RedisURL, onConnect, conns); err != nil {
			return nil, err
		}
	} else if _, err := ParseRedisMode(opt.RedisMode); err != nil {
		return nil, err
	}
	met, err := newMetrics(opt.Registerer, func() float64 { return float64(s.approvalsAwaiting()) })
	if err != nil {
		if rc != nil {
			_ = errors.Join(rc.rdb.Close(), rc.bulk.Close())
		}
		return nil, err
	}
	recent, err := lru.New[Ref, int64](recentInvalidations)
	if err != nil {
		return nil, fmt.Errorf("state: invalidation memory: %w", err)
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	s = &Store{
		opt:      opt,
		log:      opt.Logger.With("component", "state"),
		met:      met,
		now:      opt.Now,
		recent:   recent,
		prot:     newProtectedSet(opt.CacheSize, opt.ProtectedBytes),
		origin:   hex.EncodeToString(id[:]),
		q:        newQueue(opt.QueueSize, opt.QueueBytes),
		progress: make(chan struct{}),
		kick:     make(chan struct{}, 1),
		rush:     make(chan struct{}, 1),
		check:    make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	// Evictions (and removals) happen under cacheMu: the callbacks keep
	// lruBytes (cache.go).
	if s.calls, err = lru.NewWithEvict(opt.CacheSize, func(_ Ref, e *callEntry) { s.lruBytes -= e.call.size() }); err != nil {
		return nil, fmt.Errorf("state: cache size %d: %w", opt.CacheSize, err)
	}
	if s.threads, err = lru.NewWithEvict(opt.CacheSize, func(_ string, e *threadEntry) { s.lruBytes -= e.t.size() }); err != nil {
		return nil, fmt.Errorf("state: cache size %d: %w", opt.CacheSize, err)
	}
	s.runs.init()
	s.slow.init()
	s.met.protectedMax.Set(float64(opt.CacheSize))
	if rc == nil {
		s.wg.Add(1)
		go s.runSweeper()
		return s, nil
	}
	s.channel = invalidateChannel + strconv.Itoa(rc.db)
	s.scripts = newScripts()
	s.rdb, s.bulk, s.cluster, s.conns, s.serverOpts = rc.rdb, rc.bulk, rc.cluster, conns, rc.serverOpts
	s.ks = newKeyspace(rc.cluster)
	s.rdb.AddHook(slowHook{s}) // the bulk client's round trips grow with their size: not timed
	for _, h := range opt.Hooks {
		s.rdb.AddHook(h)
		s.bulk.AddHook(h)
	}
	s.startTells()

	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	err = s.rdb.Ping(pctx).Err()
	cancel()
	if err != nil {
		s.setDown(err)
	} else {
		s.up.Store(true)
		s.met.redisUp.Set(1)
	}
	pctx, cancel = context.WithTimeout(ctx, probeTimeout)
	s.ps = s.rdb.Subscribe(pctx, s.channel) // on failure, the subscriber's Receive reconnects
	cancel()
	s.wg.Add(4)
	go s.runWriter()
	go s.runSubscriber()
	go s.runMonitor()
	go s.runSweeper()
	return s, nil
}

// Ready reports whether the Store can serve, which it always can: ok is
// true, and reason is "degraded: …" while Redis does not answer (reads then
// come from memory and writes are queued), while it answers slower than
// Options.RedisTimeout and for 10 s after it last did (slow.go), and for at
// least 10 s after Redis lost data and until this replica has written back
// what it holds; empty otherwise. The proxy's /readyz shows the reason with a 200.
func (s *Store) Ready() (ok bool, reason string) {
	s.mu.Lock()
	err := s.downErr
	s.mu.Unlock()
	var reasons []string
	if err != nil {
		reasons = append(reasons, "degraded: redis unreachable: "+err.Error())
	}
	if r := s.lossReason(); r != "" {
		reasons = append(reasons, "degraded: "+r)
	}
	if r := s.slowReason(); r != "" && err == nil {
		reasons = append(reasons, "degraded: "+r)
	}
	return true, strings.Join(reasons, "; ")
}

// Close stops the Store's goroutines, spends up to two seconds writing what
// is still queued to Redis (what remains is logged as lost), withdraws this
// replica from the registry, and closes the Redis connections. Methods
// called after Close fail. Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.stop)
		if s.rdb == nil {
			s.wg.Wait()
			return
		}
		_ = s.ps.Close() // unblocks the subscriber's Receive
		s.wg.Wait()
		s.flushOnClose()
		s.mu.Lock()
		told := s.releaseNoticesLocked() // writes Redis never acknowledged
		s.mu.Unlock()
		s.passOn(told...)
		s.tells.close()
		s.withdraw()
		if err := errors.Join(s.rdb.Close(), s.bulk.Close()); err != nil {
			s.closeErr = fmt.Errorf("state: close redis client: %w", err)
		}
	})
	return s.closeErr
}

// client returns the Redis client for a round trip on n records, and how
// long that round trip may take (0: the client's own I/O timeouts): rdb for
// a small one; for a large one the bulk client, with redisIOTimeout and
// bulkPerRecord more per record (60,000 records: a minute). The bound is
// there for a Redis that hangs; a healthy one answers well within it.
func (s *Store) client(n int) (redis.UniversalClient, time.Duration) {
	if n < bulkThreshold {
		return s.rdb, 0
	}
	return s.bulk, min(redisIOTimeout+time.Duration(n)*bulkPerRecord, bulkIOTimeout)
}

// within bounds ctx by d, when d is set; otherwise it returns ctx itself
// (a child that no one cancels early would cost each read of a thread an
// allocation in its parent, to no end).
func within(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// Now is the time by the Store's clock (Options.Now), by which deadlines
// are judged.
func (s *Store) Now() time.Time { return s.now() }

// sleep waits d, or until Close; it reports false on Close.
func (s *Store) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.stop:
		return false
	}
}

// prepare validates c and returns the normalized copy to store.
func (s *Store) prepare(c *ToolCall) (*ToolCall, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if c == nil {
		s.met.writes.WithLabelValues(writeInvalid).Inc()
		return nil, fmt.Errorf("state: %w: nil tool call", errInvalid)
	}
	n := c.clone()
	if err := n.normalize(time.Now()); err != nil {
		s.met.writes.WithLabelValues(writeInvalid).Inc()
		return nil, err
	}
	return n, nil
}

// prepareThread validates t and returns the normalized copy to store.
func (s *Store) prepareThread(t *Thread) (*Thread, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if t == nil {
		s.met.writes.WithLabelValues(writeInvalid).Inc()
		return nil, fmt.Errorf("state: %w: nil thread", errInvalid)
	}
	n := t.clone()
	if err := n.normalize(time.Now()); err != nil {
		s.met.writes.WithLabelValues(writeInvalid).Inc()
		return nil, err
	}
	return n, nil
}

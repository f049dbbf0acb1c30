package state

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Errors a Store reports. Compare with errors.Is; the returned errors wrap
// them with what failed and for which id.
var (
	// ErrNotFound: there is no record with that id.
	ErrNotFound = errors.New("state: not found")
	// ErrQueued: the write is held in this process's queue because Redis is
	// unreachable (or did not acknowledge it in time), and will be written
	// when Redis answers again. The data is not lost, but other replicas do
	// not see it yet.
	ErrQueued = errors.New("state: queued for redis, not yet acknowledged")
	// ErrUnavailable: Redis is unreachable and this process does not hold
	// the requested data in memory.
	ErrUnavailable = errors.New("state: redis unreachable")
)

// errClosed is returned by every method after Close.
var errClosed = errors.New("state: store is closed")

const (
	defaultCacheSize = 100_000
	defaultTTL       = 7 * 24 * time.Hour
	defaultQueueSize = 100_000

	minBackoff        = 25 * time.Millisecond // first retry after Redis failed
	maxBackoff        = time.Second           // retry interval while Redis stays down
	drainBatch        = 64                    // queued items per write
	probeTimeout      = time.Second           // PING while down, and at Open
	drainTimeout      = 5 * time.Second       // one queued batch
	closeFlushTimeout = 2 * time.Second       // what Close spends on the queue
	maxCASAttempts    = 100                   // UpdateCall conflicts before giving up
	redisIOTimeout    = 2 * time.Second       // dial/read/write, unless the URL sets them

	// recentInvalidations is how many invalidated ids a Store remembers to
	// judge records it is reading at the same time. If more invalidations
	// than that arrive during one read, the record is not cached as fresh.
	recentInvalidations = 8192
)

// Options configure a Store. The zero value is an in-process store with
// default sizes.
type Options struct {
	// RedisURL is redis://[user:password@]host:port[/db] (go-redis URL
	// syntax, query options included). Empty: records live in the
	// in-process LRU only, and are lost on eviction or exit.
	RedisURL string
	// CacheSize is the number of records the LRU holds, and separately the
	// number of threads (default 100_000).
	CacheSize int
	// TTL is how long records, threads and index entries live in Redis after
	// their last write (default 7 days).
	TTL time.Duration
	// QueueSize is how many writes (records and threads, one per id) are
	// kept while Redis is unreachable (default 100_000). Beyond it the least
	// recently written are dropped and counted in
	// aguard_state_queue_dropped_total.
	QueueSize int
	// Logger receives outage, recovery and drop reports (default: discard).
	Logger *slog.Logger
	// Registerer, if set, receives the Store's metrics:
	// aguard_state_redis_up, aguard_state_writes_total{result},
	// aguard_state_queue_depth, aguard_state_queue_dropped_total,
	// aguard_state_cache_hits_total and aguard_state_cache_misses_total.
	Registerer prometheus.Registerer
}

// Filter selects records for ListCalls; empty fields match everything.
type Filter struct {
	// ThreadID selects the calls of one thread.
	ThreadID string
	// Status selects calls in one status (aliases and numbers accepted).
	Status Status
}

func (f Filter) match(c *ToolCall) bool {
	return (f.ThreadID == "" || c.ThreadID == f.ThreadID) && (f.Status == "" || c.Status == f.Status)
}

// callEntry is a record in the LRU, with what is known of its freshness.
type callEntry struct {
	call  *ToolCall // never modified once cached
	ver   int64     // the version Redis gave it; 0 if not acknowledged by Redis
	epoch uint64    // s.epoch when cached
	fresh bool      // no invalidation was missed while it was read or written
}

// Store is aguard's tool-call ledger and thread memory: an LRU in front of
// an optional Redis. It is safe for concurrent use; Close it when done.
type Store struct {
	opt     Options
	log     *slog.Logger
	met     *metrics
	calls   *lru.Cache[string, *callEntry]
	threads *lru.Cache[string, *Thread]
	cacheMu sync.Mutex // orders version-checked updates of calls and recent
	// recent holds, per call id, the highest version announced by another
	// Store's invalidation (bounded; guarded by cacheMu). A record read from
	// Redis at a lower version than that is stale.
	recent  *lru.Cache[string, int64]
	localMu sync.Mutex // serialises read-modify-write on memory-only data

	// Redis; all nil in memory-only mode.
	rdb     *redis.Client
	script  *redis.Script
	ps      *redis.PubSub
	origin  string // this Store's id in invalidation messages
	channel string

	mu       sync.Mutex // guards q, downErr, progress
	q        *queue
	downErr  error         // why Redis is considered unreachable; nil while up
	progress chan struct{} // closed and replaced when the queue drains or Redis goes up or down
	qlen     atomic.Int64  // q.len(), readable without mu
	up       atomic.Bool   // downErr == nil, readable without mu
	dropping bool          // a drop was logged since the queue was last empty

	subLive  atomic.Bool   // the invalidation subscription is established
	epoch    atomic.Uint64 // bumped whenever invalidations may have been missed
	invalSeq atomic.Uint64 // counts invalidations from other Stores

	kick      chan struct{} // wakes the writer
	stop      chan struct{}
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup
}

// Open returns a Store configured by opt. With a RedisURL it connects to
// Redis, subscribes to invalidations and starts one writer goroutine. Open
// does not fail when Redis is down: the Store starts degraded and keeps
// retrying. It fails on a malformed URL, bad options or a metrics
// registration conflict.
func Open(ctx context.Context, opt Options) (*Store, error) {
	if opt.CacheSize <= 0 {
		opt.CacheSize = defaultCacheSize
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
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	var ro *redis.Options
	if opt.RedisURL != "" {
		var err error
		if ro, err = parseRedisURL(opt.RedisURL); err != nil {
			return nil, err
		}
	}
	met, err := newMetrics(opt.Registerer)
	if err != nil {
		return nil, err
	}
	calls, err := lru.New[string, *callEntry](opt.CacheSize)
	if err != nil {
		return nil, fmt.Errorf("state: cache size %d: %w", opt.CacheSize, err)
	}
	threads, err := lru.New[string, *Thread](opt.CacheSize)
	if err != nil {
		return nil, fmt.Errorf("state: cache size %d: %w", opt.CacheSize, err)
	}
	recent, err := lru.New[string, int64](recentInvalidations)
	if err != nil {
		return nil, fmt.Errorf("state: invalidation memory: %w", err)
	}
	s := &Store{
		opt:      opt,
		log:      opt.Logger.With("component", "state"),
		met:      met,
		calls:    calls,
		threads:  threads,
		recent:   recent,
		q:        newQueue(opt.QueueSize),
		progress: make(chan struct{}),
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	if ro == nil {
		return s, nil
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	s.origin = hex.EncodeToString(id[:])
	s.channel = invalidateChannel + strconv.Itoa(ro.DB)
	s.script = redis.NewScript(writeScriptSrc)
	s.rdb = redis.NewClient(ro)

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
	s.wg.Add(2)
	go s.runWriter()
	go s.runSubscriber()
	return s, nil
}

// parseRedisURL parses u with go-redis and applies aguard's defaults: short
// timeouts and a single retry, since the Store's queue does the retrying.
// The URL is echoed in errors with its password redacted.
func parseRedisURL(u string) (*redis.Options, error) {
	shown := "(unparsable)"
	if pu, err := url.Parse(u); err == nil {
		shown = pu.Redacted()
	} else {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("state: malformed redis url: %w", err)
	}
	ro, err := redis.ParseURL(u)
	if err != nil {
		return nil, fmt.Errorf("state: redis url %s: %w", shown, err)
	}
	if ro.DialTimeout == 0 {
		ro.DialTimeout = redisIOTimeout
	}
	if ro.ReadTimeout == 0 {
		ro.ReadTimeout = redisIOTimeout
	}
	if ro.WriteTimeout == 0 {
		ro.WriteTimeout = redisIOTimeout
	}
	if ro.MaxRetries == 0 {
		ro.MaxRetries = 1
	}
	ro.DialerRetries = 1      // go-redis would otherwise spend 5 dials and 400 ms per command on a dead server
	ro.DisableIdentity = true // CLIENT SETINFO needs Redis 7.2
	ro.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return ro, nil
}

// GetCall returns the record with id, or an error wrapping ErrNotFound.
//
// In memory only mode it reads the LRU. With Redis, a write still queued in
// this process is returned as is; a terminal record cached while the
// invalidation subscription was live is served from the LRU; anything else
// is read from Redis (one round trip), so that a replica always sees a
// live call as another replica last wrote it. While Redis is unreachable the
// last copy this process holds is returned, or an error wrapping
// ErrUnavailable.
func (s *Store) GetCall(ctx context.Context, id string) (*ToolCall, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if s.rdb == nil {
		if e, ok := s.calls.Get(id); ok {
			s.met.cacheHits.Inc()
			return e.call.clone(), nil
		}
		s.met.cacheMisses.Inc()
		return nil, fmt.Errorf("state: tool call %q: %w", id, ErrNotFound)
	}
	if it := s.queued(callKeyPrefix + id); it != nil {
		s.met.cacheHits.Inc()
		return it.call.clone(), nil
	}
	e, cached := s.calls.Get(id)
	up := s.up.Load()
	if cached && (!up || s.servable(e)) {
		s.met.cacheHits.Inc()
		return e.call.clone(), nil
	}
	s.met.cacheMisses.Inc()
	if up {
		seq, epoch := s.invalSeq.Load(), s.epoch.Load()
		c, ver, err := s.readCall(ctx, id)
		switch {
		case err == nil && c == nil:
			return nil, fmt.Errorf("state: tool call %q: %w", id, ErrNotFound)
		case err == nil:
			s.cacheCall(c, ver, seq, epoch)
			return c.clone(), nil
		case !s.unreachable(ctx, err):
			return nil, fmt.Errorf("state: get tool call %q: %w", id, err)
		}
		s.setDown(err)
		if cached {
			return e.call.clone(), nil
		}
		return nil, fmt.Errorf("state: get tool call %q: %w: %w", id, ErrUnavailable, err)
	}
	return nil, fmt.Errorf("state: get tool call %q: %w", id, s.downError())
}

// servable reports whether a cached record may be served without asking
// Redis while Redis is up: it is terminal, and no invalidation for it can
// have been missed since it was cached.
func (s *Store) servable(e *callEntry) bool {
	return e.fresh && e.call.Status.Terminal() && e.epoch == s.epoch.Load() && s.subLive.Load()
}

// PutCall stores a normalized copy of c (see ToolCall for the mapping of
// arguments and results; UpdatedAt is set to now, CreatedAt too when zero;
// endReason and executionDuration are dropped unless terminal). It writes
// the LRU, then Redis. If Redis fails the write is queued and PutCall still
// returns nil: the stream must not break. It returns an error only for
// invalid input (an empty id, an unknown status, a result that is not JSON)
// or after Close. c itself is not modified.
func (s *Store) PutCall(ctx context.Context, c *ToolCall) error {
	n, err := s.prepare(c)
	if err != nil {
		return err
	}
	if s.rdb == nil {
		s.localMu.Lock()
		s.cacheCall(n, 0, 0, 0)
		s.localMu.Unlock()
		s.met.writes.WithLabelValues(writeMemory).Inc()
		return nil
	}
	s.cacheCall(n, 0, 0, 0)
	if !s.direct() {
		s.enqueue([]*item{{call: n}}, nil)
		return nil
	}
	seq, epoch := s.invalSeq.Load(), s.epoch.Load()
	vers, err := s.writeRedis(ctx, []callWrite{{n, -1}}, nil)
	if err != nil {
		s.writeFailed(ctx, err)
		s.enqueue([]*item{{call: n}}, nil)
		return nil
	}
	s.met.writes.WithLabelValues(writeRedis).Inc()
	s.cacheCall(n, vers[0], seq, epoch)
	return nil
}

// PutCallsSync writes calls and t (either may be empty or nil) like PutCall
// and PutThread, but as one atomic Redis write, and waits for Redis to
// acknowledge it: aguard calls it before a RUN_FINISHED that tells a consumer
// which calls are pending leaves the proxy. It returns nil once Redis has
// the data. If Redis is unreachable, or does not acknowledge before ctx
// ends, the data is queued and the error wraps ErrQueued, so the caller can
// let RUN_FINISHED go out regardless and log that the promise is degraded.
// Other errors mean invalid input (nothing was written), a write dropped
// from a full queue, or Close.
func (s *Store) PutCallsSync(ctx context.Context, calls []*ToolCall, t *Thread) error {
	items := make([]*item, 0, len(calls)+1)
	writes := make([]callWrite, 0, len(calls))
	for _, c := range calls {
		n, err := s.prepare(c)
		if err != nil {
			return err
		}
		items = append(items, &item{call: n})
		writes = append(writes, callWrite{n, -1})
	}
	var threads []*Thread
	if t != nil {
		n, err := s.prepareThread(t)
		if err != nil {
			return err
		}
		items = append(items, &item{thread: n})
		threads = []*Thread{n}
	}
	if len(items) == 0 {
		return nil
	}
	if s.rdb == nil {
		s.localMu.Lock()
		for _, it := range items {
			s.cacheItem(it)
		}
		s.localMu.Unlock()
		s.met.writes.WithLabelValues(writeMemory).Add(float64(len(items)))
		return nil
	}
	for _, it := range items {
		s.cacheItem(it)
	}
	what := fmt.Sprintf("%d tool calls", len(calls))
	if t != nil {
		what += fmt.Sprintf(" and thread %q", t.ID)
	}
	if s.direct() {
		seq, epoch := s.invalSeq.Load(), s.epoch.Load()
		vers, err := s.writeRedis(ctx, writes, threads)
		if err == nil {
			s.met.writes.WithLabelValues(writeRedis).Add(float64(len(items)))
			for i, w := range writes {
				s.cacheCall(w.call, vers[i], seq, epoch)
			}
			return nil
		}
		s.writeFailed(ctx, err)
		s.enqueue(items, nil)
		return fmt.Errorf("state: sync write of %s: %w: %w", what, ErrQueued, err)
	}
	// Redis is down, or older writes are still draining: queue behind them,
	// and wait for the drain if Redis is up.
	w := &waiter{remaining: len(items), done: make(chan struct{})}
	s.enqueue(items, w)
	for {
		s.mu.Lock()
		progress, downErr := s.progress, s.downErr
		s.mu.Unlock()
		select {
		case <-w.done:
			if w.dropped {
				return fmt.Errorf("state: sync write of %s: dropped from the full redis queue", what)
			}
			return nil
		default:
		}
		if downErr != nil {
			return fmt.Errorf("state: sync write of %s: %w: %w", what, ErrQueued, downErr)
		}
		select {
		case <-w.done:
		case <-progress:
		case <-ctx.Done():
			return fmt.Errorf("state: sync write of %s: %w: %w", what, ErrQueued, ctx.Err())
		case <-s.stop:
			return fmt.Errorf("state: sync write of %s: %w: %w", what, ErrQueued, errClosed)
		}
	}
}

// UpdateCall atomically applies fn to the record with id and stores the
// result, which it returns. fn gets a private copy to modify; returning an
// error aborts the update, and UpdateCall returns that error wrapped. The
// result is normalized as in PutCall; fn must not change the id.
//
// With Redis the update is a compare-and-set on the record's version, so
// concurrent updates from any number of replicas each apply exactly once, in
// some order: on a conflict the record is read again and fn is called again
// (fn may therefore run more than once, and must depend only on its
// argument). If Redis is unreachable, fn is applied to this process's copy
// and the result is queued: UpdateCall then returns the record together with
// an error wrapping ErrQueued, because no other replica took part. If ctx
// ends while Redis is writing, whether the update was applied is unknown.
func (s *Store) UpdateCall(ctx context.Context, id string, fn func(c *ToolCall) error) (*ToolCall, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if s.rdb == nil {
		return s.updateLocal(id, fn)
	}
	for attempt := 1; ; attempt++ {
		if !s.up.Load() {
			return s.updateLocal(id, fn)
		}
		if s.queued(callKeyPrefix+id) != nil {
			// Let the drain write the queued value first: the
			// compare-and-set must start from it.
			if err := s.waitUnqueued(ctx, callKeyPrefix+id); err != nil {
				return nil, fmt.Errorf("state: update tool call %q: %w", id, err)
			}
			continue
		}
		seq, epoch := s.invalSeq.Load(), s.epoch.Load()
		cur, ver, err := s.readCall(ctx, id)
		if err != nil {
			if !s.unreachable(ctx, err) {
				return nil, fmt.Errorf("state: update tool call %q: %w", id, err)
			}
			s.setDown(err)
			continue
		}
		if cur == nil {
			return nil, fmt.Errorf("state: update tool call %q: %w", id, ErrNotFound)
		}
		next, err := s.apply(cur, fn)
		if err != nil {
			return nil, err
		}
		vers, err := s.writeRedis(ctx, []callWrite{{next, ver}}, nil)
		switch {
		case errors.Is(err, errConflict):
			s.met.writes.WithLabelValues(writeConflict).Inc()
			if attempt >= maxCASAttempts {
				return nil, fmt.Errorf("state: update tool call %q: gave up after %d conflicting writes: %w", id, attempt, err)
			}
			continue
		case err != nil && !s.unreachable(ctx, err):
			return nil, fmt.Errorf("state: update tool call %q: %w", id, err)
		case err != nil:
			// Whether Redis applied it is unknown; keep the result and
			// write it unconditionally once Redis is back.
			s.setDown(err)
			s.cacheCall(next, 0, 0, 0)
			s.enqueue([]*item{{call: next}}, nil)
			return next.clone(), fmt.Errorf("state: update tool call %q: %w: %w", id, ErrQueued, err)
		}
		s.met.writes.WithLabelValues(writeRedis).Inc()
		s.cacheCall(next, vers[0], seq, epoch)
		return next.clone(), nil
	}
}

// updateLocal is UpdateCall on this process's copy: in memory-only mode, or
// while Redis is unreachable (then the result is queued).
func (s *Store) updateLocal(id string, fn func(c *ToolCall) error) (*ToolCall, error) {
	s.localMu.Lock()
	defer s.localMu.Unlock()
	var cur *ToolCall
	if it := s.queued(callKeyPrefix + id); it != nil {
		cur = it.call
	} else if e, ok := s.calls.Peek(id); ok {
		cur = e.call
	}
	if cur == nil {
		if s.rdb == nil {
			return nil, fmt.Errorf("state: update tool call %q: %w", id, ErrNotFound)
		}
		return nil, fmt.Errorf("state: update tool call %q: %w", id, s.downError())
	}
	next, err := s.apply(cur, fn)
	if err != nil {
		return nil, err
	}
	s.cacheCall(next, 0, 0, 0)
	if s.rdb == nil {
		s.met.writes.WithLabelValues(writeMemory).Inc()
		return next.clone(), nil
	}
	s.enqueue([]*item{{call: next}}, nil)
	return next.clone(), fmt.Errorf("state: update tool call %q: %w: %w", id, ErrQueued, s.downError())
}

// apply runs fn on a copy of cur and normalizes the result.
func (s *Store) apply(cur *ToolCall, fn func(c *ToolCall) error) (*ToolCall, error) {
	next := cur.clone()
	if err := fn(next); err != nil {
		return nil, fmt.Errorf("state: update tool call %q: %w", cur.ID, err)
	}
	if next.ID != cur.ID {
		s.met.writes.WithLabelValues(writeInvalid).Inc()
		return nil, fmt.Errorf("state: update tool call %q: %w: the update changed the id to %q", cur.ID, errInvalid, next.ID)
	}
	if err := next.normalize(time.Now()); err != nil {
		s.met.writes.WithLabelValues(writeInvalid).Inc()
		return nil, err
	}
	return next, nil
}

// ListCalls returns the records that match f, oldest CreatedAt first (ties
// by id). With Redis it reads the thread index when f.ThreadID is set, else
// the status index (all of them for an empty filter), so it sees every
// replica's records; writes still queued here are included. In memory-only
// mode, or while Redis is unreachable, it scans this process's LRU.
func (s *Store) ListCalls(ctx context.Context, f Filter) ([]*ToolCall, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if f.Status != "" {
		st, err := ParseStatus(string(f.Status))
		if err != nil {
			return nil, fmt.Errorf("state: list tool calls: %w", err)
		}
		f.Status = st
	}
	var out []*ToolCall
	if s.rdb != nil && s.up.Load() {
		var err error
		if out, err = s.listRedis(ctx, f); err != nil {
			if !s.unreachable(ctx, err) {
				return nil, fmt.Errorf("state: list tool calls %+v: %w", f, err)
			}
			s.setDown(err)
			out = s.listLocal(f)
		}
	} else {
		out = s.listLocal(f)
	}
	if s.qlen.Load() > 0 {
		s.mu.Lock()
		queued := s.q.all()
		s.mu.Unlock()
		pos := make(map[string]int, len(out))
		for i, c := range out {
			pos[c.ID] = i
		}
		for _, it := range queued {
			if it.call == nil {
				continue
			}
			i, ok := pos[it.call.ID]
			switch {
			case ok && f.match(it.call):
				out[i] = it.call.clone()
			case ok:
				out[i] = nil
			case f.match(it.call):
				pos[it.call.ID] = len(out)
				out = append(out, it.call.clone())
			}
		}
		out = slices.DeleteFunc(out, func(c *ToolCall) bool { return c == nil })
	}
	slices.SortFunc(out, func(a, b *ToolCall) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

func (s *Store) listLocal(f Filter) []*ToolCall {
	var out []*ToolCall
	for _, e := range s.calls.Values() {
		if f.match(e.call) {
			out = append(out, e.call.clone())
		}
	}
	return out
}

// GetThread returns what is remembered of thread id; a thread never seen is
// an empty Thread{ID: id}. With Redis it always reads Redis (unless this
// process still has a write of the thread queued), so a replica sees the
// thread as the replica that served the last run left it. While Redis is
// unreachable it returns this process's copy, or an error wrapping
// ErrUnavailable.
func (s *Store) GetThread(ctx context.Context, id string) (*Thread, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if s.rdb == nil {
		if t, ok := s.threads.Get(id); ok {
			s.met.cacheHits.Inc()
			return t.clone(), nil
		}
		s.met.cacheMisses.Inc()
		return &Thread{ID: id}, nil
	}
	if it := s.queued(threadKeyPrefix + id); it != nil {
		s.met.cacheHits.Inc()
		return it.thread.clone(), nil
	}
	if s.up.Load() {
		s.met.cacheMisses.Inc()
		t, err := s.readThread(ctx, id)
		switch {
		case err == nil && t == nil:
			return &Thread{ID: id}, nil
		case err == nil:
			s.threads.Add(id, t)
			return t.clone(), nil
		case !s.unreachable(ctx, err):
			return nil, fmt.Errorf("state: get thread %q: %w", id, err)
		}
		s.setDown(err)
	}
	if t, ok := s.threads.Get(id); ok {
		s.met.cacheHits.Inc()
		return t.clone(), nil
	}
	return nil, fmt.Errorf("state: get thread %q: %w", id, s.downError())
}

// PutThread stores a copy of t (UpdatedAt set to now) in the LRU, then
// Redis; like PutCall, it queues the write if Redis fails and returns an
// error only for invalid input (an empty id) or after Close.
func (s *Store) PutThread(ctx context.Context, t *Thread) error {
	n, err := s.prepareThread(t)
	if err != nil {
		return err
	}
	s.threads.Add(n.ID, n)
	if s.rdb == nil {
		s.met.writes.WithLabelValues(writeMemory).Inc()
		return nil
	}
	if !s.direct() {
		s.enqueue([]*item{{thread: n}}, nil)
		return nil
	}
	if _, err := s.writeRedis(ctx, nil, []*Thread{n}); err != nil {
		s.writeFailed(ctx, err)
		s.enqueue([]*item{{thread: n}}, nil)
		return nil
	}
	s.met.writes.WithLabelValues(writeRedis).Inc()
	return nil
}

// Ready reports whether the Store can serve, which it always can: ok is
// true, and reason is "degraded: redis unreachable: <error>" while Redis
// does not answer (reads then come from memory and writes are queued), and
// empty otherwise. The proxy's /readyz shows the reason with a 200.
func (s *Store) Ready() (ok bool, reason string) {
	s.mu.Lock()
	err := s.downErr
	s.mu.Unlock()
	if err != nil {
		return true, "degraded: redis unreachable: " + err.Error()
	}
	return true, ""
}

// Close stops the Store's goroutines, spends up to two seconds writing what
// is still queued to Redis (what remains is logged as lost), and closes the
// Redis connections. Methods called after Close fail. Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.stop)
		if s.rdb == nil {
			return
		}
		_ = s.ps.Close() // unblocks the subscriber's Receive
		s.wg.Wait()
		s.flushOnClose()
		if err := s.rdb.Close(); err != nil {
			s.closeErr = fmt.Errorf("state: close redis client: %w", err)
		}
	})
	return s.closeErr
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

// cacheItem puts an item about to be written into the LRU as a local write.
func (s *Store) cacheItem(it *item) {
	if it.call != nil {
		s.cacheCall(it.call, 0, 0, 0)
	} else {
		s.threads.Add(it.thread.ID, it.thread)
	}
}

// cacheCall puts c in the LRU. ver is the version Redis acknowledged (0 for
// a local write, which always replaces the entry); a Redis version never
// replaces a newer one. seq and epoch are s.invalSeq and s.epoch read before
// the Redis operation that produced c. The entry is fresh (servable without
// asking Redis) only if no invalidation can have been missed meanwhile: the
// subscription is live and was not re-established, and no other Store has
// announced a version of c newer than ver.
func (s *Store) cacheCall(c *ToolCall, ver int64, seq, epoch uint64) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if e, ok := s.calls.Peek(c.ID); ok && ver > 0 && e.ver >= ver {
		return
	}
	fresh := ver > 0 && s.subLive.Load() && s.epoch.Load() == epoch &&
		s.invalSeq.Load()-seq < recentInvalidations
	if announced, ok := s.recent.Peek(c.ID); ok && announced > ver {
		fresh = false
	}
	s.calls.Add(c.ID, &callEntry{call: c, ver: ver, epoch: epoch, fresh: fresh})
}

// invalidate handles an invalidation published by another Store: a cached
// record older than the published version is no longer served without
// asking Redis (it stays cached for outages).
func (s *Store) invalidate(payload string) {
	origin, ver, id, ok := parseInvalidation(payload)
	if !ok || origin == s.origin {
		return
	}
	s.invalSeq.Add(1)
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if prev, ok := s.recent.Peek(id); !ok || prev < ver {
		s.recent.Add(id, ver)
	}
	if e, ok := s.calls.Peek(id); ok && e.fresh && e.ver < ver {
		s.calls.Add(id, &callEntry{call: e.call, ver: e.ver, epoch: e.epoch})
	}
}

// direct reports whether a write may go straight to Redis: Redis is up and
// nothing is queued ahead of it (per-key order must hold).
func (s *Store) direct() bool { return s.up.Load() && s.qlen.Load() == 0 }

// queued returns the queued item for key, or nil.
func (s *Store) queued(key string) *item {
	if s.qlen.Load() == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	it, _ := s.q.get(key)
	return it
}

// waitUnqueued waits until nothing is queued for key, Redis goes down, or
// ctx ends.
func (s *Store) waitUnqueued(ctx context.Context, key string) error {
	for {
		s.mu.Lock()
		_, queued := s.q.get(key)
		progress, down := s.progress, s.downErr != nil
		s.mu.Unlock()
		if !queued || down {
			return nil
		}
		select {
		case <-progress:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.stop:
			return errClosed
		}
	}
}

// enqueue queues items (attaching w to each, if set), drops what exceeds
// the bound, and wakes the writer.
func (s *Store) enqueue(items []*item, w *waiter) {
	var dropped []*item
	s.mu.Lock()
	for _, it := range items {
		if w != nil {
			it.waiters = append(it.waiters, w)
		}
		dropped = append(dropped, s.q.push(it)...)
	}
	for _, d := range dropped {
		for _, dw := range d.waiters {
			dw.finish(true)
		}
	}
	n := s.q.len()
	s.qlen.Store(int64(n))
	logDrop := len(dropped) > 0 && !s.dropping
	s.dropping = s.dropping || len(dropped) > 0
	s.mu.Unlock()

	s.met.writes.WithLabelValues(writeQueued).Add(float64(len(items)))
	s.met.queueDepth.Set(float64(n))
	if len(dropped) > 0 {
		s.met.dropped.Add(float64(len(dropped)))
	}
	if logDrop {
		s.log.Error("redis write queue is full; dropping the oldest writes until it drains",
			"queue_size", s.opt.QueueSize, "first_dropped", dropped[0].key())
	}
	s.wakeWriter()
}

func (s *Store) wakeWriter() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// unreachable reports whether err means Redis could not be used (so the
// Store should degrade), as opposed to the caller's ctx ending or Redis
// answering with an error about this particular command or data.
func (s *Store) unreachable(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, errConflict) || errors.Is(err, errCorrupt) {
		return false
	}
	return !permanent(err)
}

// permanent reports whether Redis rejected a command for a reason that a
// retry will not fix (a script or type error), unlike OOM, LOADING or
// READONLY, which pass.
func permanent(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "ERR ") || strings.HasPrefix(msg, "WRONGTYPE ")
}

// writeFailed records a failed direct write, whose data the caller queues.
func (s *Store) writeFailed(ctx context.Context, err error) {
	if s.unreachable(ctx, err) {
		s.setDown(err)
	}
}

// downError is the error to report while Redis is unreachable.
func (s *Store) downError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.downErr == nil {
		return ErrUnavailable
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, s.downErr)
}

// setDown marks Redis unreachable because of err.
func (s *Store) setDown(err error) {
	s.mu.Lock()
	wasUp := s.downErr == nil
	s.downErr = err
	s.up.Store(false)
	if wasUp {
		s.broadcastLocked()
	}
	s.mu.Unlock()
	if wasUp {
		s.met.redisUp.Set(0)
		s.log.Warn("redis unreachable; serving from memory and queuing writes", "err", err)
		s.wakeWriter()
	}
}

// setUp marks Redis reachable again.
func (s *Store) setUp() {
	s.mu.Lock()
	was := s.downErr
	s.downErr = nil
	s.up.Store(true)
	s.broadcastLocked()
	queued := s.q.len()
	s.mu.Unlock()
	// Invalidations published while this Store could not hear them are lost.
	s.epoch.Add(1)
	s.met.redisUp.Set(1)
	if was != nil {
		s.log.Info("redis reachable again; draining queued writes", "queued", queued)
	}
}

func (s *Store) broadcastLocked() {
	close(s.progress)
	s.progress = make(chan struct{})
}

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

// runWriter is the one goroutine that probes Redis while it is down and
// drains the queue, oldest first, in batches of one atomic write each.
func (s *Store) runWriter() {
	defer s.wg.Done()
	backoff := minBackoff
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		if !s.up.Load() {
			if !s.sleep(backoff) {
				return
			}
			backoff = min(2*backoff, maxBackoff)
			ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
			err := s.rdb.Ping(ctx).Err()
			cancel()
			if err != nil {
				s.setDown(err)
				continue
			}
			s.setUp()
		}
		s.mu.Lock()
		batch := s.q.peek(drainBatch)
		s.mu.Unlock()
		if len(batch) == 0 {
			select {
			case <-s.stop:
				return
			case <-s.kick:
			}
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
		err := s.drain(ctx, batch)
		cancel()
		if err != nil {
			s.setDown(err)
			continue
		}
		backoff = minBackoff
	}
}

// drain writes batch to Redis and removes it from the queue. A batch that
// Redis rejects for good (a script or type error) is retried item by item,
// and the items it still rejects are dropped and logged, so that one bad
// record cannot stall the queue. It returns an error when Redis is
// unreachable.
func (s *Store) drain(ctx context.Context, batch []*item) error {
	vers, err := s.writeItems(ctx, batch)
	if err == nil {
		s.ack(batch, vers, false)
		return nil
	}
	if !permanent(err) {
		return err
	}
	for _, it := range batch {
		one := []*item{it}
		vers, err := s.writeItems(ctx, one)
		switch {
		case err == nil:
			s.ack(one, vers, false)
		case permanent(err):
			s.log.Error("redis rejected a queued write; dropping it", "key", it.key(), "err", err)
			s.ack(one, nil, true)
		default:
			return err
		}
	}
	return nil
}

// writeItems writes queued items in one atomic write; vers are the new
// versions of the call items, in order.
func (s *Store) writeItems(ctx context.Context, batch []*item) ([]int64, error) {
	var calls []callWrite
	var threads []*Thread
	for _, it := range batch {
		if it.call != nil {
			calls = append(calls, callWrite{it.call, -1})
		} else {
			threads = append(threads, it.thread)
		}
	}
	return s.writeRedis(ctx, calls, threads)
}

// ack removes written (or, if dropped, rejected) items from the queue,
// releases their waiters, and records the versions Redis gave the calls in
// the LRU entries that still hold exactly those snapshots.
func (s *Store) ack(batch []*item, vers []int64, dropped bool) {
	var acked int
	s.mu.Lock()
	for _, it := range batch {
		if s.q.ack(it) {
			acked++
			for _, w := range it.waiters {
				w.finish(dropped)
			}
		}
	}
	n := s.q.len()
	s.qlen.Store(int64(n))
	if n == 0 {
		s.dropping = false
	}
	s.broadcastLocked()
	s.mu.Unlock()

	s.met.queueDepth.Set(float64(n))
	if dropped {
		s.met.dropped.Add(float64(acked))
		return
	}
	s.met.writes.WithLabelValues(writeDrained).Add(float64(len(batch)))
	i := 0
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	for _, it := range batch {
		if it.call == nil {
			continue
		}
		if e, ok := s.calls.Peek(it.call.ID); ok && e.call == it.call {
			s.calls.Add(it.call.ID, &callEntry{call: it.call, ver: vers[i], epoch: e.epoch})
		}
		i++
	}
}

// flushOnClose writes what is queued, for at most closeFlushTimeout.
func (s *Store) flushOnClose() {
	ctx, cancel := context.WithTimeout(context.Background(), closeFlushTimeout)
	defer cancel()
	for {
		s.mu.Lock()
		batch := s.q.peek(drainBatch)
		s.mu.Unlock()
		if len(batch) == 0 {
			return
		}
		if err := s.drain(ctx, batch); err != nil {
			s.mu.Lock()
			n := s.q.len()
			s.mu.Unlock()
			s.log.Error("closing with writes redis never acknowledged; they are lost", "count", n, "err", err)
			return
		}
	}
}

// runSubscriber receives invalidations from other Stores. Each
// (re)subscription starts a new epoch, since messages published while the
// subscription was down are lost.
func (s *Store) runSubscriber() {
	defer s.wg.Done()
	backoff := minBackoff
	for {
		msg, err := s.ps.Receive(context.Background())
		if err != nil {
			if s.closed.Load() {
				return
			}
			if s.subLive.Swap(false) {
				s.epoch.Add(1)
			}
			if !s.sleep(backoff) {
				return
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				s.epoch.Add(1)
				s.subLive.Store(true)
				backoff = minBackoff
			}
		case *redis.Message:
			s.invalidate(m.Payload)
		}
	}
}

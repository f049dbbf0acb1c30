package state

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The writer: writes made behind their caller (Record, RecordSync, and
// every write while Redis is unreachable) go to a bounded queue (queue.go),
// and one goroutine drains it in order of last write, a batch per round
// trip (one thread's items per atomic script call, registry changes around
// them). Once the queue was empty, the first write waits up to
// Options.WriteDelay for others (gather), unless something needs it sent
// (rush). While Redis is unreachable it PINGs with backoff instead, and
// drains once Redis answers.

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

// queuedAt returns the queued item for key (or nil), and the queue's
// sequence at that moment: a memory entry written with a higher sequence
// (callEntry.wseq) was queued after the look.
func (s *Store) queuedAt(key string) (*item, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, _ := s.q.get(key)
	return it, s.q.seq
}

// writeBehind queues items (attaching w to each, if set) and puts the
// records and threads among them in memory as local writes. Queuing comes
// first, so that a record in memory that Redis lacks is always queued or
// acknowledged: never taken for a loss while its write is in flight.
func (s *Store) writeBehind(items []*item, w *waiter) {
	s.cacheQueued(items, s.enqueue(items, w))
}

// waitUnqueued waits until nothing is queued for key, Redis goes down, or
// ctx ends. It has the writer send what is gathering.
func (s *Store) waitUnqueued(ctx context.Context, key string) error {
	s.rushWriter()
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

// knownVersions returns, for each record among items, the version of it
// that Redis held when this replica last knew it (knownVersionLocked); 0
// for the other items.
func (s *Store) knownVersions(items []*item) []int64 {
	out := make([]int64, len(items))
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	for i, it := range items {
		if it.call != nil {
			out[i] = s.knownVersionLocked(RefOf(it.call))
		}
	}
	return out
}

// enqueue queues items (attaching w to each, if set), drops what exceeds
// the bound, and wakes the writer; at once (rushWriter) when w is set or
// an item is urgent. It returns, for each record among items, the version
// its write was made from (item.base as queued); 0 for the other items.
func (s *Store) enqueue(items []*item, w *waiter) []int64 {
	var dropped []*item
	urgent := w != nil
	known := s.knownVersions(items)
	s.mu.Lock()
	for i, it := range items {
		if it.call != nil {
			// The version the write was made from: a queued write of the
			// key's, kept current by ack, or what memory knew.
			if prev, ok := s.q.get(it.key()); ok {
				known[i] = prev.base
			}
			it.base = known[i]
		}
		urgent = urgent || it.urgent()
		if w != nil {
			it.waiters = append(it.waiters, w)
		}
		dropped = append(dropped, s.q.push(it)...)
	}
	var told []notice
	for _, d := range dropped {
		for _, dw := range d.waiters {
			dw.finish(true)
		}
		told = append(told, d.notices...)
	}
	n, bytes := s.q.len(), s.q.bytes
	s.qlen.Store(int64(n))
	logDrop := len(dropped) > 0 && !s.dropping
	s.dropping = s.dropping || len(dropped) > 0
	s.mu.Unlock()
	s.passOn(told...)

	s.met.writes.WithLabelValues(writeQueued).Add(float64(len(items)))
	s.met.queueDepth.Set(float64(n))
	s.met.queueBytes.Set(float64(bytes))
	if len(dropped) > 0 {
		s.met.dropped.Add(float64(len(dropped)))
		for _, d := range dropped {
			if d.run != nil {
				s.markRunsDirty() // the next heartbeat rewrites the registry whole
				break
			}
		}
	}
	if logDrop {
		s.log.Error("redis write queue is full; dropping the oldest writes until it drains",
			"queue_size", s.opt.QueueSize, "queue_bytes", s.opt.QueueBytes, "first_dropped", dropped[0].key())
	}
	s.wakeWriter()
	if urgent {
		s.rushWriter()
	}
	return known
}

func (s *Store) wakeWriter() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// rushWriter ends the writer's wait for more writes (gather), or its next
// one if it is not waiting: what is queued goes out in the next round trip.
func (s *Store) rushWriter() {
	select {
	case s.rush <- struct{}{}:
	default:
	}
}

// gather waits, after the writer found a write in an empty queue, for
// Options.WriteDelay or until rushed, so that one round trip carries what
// is written meanwhile. It reports false if the Store is closing.
func (s *Store) gather() bool {
	if s.opt.WriteDelay <= 0 {
		return true
	}
	t := time.NewTimer(s.opt.WriteDelay)
	defer t.Stop()
	select {
	case <-s.stop:
		return false
	case <-t.C:
	case <-s.rush:
	}
	return true
}

// unreachable reports whether err means Redis could not be used (so the
// Store should degrade), as opposed to the caller's ctx ending or Redis
// answering with an error about this particular command or data.
func (s *Store) unreachable(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, errConflict) || errors.Is(err, errCorrupt) || errors.Is(err, ErrTransition) || errors.Is(err, errSlow) ||
		errors.Is(err, errNotCaughtUp) || errors.Is(err, errReplaced) {
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
	var told []notice
	if wasUp {
		s.broadcastLocked()
		told = s.releaseNoticesLocked()
	}
	s.mu.Unlock()
	s.passOn(told...)
	if wasUp {
		s.met.redisUp.Set(0)
		s.log.Warn("redis unreachable; serving from memory and queuing writes", "err", err)
		s.wakeWriter()
	}
}

// setUp marks Redis reachable again, and has the monitor check at once
// whether it lost data meanwhile.
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
	s.markAllStale()
	s.met.redisUp.Set(1)
	if was != nil {
		s.log.Info("redis reachable again; draining queued writes", "queued", queued)
	}
	s.wakeMonitor()
}

func (s *Store) broadcastLocked() {
	close(s.progress)
	s.progress = make(chan struct{})
}

// runWriter is the one goroutine that probes Redis while it is down and
// drains the queue, oldest first, in batches of one atomic write per thread.
func (s *Store) runWriter() {
	defer s.wg.Done()
	backoff := minBackoff
	// fresh: the queue was empty at the last look, so what is found in it
	// now waits for others (gather) before it goes.
	fresh := true
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
			fresh = false // what waited through the outage goes at once
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
			fresh = true
			continue
		}
		if fresh {
			fresh = false
			if !s.gather() {
				return
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
	defer s.acks.end(s.acks.begin())
	res, stale, err := s.writeItems(ctx, batch)
	if err == nil {
		s.settle(ctx, batch, res, stale)
		return nil
	}
	if !permanent(err) {
		return err
	}
	for _, it := range batch {
		one := []*item{it}
		res, stale, err := s.writeItems(ctx, one)
		switch {
		case err == nil:
			s.settle(ctx, one, res, stale)
		case permanent(err):
			s.log.Error("redis rejected a queued write; dropping it", "key", it.key(), "err", err)
			s.ack(one, nil, true)
		default:
			return err
		}
	}
	return nil
}

// writeItems writes queued items in one round trip (on a Redis Cluster, up
// to three: see runWritesAround): the runs registered first, then one
// atomic write per thread, then the runs withdrawn (so a run is registered
// before any of its records is written, and withdrawn after its last). A
// record is written only if Redis still holds the version it was made from
// (item.base). It returns the version Redis gave each record and thread, in
// order (0 for registry changes; notWritten for the items of a thread whose
// write found a record at another version, of which nothing was written),
// and those records.
func (s *Store) writeItems(ctx context.Context, batch []*item) ([]int64, []staleWrite, error) {
	var calls []callWrite
	var threads []*Thread
	var started []any
	var ended []string
	for _, it := range batch {
		switch {
		case it.call != nil:
			calls = append(calls, callWrite{it.call, it.base})
		case it.thread != nil:
			threads = append(threads, it.thread)
		case it.run.live:
			started = append(started, runMember(it.run.ref), "live")
		default:
			ended = append(ended, runMember(it.run.ref))
		}
	}
	key := s.ks.runsKey(s.origin)
	var before, after func(redis.Pipeliner)
	if len(started) > 0 {
		before = func(p redis.Pipeliner) {
			p.HSet(ctx, key, started...)
			p.PExpire(ctx, key, s.opt.TTL)
		}
	}
	if len(ended) > 0 {
		after = func(p redis.Pipeliner) { p.HDel(ctx, key, ended...) }
	}
	groups := groupWrites(calls, threads)
	res, err := s.runWritesAround(ctx, s.rdb, 0, "w", groups, before, after)
	if err != nil {
		return nil, nil, err
	}
	callVer := map[*ToolCall]int64{}
	threadVer := map[*Thread]int64{}
	var stale []staleWrite
	for i, g := range groups {
		if res[i].conflict != nil {
			for _, c := range g.calls {
				callVer[c.call] = notWritten
			}
			if g.t != nil {
				threadVer[g.t] = notWritten
			}
			stale = append(stale, staleWrite{it: itemOf(batch, g.calls[res[i].conflictAt].call), ver: res[i].conflictVer, origin: res[i].conflictOrigin})
			continue
		}
		for j, c := range g.calls {
			callVer[c.call] = res[i].vers[j]
		}
		if g.t != nil {
			threadVer[g.t] = res[i].tver
		}
	}
	out := make([]int64, len(batch))
	for i, it := range batch {
		switch {
		case it.call != nil:
			out[i] = callVer[it.call]
		case it.thread != nil:
			out[i] = threadVer[it.thread]
		}
	}
	return out, stale, nil
}

// itemOf returns the item of batch that writes c.
func itemOf(batch []*item, c *ToolCall) *item {
	for _, it := range batch {
		if it.call == c {
			return it
		}
	}
	return nil
}

// notWritten is writeItems' version for an item a version conflict kept
// from Redis.
const notWritten = -1

// staleWrite is a queued record whose write found Redis at another version
// than the one it was made from: ver, written by origin ("" if unknown).
type staleWrite struct {
	it     *item
	ver    int64
	origin string
}

// settle takes what writeItems wrote out of the queue (ack). A record that
// found Redis at a version its own Store wrote, or found it absent (a
// loss), is left queued, to be written from there at the next drain; one
// that found another Store's version is superseded. What else a conflict kept from Redis stays
// queued for the next drain.
func (s *Store) settle(ctx context.Context, batch []*item, vers []int64, stale []staleWrite) {
	if len(stale) == 0 {
		s.ack(batch, vers, false)
		return
	}
	written := make([]*item, 0, len(batch))
	wvers := make([]int64, 0, len(batch))
	for i, it := range batch {
		if vers[i] != notWritten {
			written = append(written, it)
			wvers = append(wvers, vers[i])
		}
	}
	if len(written) > 0 {
		s.ack(written, wvers, false)
	}
	for _, w := range stale {
		if w.origin == s.origin || w.ver == 0 {
			// This Store's own write got there first; or Redis holds no
			// record, which no replica deletes: Redis lost it, and this
			// write puts it back.
			s.mu.Lock()
			w.it.base = w.ver
			s.mu.Unlock()
			continue
		}
		s.supersede(ctx, w)
	}
}

// supersede gives up the queued write w: another Store changed its record
// after the version it was made from, so writing it would undo that change
// (as when this replica was cut off from Redis long enough to be taken for
// dead, and another ended its run's open calls). Redis keeps the other
// Store's version, and memory reads it; the write is counted, logged, and
// its RecordSync or PutCallsSync callers get an error.
func (s *Store) supersede(ctx context.Context, w staleWrite) {
	it := w.it
	s.mu.Lock()
	removed := s.q.ack(it)
	n, bytes := s.q.len(), s.q.bytes
	s.qlen.Store(int64(n))
	s.broadcastLocked()
	s.mu.Unlock()
	if !removed {
		return // a newer write of the record replaced it: that one goes next
	}
	for _, wt := range it.waiters {
		wt.supersede()
	}
	s.passOn(it.notices...)
	s.met.queueDepth.Set(float64(n))
	s.met.queueBytes.Set(float64(bytes))
	s.met.writes.WithLabelValues(writeSuperseded).Inc()
	s.log.Warn("a write queued while redis was unreachable was not applied: another replica changed the record meanwhile; memory takes redis's version",
		"thread", it.call.ThreadID, "toolCallId", it.call.ID, "status", string(it.call.Status), "from_version", it.base, "redis_version", w.ver, "written_by", w.origin)
	r := RefOf(it.call)
	seq, epoch := s.invalSeq.Load(), s.epoch.Load()
	sc, err := s.readCall(ctx, r)
	if err != nil || sc.call == nil {
		return // read again when next asked for: the entry is a stale local write
	}
	s.cacheRead(sc.call, sc.ver, seq, epoch)
}

// ack removes written (or, if dropped, rejected) items from the queue,
// releases their waiters, and records the versions Redis gave them in the
// memory entries that still hold exactly those snapshots.
func (s *Store) ack(batch []*item, vers []int64, dropped bool) {
	var acked int
	var told []notice
	s.mu.Lock()
	for i, it := range batch {
		if !s.q.ack(it) {
			if it.call != nil && !dropped && vers[i] > 0 {
				// A newer write of the record replaced it meanwhile: made
				// from this one, it starts from the version this one got.
				if next, ok := s.q.get(it.key()); ok {
					next.base = vers[i]
				}
			}
			continue
		}
		acked++
		for _, w := range it.waiters {
			w.finish(dropped)
		}
		told = append(told, it.notices...)
	}
	n, bytes := s.q.len(), s.q.bytes
	s.qlen.Store(int64(n))
	if n == 0 {
		s.dropping = false
	}
	s.broadcastLocked()
	s.mu.Unlock()
	s.passOn(told...)

	s.met.queueDepth.Set(float64(n))
	s.met.queueBytes.Set(float64(bytes))
	if s.catchUpQueued.CompareAndSwap(true, false) {
		s.wakeMonitor() // markCaughtUp waits for writes queued before it looked
	}
	if dropped {
		s.met.dropped.Add(float64(acked))
		return
	}
	s.met.writes.WithLabelValues(writeDrained).Add(float64(len(batch)))
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	for i, it := range batch {
		switch {
		case it.call != nil:
			if e, ok := s.peekCallLocked(RefOf(it.call)); ok && e.call == it.call {
				s.placeCallLocked(&callEntry{call: it.call, ver: vers[i], epoch: e.epoch, wseq: e.wseq}, true)
			}
		case it.thread != nil:
			if e, ok := s.peekThreadLocked(it.thread.ID); ok && e.t == it.thread {
				s.cacheThreadEntryLocked(&threadEntry{t: it.thread, ver: vers[i], wseq: e.wseq}, true)
			}
		}
	}
}

// peekThreadLocked returns the memory copy of thread id; cacheMu is held.
func (s *Store) peekThreadLocked(id string) (*threadEntry, bool) {
	if p, ok := s.prot.threads[id]; ok {
		return p.e, true
	}
	return s.threads.Peek(id)
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

package state

import "time"

// callEntry is a record in memory, with what is known of its freshness.
type callEntry struct {
	call  *ToolCall // never modified once cached
	ver   int64     // the version Redis gave it; 0 if not acknowledged by Redis
	epoch uint64    // s.epoch when cached
	fresh bool      // no invalidation was missed while it was read or written
	// wseq is the queue sequence of the write that produced call (0: read
	// from Redis, or written directly). A read that finds the record
	// absent from Redis, and began before that write was queued, saw the
	// write in flight, not a loss (see queuedAt).
	wseq uint64
	// base, for a local write (ver 0), is the version Redis held when this
	// replica last knew it (the previous entry's ver, or its base), -1 when
	// unknown: what the write was made from (item.base).
	base int64
}

// threadEntry is a thread in memory.
type threadEntry struct {
	t    *Thread // never modified once cached
	ver  int64   // the version Redis gave it; 0 if not acknowledged by Redis
	wseq uint64  // as callEntry.wseq
}

// Memory has two parts. The LRU holds records and threads of any kind, up to
// Options.CacheSize each and Options.CacheBytes together (estimated by
// ToolCall.size and Thread.size), and evicts the least recently used. The protected
// set (protect.go) holds, apart from the LRU, the records and threads that
// protect something (ToolCall.protects, Thread.protects): other threads'
// traffic cannot evict them. An entry lives in exactly one of the two, and
// moves when its record changes.

// peekCall returns the entry for r, protected or not, without touching the
// LRU's order. cacheMu is held.
func (s *Store) peekCallLocked(r Ref) (*callEntry, bool) {
	if p, ok := s.prot.calls[r]; ok && p.e != nil {
		return p.e, true
	}
	return s.calls.Peek(r)
}

// lookupCall returns the entry for r.
func (s *Store) lookupCall(r Ref) (*callEntry, bool) {
	s.cacheMu.Lock()
	if p, ok := s.prot.calls[r]; ok && p.e != nil {
		e := p.e // the writer replaces it under cacheMu
		s.cacheMu.Unlock()
		return e, true
	}
	s.cacheMu.Unlock()
	return s.calls.Get(r)
}

// lookupThread returns this process's copy of thread id.
func (s *Store) lookupThread(id string) (*threadEntry, bool) {
	s.cacheMu.Lock()
	if p, ok := s.prot.threads[id]; ok {
		e := p.e // the writer replaces it under cacheMu
		s.cacheMu.Unlock()
		return e, true
	}
	s.cacheMu.Unlock()
	return s.threads.Get(id)
}

// cacheCall puts c, written by this process, in memory. ver is the version
// Redis acknowledged (0 for a local write, which always replaces the
// entry); a Redis version never replaces a newer one. seq and epoch are
// s.invalSeq and s.epoch read before the Redis operation that produced c.
// The entry is fresh (servable without asking Redis) only if no
// invalidation can have been missed meanwhile: the subscription is live and
// was not re-established, and no other Store has announced a version of c
// newer than ver.
func (s *Store) cacheCall(c *ToolCall, ver int64, seq, epoch uint64) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	s.cacheCallLocked(c, ver, seq, epoch, true)
}

// cacheRead is cacheCall for a record read from Redis: it is protected only
// if this process already protects it (a newer copy of its own write). A
// replica protects what it wrote, not what it read, so that reading another
// replica's pending calls takes no room from its own holds.
func (s *Store) cacheRead(c *ToolCall, ver int64, seq, epoch uint64) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	s.cacheCallLocked(c, ver, seq, epoch, false)
}

func (s *Store) cacheCallLocked(c *ToolCall, ver int64, seq, epoch uint64, own bool) {
	r := RefOf(c)
	if e, ok := s.peekCallLocked(r); ok && ver > 0 && e.ver >= ver {
		return
	}
	fresh := ver > 0 && s.rdb != nil && s.subLive.Load() && s.epoch.Load() == epoch &&
		s.invalSeq.Load()-seq < recentInvalidations
	if announced, ok := s.recent.Peek(r); ok && announced > ver {
		fresh = false
	}
	e := &callEntry{call: c, ver: ver, epoch: epoch, fresh: fresh}
	if ver == 0 {
		e.base = s.knownVersionLocked(r)
	}
	s.placeCallLocked(e, own)
}

// knownVersionLocked returns the version of r that Redis held when this
// replica last knew it: its memory entry's, or the version the entry's local
// write was made from; -1 when memory has no entry (never read, or
// evicted). cacheMu is held.
func (s *Store) knownVersionLocked(r Ref) int64 {
	e, ok := s.peekCallLocked(r)
	switch {
	case !ok:
		return -1
	case e.ver > 0:
		return e.ver
	}
	return e.base
}

// cacheQueued puts items this process has just queued into memory, as
// local writes stamped with their queue sequence; a record's entry keeps
// the version its write was made from (bases, as enqueue returned them:
// nil without Redis, where no write is made from a version).
func (s *Store) cacheQueued(items []*item, bases []int64) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	epoch := s.epoch.Load()
	for i, it := range items {
		switch {
		case it.call != nil:
			e := &callEntry{call: it.call, epoch: epoch, wseq: it.seq}
			if bases != nil {
				e.base = bases[i]
			}
			s.placeCallLocked(e, true)
		case it.thread != nil:
			s.cacheThreadEntryLocked(&threadEntry{t: it.thread, wseq: it.seq}, true)
		}
	}
}

// lruAddCallLocked adds e to the LRU, keeping its byte count, and evicts
// what exceeds Options.CacheBytes. cacheMu is held.
func (s *Store) lruAddCallLocked(r Ref, e *callEntry) {
	if old, ok := s.calls.Peek(r); ok {
		s.lruBytes -= old.call.size() // replaced: the callback does not run
	}
	s.calls.Add(r, e)
	s.lruBytes += e.call.size()
	s.trimLocked()
}

func (s *Store) lruAddThreadLocked(e *threadEntry) {
	if old, ok := s.threads.Peek(e.t.ID); ok {
		s.lruBytes -= old.t.size()
	}
	s.threads.Add(e.t.ID, e)
	s.lruBytes += e.t.size()
	s.trimLocked()
}

// trimLocked evicts the least recently used records (then threads) while
// the LRU holds more than Options.CacheBytes. cacheMu is held.
func (s *Store) trimLocked() {
	for s.lruBytes > s.opt.CacheBytes {
		if _, _, ok := s.calls.RemoveOldest(); ok {
			continue
		}
		if _, _, ok := s.threads.RemoveOldest(); !ok {
			break
		}
	}
	s.met.cacheBytes.Set(float64(s.lruBytes))
}

// placeCallLocked stores e in the protected set, if its record protects
// something and this process wrote it (own) or already protects it, or else
// in the LRU; and removes it from the other. cacheMu is held.
func (s *Store) placeCallLocked(e *callEntry, own bool) {
	r := RefOf(e.call)
	_, protected := s.prot.calls[r]
	if e.call.protects() && (own || protected) && s.protectCallLocked(e, s.keepUntil(e.call)) {
		s.calls.Remove(r)
		return
	}
	s.unprotectCallLocked(r)
	s.lruAddCallLocked(r, e)
}

// cacheThread puts t, written by this process, in memory at Redis version
// ver (0: a local write). A Redis version never replaces a newer one.
func (s *Store) cacheThread(t *Thread, ver int64) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	s.cacheThreadLocked(t, ver, true)
}

// cacheThreadRead is cacheThread for a thread read from Redis (see
// cacheRead).
func (s *Store) cacheThreadRead(t *Thread, ver int64) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	s.cacheThreadLocked(t, ver, false)
}

func (s *Store) cacheThreadLocked(t *Thread, ver int64, own bool) {
	p, protected := s.prot.threads[t.ID]
	if protected && ver > 0 && p.e.ver >= ver {
		return
	}
	if e, ok := s.threads.Peek(t.ID); ok && ver > 0 && e.ver >= ver {
		return
	}
	s.cacheThreadEntryLocked(&threadEntry{t: t, ver: ver}, own)
}

// cacheThreadEntryLocked stores e in the protected set or the LRU, as
// placeCallLocked does for records.
func (s *Store) cacheThreadEntryLocked(e *threadEntry, own bool) {
	t := e.t
	_, protected := s.prot.threads[t.ID]
	if t.protects() && (own || protected) && s.protectThreadLocked(e, s.threadKeepUntil(t)) {
		s.threads.Remove(t.ID)
		return
	}
	s.unprotectThreadLocked(t.ID)
	s.lruAddThreadLocked(e)
}

// keepUntil is how long c must be remembered: TTL after its last write, or
// TTL after its latest deadline when that is later. Its Redis keys expire
// then, and a protected copy is dropped then.
func (s *Store) keepUntil(c *ToolCall) time.Time {
	until := s.now().Add(s.opt.TTL)
	if d := c.deadline(); !d.IsZero() && d.Add(s.opt.TTL).After(until) {
		until = d.Add(s.opt.TTL)
	}
	return until
}

// threadKeepUntil is keepUntil for a thread: it outlives the deadlines of the
// calls it lists that this process knows.
func (s *Store) threadKeepUntil(t *Thread) time.Time {
	until := s.now().Add(s.opt.TTL)
	for _, id := range t.PendingCalls {
		if p, ok := s.prot.calls[Ref{t.ID, id}]; ok && p.until.After(until) {
			until = p.until
		}
	}
	return until
}

// ttlOf is the Redis expiry of c's keys, counted from now.
func (s *Store) ttlOf(c *ToolCall) time.Duration {
	return max(time.Until(s.keepUntilWall(c)), s.opt.TTL)
}

// keepUntilWall is keepUntil on the wall clock (Redis expiries are in real
// time, whatever clock the deadlines are judged by).
func (s *Store) keepUntilWall(c *ToolCall) time.Time {
	until := time.Now().Add(s.opt.TTL)
	if d := c.deadline(); !d.IsZero() && d.Add(s.opt.TTL).After(until) {
		until = d.Add(s.opt.TTL)
	}
	return until
}

// threadTTL is the Redis expiry of a thread's keys: TTL, or longer to
// outlive the deadlines of the calls it lists that this process knows.
func (s *Store) threadTTL(t *Thread, with []*ToolCall) time.Duration {
	ttl := s.opt.TTL
	for _, c := range with {
		ttl = max(ttl, s.ttlOf(c))
	}
	s.cacheMu.Lock()
	for _, id := range t.PendingCalls {
		if p, ok := s.prot.calls[Ref{t.ID, id}]; ok && p.e != nil {
			ttl = max(ttl, time.Until(s.keepUntilWall(p.e.call)))
		}
	}
	s.cacheMu.Unlock()
	return ttl
}

// invalidate handles an invalidation message published by another Store: a
// cached record or thread older than the published version is no longer
// served without asking Redis (it stays cached for outages), and a protected
// one is read again by the sweeper.
func (s *Store) invalidate(payload string) {
	origin, invs := parseInvalidations(payload, s.origin)
	if origin == s.origin || len(invs) == 0 {
		return
	}
	s.invalSeq.Add(uint64(len(invs)))
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	for _, inv := range invs {
		s.invalidateLocked(inv)
	}
}

func (s *Store) invalidateLocked(inv invalidation) {
	if inv.thread != "" {
		if p, ok := s.prot.threads[inv.thread]; ok && p.e.ver < inv.ver {
			s.prot.staleThreads[inv.thread] = struct{}{}
		}
		return
	}
	r := inv.ref
	if prev, ok := s.recent.Peek(r); !ok || prev < inv.ver {
		s.recent.Add(r, inv.ver)
	}
	if p, ok := s.prot.calls[r]; ok && p.e != nil && p.e.ver < inv.ver {
		s.markStaleLocked(r)
		if p.e.fresh {
			p.e = &callEntry{call: p.e.call, ver: p.e.ver, epoch: p.e.epoch, wseq: p.e.wseq, base: p.e.base}
		}
		return
	}
	if e, ok := s.calls.Peek(r); ok && e.fresh && e.ver < inv.ver {
		s.lruAddCallLocked(r, &callEntry{call: e.call, ver: e.ver, epoch: e.epoch, wseq: e.wseq, base: e.base})
	}
}

// localCalls returns this process's records that match f.
func (s *Store) localCalls(f Filter) []*ToolCall {
	var out []*ToolCall
	s.cacheMu.Lock()
	for _, p := range s.prot.calls {
		if p.e != nil && f.match(p.e.call) {
			out = append(out, p.e.call.clone())
		}
	}
	s.cacheMu.Unlock()
	for _, e := range s.calls.Values() {
		if f.match(e.call) {
			out = append(out, e.call.clone())
		}
	}
	return out
}

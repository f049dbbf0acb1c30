package state

import (
	"fmt"
	"time"
)

// protectedSet holds the memory that protects something: records awaiting
// an approval or an answer, and threads with pending calls, approvals or
// interrupts. Unlike the LRU it never evicts: an entry leaves when its record
// no longer protects anything (it ended, or the thread's next run answered
// it), or when its Redis keys would have expired (keepUntil). It is what the
// write-back after a Redis data loss restores from, and, without Redis, the
// only copy.
//
// It is bounded by a count (Options.CacheSize entries, calls and threads
// together) and by estimated bytes (Options.ProtectedBytes). A new hold must
// reserve its place first (ReserveHold), which fails when the set is full,
// so that the policy's require_approval becomes a deny before the consumer
// is told anything. A pending call or thread that finds the set full stays
// in the LRU instead (evictable), and is counted and logged.
//
// Guarded by Store.cacheMu.
type protectedSet struct {
	maxCount int
	maxBytes int64
	bytes    int64
	calls    map[Ref]*protCall
	threads  map[string]*protThread
	// staleCalls and staleThreads are the entries another replica has
	// rewritten since this one cached them: the sweeper reads them again.
	staleCalls   map[Ref]struct{}
	staleThreads map[string]struct{}
	// scanned is when entries were last checked for expiry.
	scanned time.Time
	// overflowing is set while entries are turned away, so that only the
	// first of a series is logged.
	overflowing bool
}

// expiryScan is how often the protected set is checked for entries whose
// keys would have expired (the TTL is days) and for unused reservations.
const expiryScan = 30 * time.Second

// protCall is a protected record, or a reservation for one (e == nil).
type protCall struct {
	e          *callEntry
	size       int64
	until      time.Time // dropped after this (the keys' expiry)
	reservedAt time.Time // reservations only
}

type protThread struct {
	e     *threadEntry
	size  int64
	until time.Time
}

func newProtectedSet(maxCount int, maxBytes int64) *protectedSet {
	return &protectedSet{maxCount: maxCount, maxBytes: maxBytes,
		calls: map[Ref]*protCall{}, threads: map[string]*protThread{},
		staleCalls: map[Ref]struct{}{}, staleThreads: map[string]struct{}{}}
}

func (p *protectedSet) count() int { return len(p.calls) + len(p.threads) }

// room reports whether an entry of size bytes fits.
func (p *protectedSet) room(size int64) bool {
	return p.count() < p.maxCount && p.bytes+size <= p.maxBytes
}

// protectCallLocked puts e in the protected set, replacing a reservation or
// an older copy, and reports whether it is there. cacheMu is held.
func (s *Store) protectCallLocked(e *callEntry, until time.Time) bool {
	r, size := RefOf(e.call), e.call.size()
	p := s.prot
	if old, ok := p.calls[r]; ok {
		p.bytes += size - old.size
		old.e, old.size, old.until = e, size, until
		delete(p.staleCalls, r)
		s.protectedChanged()
		return true
	}
	if !p.room(size) {
		s.overflowLocked("call", r.String())
		return false
	}
	p.calls[r] = &protCall{e: e, size: size, until: until}
	p.bytes += size
	s.protectedChanged()
	return true
}

func (s *Store) unprotectCallLocked(r Ref) {
	p := s.prot
	if old, ok := p.calls[r]; ok {
		p.bytes -= old.size
		delete(p.calls, r)
		delete(p.staleCalls, r)
		p.overflowing = false
		s.protectedChanged()
	}
}

func (s *Store) protectThreadLocked(e *threadEntry, until time.Time) bool {
	id, size := e.t.ID, e.t.size()
	p := s.prot
	if old, ok := p.threads[id]; ok {
		p.bytes += size - old.size
		old.e, old.size, old.until = e, size, until
		delete(p.staleThreads, id)
		s.protectedChanged()
		return true
	}
	if !p.room(size) {
		s.overflowLocked("thread", fmt.Sprintf("thread %q", id))
		return false
	}
	p.threads[id] = &protThread{e: e, size: size, until: until}
	p.bytes += size
	s.protectedChanged()
	return true
}

func (s *Store) unprotectThreadLocked(id string) {
	p := s.prot
	if old, ok := p.threads[id]; ok {
		p.bytes -= old.size
		delete(p.threads, id)
		delete(p.staleThreads, id)
		p.overflowing = false
		s.protectedChanged()
	}
}

// overflowLocked counts an entry the full set turned away, and logs the
// first of a series.
func (s *Store) overflowLocked(kind, what string) {
	s.met.protectedOverflow.WithLabelValues(kind).Inc()
	if !s.prot.overflowing {
		s.prot.overflowing = true
		s.log.Error("protected ledger memory is full; a pending call or thread is kept where it can be evicted",
			"entry", what, "entries", s.prot.count(), "bytes", s.prot.bytes,
			"max_entries", s.prot.maxCount, "max_bytes", s.prot.maxBytes)
	}
}

func (s *Store) protectedChanged() {
	s.met.protectedEntries.Set(float64(s.prot.count()))
	s.met.protectedBytes.Set(float64(s.prot.bytes))
}

// ReserveHold reserves room in the protected set for a call about to be held
// for approval (r), of about size bytes (its arguments). It returns an error
// wrapping ErrProtectedFull when there is none: the caller must then deny
// the call instead of holding it, since a hold that memory cannot keep would
// fail open. The reservation becomes the held record when it is written,
// and is released after a minute otherwise (or by ReleaseHold).
func (s *Store) ReserveHold(r Ref, size int) error {
	if s.closed.Load() {
		return errClosed
	}
	est := int64(1024 + size)
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	p := s.prot
	if _, ok := p.calls[r]; ok {
		return nil
	}
	if !p.room(est) {
		s.met.holdsRefused.Inc()
		return fmt.Errorf("state: hold %s: %w (%d of %d entries, %d of %d bytes)",
			r, ErrProtectedFull, p.count(), p.maxCount, p.bytes, p.maxBytes)
	}
	p.calls[r] = &protCall{size: est, reservedAt: s.now(), until: s.now().Add(reservationTTL)}
	p.bytes += est
	s.protectedChanged()
	return nil
}

// ReleaseHold releases a reservation of ReserveHold that was not used; a
// record already written in its place stays.
func (s *Store) ReleaseHold(r Ref) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if p, ok := s.prot.calls[r]; ok && p.e == nil {
		s.unprotectCallLocked(r)
	}
}

// upkeep drops protected entries whose keys would have expired, and
// reservations never used (every expiryScan); it returns the refs and
// thread ids that another replica has rewritten since this one cached them
// (at most max of each), to be read again.
func (s *Store) upkeep(now time.Time, max int) (calls []Ref, threads []string) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	p := s.prot
	if now.Sub(p.scanned) >= expiryScan || now.Before(p.scanned) {
		p.scanned = now
		for r, c := range p.calls {
			if c.e == nil && now.Sub(c.reservedAt) > reservationTTL || c.e != nil && now.After(c.until) {
				s.unprotectCallLocked(r)
			}
		}
		for id, t := range p.threads {
			if now.After(t.until) {
				s.unprotectThreadLocked(id)
			}
		}
	}
	for r := range p.staleCalls {
		if len(calls) == max {
			break
		}
		calls = append(calls, r)
	}
	for id := range p.staleThreads {
		if len(threads) == max {
			break
		}
		threads = append(threads, id)
	}
	return calls, threads
}

// markStaleLocked marks a protected record for re-reading.
func (s *Store) markStaleLocked(r Ref) {
	if c, ok := s.prot.calls[r]; ok && c.e != nil {
		s.prot.staleCalls[r] = struct{}{}
	}
}

// settledLocked clears the stale mark of a protected record when memory
// holds version ver or a newer one.
func (s *Store) settledLocked(r Ref, ver int64) {
	if c, ok := s.prot.calls[r]; ok && c.e != nil && c.e.ver >= ver {
		delete(s.prot.staleCalls, r)
	}
}

// markAllStale marks every protected entry for re-reading, when
// invalidations may have been missed.
func (s *Store) markAllStale() {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	for r, c := range s.prot.calls {
		if c.e != nil {
			s.prot.staleCalls[r] = struct{}{}
		}
	}
	for id := range s.prot.threads {
		s.prot.staleThreads[id] = struct{}{}
	}
}

// approvalsAwaiting counts the held calls in the protected set whose
// approval nobody has decided yet (aguard_approvals_pending).
func (s *Store) approvalsAwaiting() int {
	if s == nil {
		return 0
	}
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	n := 0
	for _, p := range s.prot.calls {
		if p.e != nil && awaiting(p.e.call) {
			n++
		}
	}
	return n
}

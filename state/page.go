package state

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Paged lists. A list of records is read a page at a time (README, "Admin
// API"), so that neither an answer nor the memory behind it grows with the
// ledger: a page costs the index's members (tens of bytes per record) and
// the records of that page, never every record.
//
// Pages follow one order every replica shares without reading a record:
// that of the records' index members (their thread, then their id, as
// Redis stores them; see member). A cursor names the last member a page
// returned, so a record written or removed between two pages neither shifts
// the others nor repeats one; a record created meanwhile appears in a later
// page when its member sorts after the cursor. On a Redis Cluster the index
// is split into shards on several masters (listMembers reads them all):
// their members are merged into that one order, so a cursor, which names a
// member and not a place in a shard, holds across every shard.

const (
	// DefaultPageLimit is the number of records a page holds when the
	// caller does not say.
	DefaultPageLimit = 100
	// MaxPageLimit is the most records one page may hold.
	MaxPageLimit = 1000
)

// ErrCursor reports a cursor ListPage did not issue.
var ErrCursor = errors.New("invalid cursor")

// Page asks ListPage for part of a list.
type Page struct {
	// Limit is the most records to return, 1 to MaxPageLimit (0:
	// DefaultPageLimit).
	Limit int
	// Cursor is a previous page's next cursor; empty for the first page.
	Cursor string
	// Keep, if set, further selects records (after Filter); pages are
	// filled with records it keeps.
	Keep func(*ToolCall) bool
}

// ListPage returns up to p.Limit records matching f (and p.Keep) that come
// after p.Cursor, and the cursor of the next page, empty when this one is
// the last. It reads what ListCalls reads (Redis's indexes and records,
// writes still queued here, this process's memory without Redis, while
// Redis is unreachable, or after a loss), but only the page's records. An
// invalid limit or status wraps errInvalid; a cursor ListPage did not issue
// wraps ErrCursor.
func (s *Store) ListPage(ctx context.Context, f Filter, p Page) ([]*ToolCall, string, error) {
	if s.closed.Load() {
		return nil, "", errClosed
	}
	if p.Limit == 0 {
		p.Limit = DefaultPageLimit
	}
	if p.Limit < 0 || p.Limit > MaxPageLimit {
		return nil, "", fmt.Errorf("state: list tool calls: %w: limit %d is not within 1..%d", errInvalid, p.Limit, MaxPageLimit)
	}
	if f.Status != "" {
		st, err := ParseStatus(string(f.Status))
		if err != nil {
			return nil, "", fmt.Errorf("state: list tool calls: %w", err)
		}
		f.Status = st
	}
	after, err := decodeCursor(p.Cursor)
	if err != nil {
		return nil, "", fmt.Errorf("state: list tool calls: %w", err)
	}

	// The candidates after the cursor, by member: Redis's index, what
	// memory may add, and the queue.
	var cands []cand
	add := func(m string, r Ref) {
		if m > after {
			cands = append(cands, cand{m, r})
		}
	}
	fromRedis := s.rdb != nil && s.up.Load()
	if fromRedis {
		members, err := s.listMembers(ctx, f)
		switch {
		case err == nil:
			cands = make([]cand, 0, len(members))
			for _, m := range members {
				add(m, Ref{})
			}
		case s.unreachable(ctx, err):
			s.setDown(err)
			fromRedis = false
		default:
			return nil, "", fmt.Errorf("state: list tool calls %+v: %w", f, err)
		}
	}
	if !fromRedis || s.inLossWindow() {
		for _, r := range s.localRefs(f) {
			add(member(r), r)
		}
	}
	queued := map[Ref]*ToolCall{}
	if s.qlen.Load() > 0 {
		s.mu.Lock()
		for _, it := range s.q.all() {
			if it.call != nil && (f.ThreadID == "" || it.call.ThreadID == f.ThreadID) {
				queued[RefOf(it.call)] = it.call
			}
		}
		s.mu.Unlock()
		for r := range queued {
			add(member(r), r)
		}
	}
	slices.SortFunc(cands, func(a, b cand) int { return strings.Compare(a.m, b.m) })
	order := slices.CompactFunc(cands, func(a, b cand) bool { return a.m == b.m })

	keep := func(c *ToolCall) bool { return f.match(c) && (p.Keep == nil || p.Keep(c)) }
	// Read in slices of twice what the page still needs (some may not
	// match any more), until it is full or no member is left.
	var out []*ToolCall
	next := 0 // index in order of the first member not looked at
	for next < len(order) && len(out) < p.Limit {
		part := order[next:min(len(order), next+2*(p.Limit-len(out)))]
		calls, err := s.pageCalls(ctx, part, queued, fromRedis)
		if err != nil {
			return nil, "", fmt.Errorf("state: list tool calls %+v: %w", f, err)
		}
		for _, c := range calls {
			next++
			if c != nil && keep(c) {
				out = append(out, c.clone())
				if len(out) == p.Limit {
					break
				}
			}
		}
	}
	if next == len(order) {
		return out, "", nil
	}
	return out, encodeCursor(order[next-1].m), nil
}

// cand is a record a page may hold: its index member, and its Ref when
// known (else parsed from m when needed).
type cand struct {
	m string
	r Ref
}

// pageCalls returns the record of each candidate of part (nil for none):
// the queued write, else Redis's record (with fromRedis), else this
// process's copy.
func (s *Store) pageCalls(ctx context.Context, part []cand, queued map[Ref]*ToolCall, fromRedis bool) ([]*ToolCall, error) {
	refs := make([]Ref, len(part))
	for i, c := range part {
		r := c.r
		if r == (Ref{}) {
			var err error
			if r, err = parseMember(c.m); err != nil {
				return nil, err
			}
		}
		refs[i] = r
	}
	out := make([]*ToolCall, len(part))
	var read []int // indexes of the records to read from Redis
	for i, r := range refs {
		if c, ok := queued[r]; ok {
			out[i] = c
		} else if fromRedis {
			read = append(read, i)
		}
	}
	if len(read) > 0 {
		rr := make([]Ref, len(read))
		for k, i := range read {
			rr[k] = refs[i]
		}
		stored, err := s.readCalls(ctx, rr)
		if err != nil {
			return nil, err
		}
		for k, sc := range stored {
			out[read[k]] = sc.call // nil: expired since it was indexed
		}
	}
	if !fromRedis || s.inLossWindow() {
		s.cacheMu.Lock()
		for i, r := range refs {
			if out[i] != nil {
				continue
			}
			if e, ok := s.peekCallLocked(r); ok {
				out[i] = e.call
			}
		}
		s.cacheMu.Unlock()
	}
	return out, nil
}

// localRefs returns the refs of the records in memory that match f.
func (s *Store) localRefs(f Filter) []Ref {
	var out []Ref
	s.cacheMu.Lock()
	for r, p := range s.prot.calls {
		if p.e != nil && f.match(p.e.call) {
			out = append(out, r)
		}
	}
	s.cacheMu.Unlock()
	for _, e := range s.calls.Values() {
		if f.match(e.call) {
			out = append(out, RefOf(e.call))
		}
	}
	return out
}

// A cursor is the last member a page returned, base64url-encoded: opaque to
// callers, and checked as a member when it comes back.
func encodeCursor(m string) string { return base64.RawURLEncoding.EncodeToString([]byte(m)) }

func decodeCursor(c string) (string, error) {
	if c == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		_, err = parseMember(string(b))
	}
	if err != nil || len(c) > 4096 {
		return "", fmt.Errorf("%w %.64q", ErrCursor, c)
	}
	return string(b), nil
}

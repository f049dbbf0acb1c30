package state

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Lists across the whole ledger read the global indexes. On a Redis Cluster
// they are split into shards (keyspace), whose keys live on whichever
// master holds their slot: a list reads every shard's index in one
// pipeline, which go-redis sends to each master at once, so a list costs
// one round trip (in parallel) and what it returns, not a SCAN of every
// key of every master. Pages of a list (page.go) read the same members.

// listRedis returns the records indexed under f, filtered by f.
func (s *Store) listRedis(ctx context.Context, f Filter) ([]*ToolCall, error) {
	members, err := s.listMembers(ctx, f)
	if err != nil {
		return nil, err
	}
	refs := make([]Ref, 0, len(members))
	for _, m := range members {
		r, err := parseMember(m)
		if err != nil {
			return nil, err
		}
		refs = append(refs, r)
	}
	stored, err := s.readCalls(ctx, refs)
	if err != nil {
		return nil, err
	}
	out := make([]*ToolCall, 0, len(stored))
	for _, sc := range stored {
		if sc.call != nil && f.match(sc.call) { // nil: expired since it was indexed
			out = append(out, sc.call)
		}
	}
	return out, nil
}

// listMembers returns the members of the index f selects, unexpired: the
// thread's calls (from its ids), or else the status's, or every status's,
// of every shard. They come in no useful order, and a member may come
// twice (a record whose status index entry moved while it was read).
func (s *Store) listMembers(ctx context.Context, f Filter) ([]string, error) {
	by := &redis.ZRangeBy{Min: strconv.FormatInt(time.Now().UnixMilli(), 10), Max: "+inf"}
	if f.ThreadID != "" {
		ids, err := s.rdb.ZRangeByScore(ctx, threadCallsKey(f.ThreadID), by).Result()
		if err != nil {
			return nil, err
		}
		out := make([]string, len(ids))
		for i, id := range ids {
			out[i] = member(Ref{f.ThreadID, id})
		}
		return out, nil
	}
	statuses := statusByNumber[1:]
	if f.Status != "" {
		statuses = []Status{f.Status}
	}
	sets := make([]string, 0, len(s.ks.shards)*len(statuses))
	for _, shard := range s.ks.shards {
		for _, st := range statuses {
			sets = append(sets, s.ks.statusKey(shard, st))
		}
	}
	return s.indexMembers(ctx, sets, by)
}

// indexMembers reads the members of the sorted sets keys within by, in one
// pipeline, in the order of keys.
func (s *Store) indexMembers(ctx context.Context, keys []string, by *redis.ZRangeBy) ([]string, error) {
	cmds := make([]*redis.StringSliceCmd, len(keys))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.ZRangeByScore(ctx, k, by)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range cmds {
		out = append(out, c.Val()...)
	}
	return out, nil
}

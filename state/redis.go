package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Redis key layout; see the package documentation.
const (
	callKeyPrefix        = "aguard:call:"        // HASH v (version), d (record JSON), s (status), t (thread id)
	threadKeyPrefix      = "aguard:thread:"      // STRING, the Thread as JSON
	threadCallsKeyPrefix = "aguard:threadcalls:" // ZSET of call ids, scored by last write (ms)
	statusKeyPrefix      = "aguard:status:"      // ZSET of call ids, scored by last write (ms)
	invalidateChannel    = "aguard:invalidate:"  // + database number; payload "<origin> <version> <call id>"
)

// writeScript writes a batch of call records and threads atomically, in one
// round trip, and keeps the indexes in step with the records.
//
// KEYS: the n call keys, then the m thread keys.
// ARGV: ttl ms, invalidation channel, origin, n, m; then per call: id,
// expected version ("" = unconditional), status, thread id, record JSON;
// then per thread: thread JSON.
//
// If any call's expected version differs from its stored one ("v", 0 when
// absent), nothing is written and the reply is {-1, index, stored version}.
// Otherwise each call's version is incremented, its record, status and
// thread are stored, it moves between the status and thread indexes, every
// touched key's expiry is reset to ttl, index members older than ttl are
// trimmed, an invalidation is published, and the reply is the new versions.
const writeScriptSrc = `
local ttl = tonumber(ARGV[1])
local n, m = tonumber(ARGV[4]), tonumber(ARGV[5])
for i = 1, n do
  local exp = ARGV[5 + (i-1)*5 + 2]
  if exp ~= '' then
    local cur = redis.call('HGET', KEYS[i], 'v')
    cur = cur and tonumber(cur) or 0
    if cur ~= tonumber(exp) then return {-1, i, cur} end
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cutoff = '(' .. string.format('%d', now - ttl)
local function index(key, id)
  redis.call('ZADD', key, now, id)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', cutoff)
  redis.call('PEXPIRE', key, ttl)
end
local res = {}
for i = 1, n do
  local o = 5 + (i-1)*5
  local id, st, tid = ARGV[o+1], ARGV[o+3], ARGV[o+4]
  local old = redis.call('HMGET', KEYS[i], 's', 't')
  local v = redis.call('HINCRBY', KEYS[i], 'v', 1)
  redis.call('HSET', KEYS[i], 'd', ARGV[o+5], 's', st, 't', tid)
  redis.call('PEXPIRE', KEYS[i], ttl)
  if old[1] and old[1] ~= st then redis.call('ZREM', '` + statusKeyPrefix + `' .. old[1], id) end
  if old[2] and old[2] ~= tid and old[2] ~= '' then redis.call('ZREM', '` + threadCallsKeyPrefix + `' .. old[2], id) end
  index('` + statusKeyPrefix + `' .. st, id)
  if tid ~= '' then index('` + threadCallsKeyPrefix + `' .. tid, id) end
  redis.call('PUBLISH', ARGV[2], ARGV[3] .. ' ' .. v .. ' ' .. id)
  res[i] = v
end
for j = 1, m do
  redis.call('SET', KEYS[n+j], ARGV[5 + n*5 + j], 'PX', ttl)
end
return res
`

// errCorrupt marks data in Redis that cannot be decoded; it is not an outage.
var errCorrupt = errors.New("corrupt data in redis")

// errConflict reports a failed compare-and-set; UpdateCall retries on it.
var errConflict = errors.New("version conflict")

// callWrite is one record for writeRedis, already normalized.
type callWrite struct {
	call     *ToolCall
	expected int64 // stored version required, or -1 for an unconditional write
}

// writeRedis writes calls and threads in one atomic script call and returns
// the new version of each call. It returns errConflict (wrapped) when an
// expected version did not match.
func (s *Store) writeRedis(ctx context.Context, calls []callWrite, threads []*Thread) ([]int64, error) {
	keys := make([]string, 0, len(calls)+len(threads))
	args := make([]any, 0, 5+5*len(calls)+len(threads))
	args = append(args, s.opt.TTL.Milliseconds(), s.channel, s.origin, len(calls), len(threads))
	for _, w := range calls {
		data, err := json.Marshal(w.call)
		if err != nil {
			return nil, fmt.Errorf("encode tool call %q: %w", w.call.ID, err)
		}
		exp := ""
		if w.expected >= 0 {
			exp = strconv.FormatInt(w.expected, 10)
		}
		keys = append(keys, callKeyPrefix+w.call.ID)
		args = append(args, w.call.ID, exp, string(w.call.Status), w.call.ThreadID, data)
	}
	for _, t := range threads {
		data, err := json.Marshal(t)
		if err != nil {
			return nil, fmt.Errorf("encode thread %q: %w", t.ID, err)
		}
		keys = append(keys, threadKeyPrefix+t.ID)
		args = append(args, data)
	}
	res, err := s.script.Run(ctx, s.rdb, keys, args...).Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(res) == 3 && res[0] == -1 {
		return nil, fmt.Errorf("%w: tool call %q is at version %d", errConflict, calls[res[1]-1].call.ID, res[2])
	}
	if len(res) != len(calls) {
		return nil, fmt.Errorf("write script answered %d versions for %d calls", len(res), len(calls))
	}
	return res, nil
}

// readCall reads a record and its version from Redis; (nil, 0, nil) when
// there is none.
func (s *Store) readCall(ctx context.Context, id string) (*ToolCall, int64, error) {
	vals, err := s.rdb.HMGet(ctx, callKeyPrefix+id, "v", "d").Result()
	if err != nil {
		return nil, 0, err
	}
	return decodeCall(id, vals)
}

// decodeCall decodes an HMGET v d reply.
func decodeCall(id string, vals []any) (*ToolCall, int64, error) {
	if len(vals) != 2 || vals[1] == nil {
		return nil, 0, nil
	}
	vs, _ := vals[0].(string)
	data, _ := vals[1].(string)
	ver, err := strconv.ParseInt(vs, 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: tool call %q has the malformed version %q", errCorrupt, id, vs)
	}
	c := new(ToolCall)
	if err := json.Unmarshal([]byte(data), c); err != nil {
		return nil, 0, fmt.Errorf("%w: decode tool call %q: %w", errCorrupt, id, err)
	}
	return c, ver, nil
}

// readThread reads a thread from Redis; nil when there is none.
func (s *Store) readThread(ctx context.Context, id string) (*Thread, error) {
	data, err := s.rdb.Get(ctx, threadKeyPrefix+id).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	t := new(Thread)
	if err := json.Unmarshal(data, t); err != nil {
		return nil, fmt.Errorf("%w: decode thread %q: %w", errCorrupt, id, err)
	}
	return t, nil
}

// listRedis returns the records indexed under f, filtered by f.
func (s *Store) listRedis(ctx context.Context, f Filter) ([]*ToolCall, error) {
	var sets []string
	switch {
	case f.ThreadID != "":
		sets = []string{threadCallsKeyPrefix + f.ThreadID}
	case f.Status != "":
		sets = []string{statusKeyPrefix + string(f.Status)}
	default:
		for _, st := range statusByNumber[1:] {
			sets = append(sets, statusKeyPrefix+string(st))
		}
	}
	var ids []string
	for _, set := range sets {
		members, err := s.rdb.ZRange(ctx, set, 0, -1).Result()
		if err != nil {
			return nil, err
		}
		ids = append(ids, members...)
	}
	out := make([]*ToolCall, 0, len(ids))
	const chunk = 512
	for len(ids) > 0 {
		part := ids[:min(chunk, len(ids))]
		ids = ids[len(part):]
		cmds := make([]*redis.SliceCmd, len(part))
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, id := range part {
				cmds[i] = p.HMGet(ctx, callKeyPrefix+id, "v", "d")
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		for i, cmd := range cmds {
			c, _, err := decodeCall(part[i], cmd.Val())
			if err != nil {
				return nil, err
			}
			if c != nil && f.match(c) { // nil: expired since it was indexed
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// parseInvalidation splits a "<origin> <version> <call id>" payload.
func parseInvalidation(payload string) (origin string, ver int64, id string, ok bool) {
	origin, rest, ok1 := strings.Cut(payload, " ")
	vs, id, ok2 := strings.Cut(rest, " ")
	ver, err := strconv.ParseInt(vs, 10, 64)
	return origin, ver, id, ok1 && ok2 && err == nil
}

package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// writeScriptSrc writes one thread's records and thread atomically, in one
// round trip. Its KEYS are that thread's keys only (one hash slot): the
// thread, its calls index, then the n call keys. The global indexes it
// maintains afterwards (status, id → threads, deadlines) are named in ARGV,
// in a separate part of the script (indexPartSrc) that reads only what the
// thread part computed. On one Redis that part runs in the same script
// call; on a Redis Cluster, where those keys are in another slot, the
// script replies what moved instead and indexScriptSrc runs that part as a
// call of its own, on the shard's slot.
//
// ARGV: mode ("w" write, "r" restore), invalidation channel, origin, n,
// thread id, thread member (JSON string), thread JSON ("" = none), thread
// ttl ms, thread version (restore mode), status key prefix, ids key prefix,
// deadlines key, inline ("1": maintain the indexes here; "0": reply what
// moved); then per call: id, member, expected version ("" = unconditional;
// restore mode: the version to restore), status, ttl ms, approval deadline
// ms ("" = none), record JSON.
//
// Mode "w": if any call's expected version differs from its stored one (0
// when absent), nothing is written and the reply is {-1, index, stored
// version, the origin that wrote it ("" = unknown)}. Otherwise each record
// gets its writer's origin and a version greater than its stored one
// and than the time in ms (so that a version written after a data loss is
// newer than any written before it), its restored flag is cleared, and the
// reply is the new versions, then the thread's; when not inline, then a
// pair per record written: its index and the status it had ("" = none).
//
// Mode "r" (the write-back after a data loss): a record or thread is written
// with the given version, flagged restored, only when Redis has no newer
// one; skipped ones reply -2.
//
// Both modes set each record's expiry to its ttl, extend (never shorten) the
// thread's keys to the longest ttl written, and, inline, index the records
// (each index touched once per call, whatever the number of records) and
// publish one invalidation message listing what was written.
const writeScriptSrc = `
local mode, channel, origin = ARGV[1], ARGV[2], ARGV[3]
local n = tonumber(ARGV[4])
local tid, tmember, tdata, tttl, tver = ARGV[5], ARGV[6], ARGV[7], tonumber(ARGV[8]), ARGV[9]
local statusPrefix, idsPrefix, deadlines = ARGV[10], ARGV[11], ARGV[12]
local inline = ARGV[13] == '1'
local B, S = 13, 7
` + scriptHelpersSrc + `
local function version(cur)
  cur = tonumber(cur) or 0
  if cur + 1 > now then return cur + 1 end
  return now
end
if mode == 'w' then
  for i = 1, n do
    local exp = ARGV[B + (i-1)*S + 3]
    if exp ~= '' then
      local got = redis.call('HMGET', KEYS[2+i], 'v', 'o')
      local cur = got[1] and tonumber(got[1]) or 0
      if cur ~= tonumber(exp) then return {-1, i, cur, got[2] or ''} end
    end
  end
end

-- The thread's part: its own keys only.
local res, moved, nmoved, maxttl = {}, {}, 0, 0
local zcalls, nz = {}, 0
for i = 1, n do
  local o = B + (i-1)*S
  local id, exp, st, ttl, data = ARGV[o+1], ARGV[o+3], ARGV[o+4], tonumber(ARGV[o+5]), ARGV[o+7]
  local key = KEYS[2+i]
  local old = redis.call('HMGET', key, 'v', 's', 'r')
  local v = nil
  if mode == 'r' then
    if old[1] and tonumber(old[1]) >= tonumber(exp) then
      res[i] = -2
    else
      v = tonumber(exp)
      redis.call('HSET', key, 'v', fmt(v), 'd', data, 's', st, 'r', '1')
    end
  else
    v = version(old[1])
    redis.call('HSET', key, 'v', fmt(v), 'd', data, 's', st, 'o', origin)
    if old[3] then redis.call('HDEL', key, 'r') end
  end
  if v then
    redis.call('PEXPIRE', key, ttl)
    zcalls[nz+1], zcalls[nz+2], nz = now + ttl, id, nz + 2
    if ttl > maxttl then maxttl = ttl end
    res[i] = v
    nmoved = nmoved + 1
    moved[nmoved] = {id, ARGV[o+2], st, ttl, ARGV[o+6], v, old[2] or '', i}
  end
end
local tv = 0
if tdata ~= '' then
  local old = redis.call('HGET', KEYS[1], 'v')
  if mode == 'r' and old and tonumber(old) >= tonumber(tver) then
    tv = -2
  else
    if mode == 'r' then tv = tonumber(tver) else tv = version(old) end
    redis.call('HSET', KEYS[1], 'v', fmt(tv), 'd', tdata)
    extend(KEYS[1], tttl)
  end
end
if nz > 0 then
  many('ZADD', KEYS[2], zcalls, nz)
  extend(KEYS[1], maxttl)
  extend(KEYS[2], maxttl)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. fmt(now))
end
res[n+1] = tv
if not inline then
  for j = 1, nmoved do
    res[#res+1] = moved[j][8]
    res[#res+1] = moved[j][7]
  end
  return res
end
` + indexPartSrc + `
return res
`

// indexScriptSrc is the index part of writeScriptSrc as a call of its own,
// for a Redis Cluster: KEYS[1] is the shard's deadlines key (every key it
// touches shares its hash tag).
//
// ARGV: invalidation channel, origin, thread member, thread version (0: not
// written), thread id, status key prefix, ids key prefix, deadlines key, m;
// then per record written: id, member, status, ttl ms, approval deadline ms
// ("" = none), version, previous status ("" = none).
const indexScriptSrc = `
local channel, origin, tmember, tv, tid = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local statusPrefix, idsPrefix, deadlines = ARGV[6], ARGV[7], ARGV[8]
local nmoved = tonumber(ARGV[9])
` + scriptHelpersSrc + `
local moved = {}
for j = 1, nmoved do
  local o = 9 + (j-1)*7
  moved[j] = {ARGV[o+1], ARGV[o+2], ARGV[o+3], tonumber(ARGV[o+4]), ARGV[o+5], tonumber(ARGV[o+6]), ARGV[o+7]}
end
` + indexPartSrc + `
return 1
`

// scriptHelpersSrc defines now (Redis's clock, ms), fmt, extend and many.
const scriptHelpersSrc = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function fmt(x) return string.format('%d', x) end
local function extend(key, ttl)
  local cur = redis.call('PTTL', key)
  if cur ~= -2 and cur < ttl then redis.call('PEXPIRE', key, ttl) end
end
local function many(cmd, key, args, k)
  for i = 1, k, 4000 do
    redis.call(cmd, key, unpack(args, i, math.min(i + 3999, k)))
  end
end
`

// indexPartSrc maintains the global indexes for the records in moved
// ({id, member, status, ttl, deadline, version, previous status}) and
// publishes the invalidation. Members are the records' JSON refs.
const indexPartSrc = `
local adds, rems, held, unheld, nh, nu = {}, {}, {}, {}, 0, 0
local lines, nl = {}, 0
if tv > 0 then nl = 1; lines[1] = fmt(tv) .. ' ' .. tmember end
for j = 1, nmoved do
  local id, mem, st, ttl, dl, v, olds = unpack(moved[j], 1, 7)
  local expiry = now + ttl
  if olds ~= '' and olds ~= st then
    local r = rems[olds] or {n = 0}
    r.n = r.n + 1; r[r.n] = mem; rems[olds] = r
  end
  local a = adds[st] or {n = 0, max = 0}
  a[a.n+1], a[a.n+2], a.n = expiry, mem, a.n + 2
  if ttl > a.max then a.max = ttl end
  adds[st] = a
  local ik = idsPrefix .. id
  redis.call('ZADD', ik, expiry, tid)
  extend(ik, ttl)
  if st == '` + string(StatusRequiresConfirmation) + `' and dl ~= '' then
    held[nh+1], held[nh+2], nh = tonumber(dl), mem, nh + 2
  else
    nu = nu + 1; unheld[nu] = mem
  end
  nl = nl + 1; lines[nl] = fmt(v) .. ' ' .. mem
end
for st, r in pairs(rems) do many('ZREM', statusPrefix .. st, r, r.n) end
for st, a in pairs(adds) do
  local sk = statusPrefix .. st
  many('ZADD', sk, a, a.n)
  redis.call('ZREMRANGEBYSCORE', sk, '-inf', '(' .. fmt(now))
  extend(sk, a.max)
end
if nh > 0 then many('ZADD', deadlines, held, nh) end
if nu > 0 then many('ZREM', deadlines, unheld, nu) end
if nl > 0 then redis.call('PUBLISH', channel, origin .. '\n' .. table.concat(lines, '\n')) end
`

// heartbeatScriptSrc renews this replica's marker (KEYS[1]), its liveness
// score (KEYS[2], the replicas index, scored by Redis's clock) and its runs
// registry's expiry (KEYS[3]). It replies 1 when the marker was there, 0
// when it had vanished (and sets it again). The marker lives as long as
// records do, so only a loss removes it early.
//
// ARGV: replica id, marker ttl ms, registry ttl ms.
const heartbeatScriptSrc = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local had = redis.call('PEXPIRE', KEYS[1], ARGV[2])
if had == 0 then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) end
redis.call('ZADD', KEYS[2], string.format('%d', now), ARGV[1])
if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('PEXPIRE', KEYS[3], ARGV[3]) end
return had
`

// claimScriptSrc claims the runs of replicas that stopped beating: each
// replica in the replicas index (KEYS[1]) silent for longer than the
// liveness is removed from it and from the primaries it caught up with
// (KEYS[3]), and its runs registry moved into this replica's (KEYS[2]),
// each run marked "lost <dead replica>". Exactly one claimer gets a dead
// replica's runs. It replies {replica, run member, …}.
//
// ARGV: this replica's id, liveness ms, runs key prefix, registry ttl ms.
const claimScriptSrc = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', now - tonumber(ARGV[2])), 'LIMIT', 0, 16)
local out = {}
for _, d in ipairs(dead) do
  if d ~= ARGV[1] then
    redis.call('ZREM', KEYS[1], d)
    local rk = ARGV[3] .. d
    local runs = redis.call('HGETALL', rk)
    for i = 1, #runs, 2 do
      local was = runs[i+1]
      if string.sub(was, 1, 5) ~= 'lost ' then was = 'lost ' .. d end
      redis.call('HSET', KEYS[2], runs[i], was)
      out[#out+1] = string.sub(was, 6)
      out[#out+1] = runs[i]
    end
    redis.call('DEL', rk)
    redis.call('HDEL', KEYS[3], d)
  end
end
if #out > 0 then redis.call('PEXPIRE', KEYS[2], ARGV[4]) end
return out
`

// scripts are the Lua scripts a Store runs.
type scripts struct {
	write, index, heartbeat, claim, caughtUp *redis.Script
}

func newScripts() *scripts {
	return &scripts{
		write:     redis.NewScript(writeScriptSrc),
		index:     redis.NewScript(indexScriptSrc),
		heartbeat: redis.NewScript(heartbeatScriptSrc),
		claim:     redis.NewScript(claimScriptSrc),
		caughtUp:  redis.NewScript(caughtUpScriptSrc),
	}
}

// errCorrupt marks data in Redis that cannot be decoded; it is not an outage.
var errCorrupt = errors.New("corrupt data in redis")

// errConflict reports a failed compare-and-set; callers retry on it.
var errConflict = errors.New("version conflict")

// callWrite is one record for a write, already normalized.
type callWrite struct {
	call *ToolCall
	// expected is the stored version required (0: absent), or -1 for an
	// unconditional write; in a restore, the version to write.
	expected int64
}

// threadWrite is what one write script call writes: records of one thread,
// and maybe the thread itself.
type threadWrite struct {
	thread string
	calls  []callWrite
	t      *Thread // nil: the thread is not written
	tver   int64   // restore mode: the thread's version
}

// writeResult is a threadWrite's outcome: the new version of each call
// (-2: a restore found newer data), and of the thread (0: not written).
type writeResult struct {
	vers     []int64
	tver     int64
	conflict error // wraps errConflict: nothing of this threadWrite was written
	// conflictAt is the index in calls of the record whose expected
	// version did not match, conflictVer the version Redis holds and
	// conflictOrigin the Store that wrote it ("" if unknown).
	conflictAt     int
	conflictVer    int64
	conflictOrigin string
}

// groupWrites groups records and threads by thread, in first-seen order.
func groupWrites(calls []callWrite, threads []*Thread) []*threadWrite {
	var out []*threadWrite
	by := map[string]*threadWrite{}
	get := func(id string) *threadWrite {
		w := by[id]
		if w == nil {
			w = &threadWrite{thread: id}
			by[id] = w
			out = append(out, w)
		}
		return w
	}
	for _, c := range calls {
		w := get(c.call.ThreadID)
		w.calls = append(w.calls, c)
	}
	for _, t := range threads {
		get(t.ID).t = t
	}
	return out
}

// writeRedis writes calls and threads, one atomic script call per thread,
// all in one pipeline (one round trip), and returns the new version of each
// call in order. It returns errConflict (wrapped) when an expected version
// did not match; the other threads' writes are applied regardless.
func (s *Store) writeRedis(ctx context.Context, calls []callWrite, threads []*Thread) ([]int64, error) {
	groups := groupWrites(calls, threads)
	res, err := s.runWrites(ctx, "w", groups)
	if err != nil {
		return nil, err
	}
	vers := map[*ToolCall]int64{}
	var conflict error
	for i, g := range groups {
		if res[i].conflict != nil {
			conflict = res[i].conflict
			continue
		}
		for j, c := range g.calls {
			vers[c.call] = res[i].vers[j]
		}
	}
	if conflict != nil {
		return nil, conflict
	}
	out := make([]int64, len(calls))
	for i, c := range calls {
		out[i] = vers[c.call]
	}
	return out, nil
}

// runWrites runs one write script call per group in one pipeline.
func (s *Store) runWrites(ctx context.Context, mode string, groups []*threadWrite) ([]writeResult, error) {
	return s.runWritesOn(ctx, s.rdb, 0, mode, groups)
}

// runWritesOn is runWrites on client c, its round trip bounded by budget
// (0: the client's I/O timeouts). On a Redis Cluster it takes a second
// round trip, for the global indexes (runIndexes).
func (s *Store) runWritesOn(ctx context.Context, c redis.UniversalClient, budget time.Duration, mode string, groups []*threadWrite) ([]writeResult, error) {
	return s.runWritesAround(ctx, c, budget, mode, groups, nil, nil)
}

// runWritesAround is runWritesOn with more commands, which Redis executes
// before the script calls (before's) or after them (after's); either may be
// nil. Their replies are not read, only their errors. On one Redis they
// share the scripts' pipeline, which Redis executes in order. A Redis
// Cluster's client sends a pipeline's commands to each node at once, in no
// order between nodes: there before's take a round trip of their own ahead
// of the scripts, and after's go with the index round trip that follows
// them.
func (s *Store) runWritesAround(ctx context.Context, c redis.UniversalClient, budget time.Duration, mode string, groups []*threadWrite,
	before, after func(redis.Pipeliner)) ([]writeResult, error) {
	if len(groups) == 0 && before == nil && after == nil {
		return nil, nil
	}
	preps := make([]prepared, len(groups))
	for i, g := range groups {
		keys, args, err := s.writeArgs(mode, g)
		if err != nil {
			return nil, err
		}
		preps[i] = prepared{keys, args}
	}
	ctx, cancel := within(ctx, budget)
	defer cancel()
	if s.cluster {
		if before != nil {
			if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error { before(p); return nil }); err != nil {
				return nil, err
			}
		}
		before = nil
	}
	scriptsAfter := after
	if s.cluster {
		scriptsAfter = nil
	}
	cmds, err := s.evalAll(ctx, c, s.scripts.write, preps, before, scriptsAfter)
	if err != nil {
		return nil, err
	}
	out := make([]writeResult, len(groups))
	moved := make([][]movedCall, len(groups))
	for i, cmd := range cmds {
		res, err := cmd.Slice()
		if err != nil {
			return nil, err
		}
		g := groups[i]
		if len(res) >= 3 && res[0] == int64(-1) {
			at := int(res[1].(int64)) - 1
			out[i].conflict = fmt.Errorf("%w: %s is at version %d", errConflict, RefOf(g.calls[at].call), res[2])
			out[i].conflictAt, out[i].conflictVer = at, res[2].(int64)
			if len(res) > 3 {
				out[i].conflictOrigin, _ = res[3].(string)
			}
			continue
		}
		if out[i], moved[i], err = decodeWriteReply(g, res, s.cluster); err != nil {
			return nil, err
		}
	}
	if s.cluster {
		if err := s.runIndexes(ctx, c, groups, out, moved, after); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// prepared is one script call's KEYS and ARGV.
type prepared struct {
	keys []string
	args []any
}

// evalAll runs script once per prepared call, all in one pipeline (on a
// cluster, one per node, in parallel), loading the script where a node
// does not have it; before and after (either may be nil) add commands to
// the pipeline ahead of the calls and behind them.
func (s *Store) evalAll(ctx context.Context, c redis.UniversalClient, script *redis.Script, preps []prepared, before, after func(redis.Pipeliner)) ([]*redis.Cmd, error) {
	run := func(load bool) ([]*redis.Cmd, error) {
		cmds := make([]*redis.Cmd, len(preps))
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			if before != nil {
				before(p)
			}
			for i, pr := range preps {
				if load {
					cmds[i] = script.Eval(ctx, p, pr.keys, pr.args...)
				} else {
					cmds[i] = script.EvalSha(ctx, p, pr.keys, pr.args...)
				}
			}
			if after != nil {
				after(p)
			}
			return nil
		})
		return cmds, err
	}
	cmds, err := run(false)
	if err != nil && isNoScript(err) {
		cmds, err = run(true)
	}
	return cmds, err
}

// movedCall is a record a write script call wrote, as a cluster's index
// call needs it: its index in the group and the status it had before.
type movedCall struct {
	i    int
	olds string
}

// decodeWriteReply reads a write script reply of g: the versions, and
// when withMoved (not inline) the records written with their previous
// status.
func decodeWriteReply(g *threadWrite, res []any, withMoved bool) (writeResult, []movedCall, error) {
	n := len(g.calls)
	if len(res) < n+1 || (!withMoved && len(res) != n+1) || (len(res)-n-1)%2 != 0 {
		return writeResult{}, nil, fmt.Errorf("write script answered %d values for %d calls", len(res), n)
	}
	vers := make([]int64, n+1)
	for i := range vers {
		v, ok := res[i].(int64)
		if !ok {
			return writeResult{}, nil, fmt.Errorf("write script answered %v as version %d", res[i], i)
		}
		vers[i] = v
	}
	var moved []movedCall
	for j := n + 1; j+1 < len(res); j += 2 {
		i, _ := res[j].(int64)
		olds, _ := res[j+1].(string)
		if i < 1 || int(i) > n {
			return writeResult{}, nil, fmt.Errorf("write script answered record %v of %d", res[j], n)
		}
		moved = append(moved, movedCall{int(i) - 1, olds})
	}
	return writeResult{vers: vers[:n], tver: vers[n]}, moved, nil
}

// runIndexes runs the index script of each group written (those without a
// conflict), in one pipeline, with after's commands (nil: none) behind
// them: on a Redis Cluster the indexes are in their shard's slot, apart
// from the thread's.
func (s *Store) runIndexes(ctx context.Context, c redis.UniversalClient, groups []*threadWrite, out []writeResult, moved [][]movedCall, after func(redis.Pipeliner)) error {
	var preps []prepared
	for i, g := range groups {
		if out[i].conflict != nil || (len(moved[i]) == 0 && out[i].tver <= 0) {
			continue
		}
		shard := s.ks.shardOf(g.thread)
		tmember, _ := json.Marshal(g.thread)
		args := make([]any, 0, 9+7*len(moved[i]))
		args = append(args, s.channel, s.origin, string(tmember), max(out[i].tver, 0), g.thread,
			s.ks.statusKey(shard, ""), s.ks.idsKey(shard, ""), s.ks.deadlinesKey(shard), len(moved[i]))
		for _, m := range moved[i] {
			w := g.calls[m.i]
			args = append(args, w.call.ID, member(RefOf(w.call)), string(w.call.Status), s.ttlOf(w.call).Milliseconds(),
				approvalDeadline(w.call), out[i].vers[m.i], m.olds)
		}
		preps = append(preps, prepared{[]string{s.ks.deadlinesKey(shard)}, args})
	}
	if len(preps) == 0 && after == nil {
		return nil
	}
	cmds, err := s.evalAll(ctx, c, s.scripts.index, preps, nil, after)
	if err != nil {
		return err
	}
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}

// approvalDeadline is the deadlines index score of c ("" = not held).
func approvalDeadline(c *ToolCall) string {
	if c.Status == StatusRequiresConfirmation && c.RequiresApprovalAt != nil {
		return strconv.FormatInt(c.RequiresApprovalAt.UnixMilli(), 10)
	}
	return ""
}

func isNoScript(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") }

// writeArgs builds the KEYS and ARGV of one write script call.
func (s *Store) writeArgs(mode string, g *threadWrite) ([]string, []any, error) {
	keys := make([]string, 0, 2+len(g.calls))
	keys = append(keys, threadKey(g.thread), threadCallsKey(g.thread))
	tmember, _ := json.Marshal(g.thread)
	tdata, tttl := "", int64(0)
	if g.t != nil {
		b, err := json.Marshal(g.t)
		if err != nil {
			return nil, nil, fmt.Errorf("encode thread %q: %w", g.t.ID, err)
		}
		tdata = string(b)
		with := make([]*ToolCall, len(g.calls))
		for i, c := range g.calls {
			with[i] = c.call
		}
		tttl = s.threadTTL(g.t, with).Milliseconds()
	}
	inline := "1"
	if s.cluster {
		inline = "0"
	}
	shard := s.ks.shardOf(g.thread)
	args := make([]any, 0, 13+7*len(g.calls))
	args = append(args, mode, s.channel, s.origin, len(g.calls), g.thread, string(tmember), tdata, tttl,
		g.tver, s.ks.statusKey(shard, ""), s.ks.idsKey(shard, ""), s.ks.deadlinesKey(shard), inline)
	for _, w := range g.calls {
		data, err := json.Marshal(w.call)
		if err != nil {
			return nil, nil, fmt.Errorf("encode %s: %w", RefOf(w.call), err)
		}
		exp := ""
		if w.expected >= 0 {
			exp = strconv.FormatInt(w.expected, 10)
		}
		r := RefOf(w.call)
		keys = append(keys, callKey(r))
		args = append(args, w.call.ID, member(r), exp, string(w.call.Status), s.ttlOf(w.call).Milliseconds(), approvalDeadline(w.call), data)
	}
	return keys, args, nil
}

// storedCall is a record as read from Redis.
type storedCall struct {
	call     *ToolCall // nil: absent
	ver      int64
	restored bool // a write-back restored it, and nothing was written since
}

// readCall reads a record from Redis; call is nil when there is none.
func (s *Store) readCall(ctx context.Context, r Ref) (sc storedCall, err error) {
	err = s.readFromPrimary(ctx, func() error {
		var vals []any
		if vals, err = s.rdb.HMGet(ctx, callKey(r), "v", "d", "r").Result(); err == nil {
			sc, err = decodeCall(r, vals)
		}
		return err
	})
	return sc, err
}

// decodeCall decodes an HMGET v d r reply.
func decodeCall(r Ref, vals []any) (storedCall, error) {
	if len(vals) != 3 || vals[1] == nil {
		return storedCall{}, nil
	}
	vs, _ := vals[0].(string)
	data, _ := vals[1].(string)
	ver, err := strconv.ParseInt(vs, 10, 64)
	if err != nil {
		return storedCall{}, fmt.Errorf("%w: %s has the malformed version %q", errCorrupt, r, vs)
	}
	c := new(ToolCall)
	if err := json.Unmarshal([]byte(data), c); err != nil {
		return storedCall{}, fmt.Errorf("%w: decode %s: %w", errCorrupt, r, err)
	}
	if RefOf(c) != r {
		return storedCall{}, fmt.Errorf("%w: the record under %s names %s", errCorrupt, r, RefOf(c))
	}
	return storedCall{call: c, ver: ver, restored: vals[2] != nil}, nil
}

// readThread reads a thread from Redis; nil when there is none.
func (s *Store) readThread(ctx context.Context, id string) (t *Thread, ver int64, err error) {
	err = s.readFromPrimary(ctx, func() error {
		var vals []any
		if vals, err = s.rdb.HMGet(ctx, threadKey(id), "v", "d").Result(); err == nil {
			t, ver, err = decodeThread(id, vals)
		}
		return err
	})
	return t, ver, err
}

// decodeThread decodes an HMGET v d reply of a thread.
func decodeThread(id string, vals []any) (*Thread, int64, error) {
	if len(vals) != 2 || vals[1] == nil {
		return nil, 0, nil
	}
	vs, _ := vals[0].(string)
	data, _ := vals[1].(string)
	ver, err := strconv.ParseInt(vs, 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: thread %q has the malformed version %q", errCorrupt, id, vs)
	}
	t := new(Thread)
	if err := json.Unmarshal([]byte(data), t); err != nil {
		return nil, 0, fmt.Errorf("%w: decode thread %q: %w", errCorrupt, id, err)
	}
	return t, ver, nil
}

// readCalls reads records in pipelines of chunk commands.
func (s *Store) readCalls(ctx context.Context, refs []Ref) ([]storedCall, error) {
	return s.readCallsOn(ctx, s.rdb, 0, refs, 512)
}

// readCallsOn reads records on client c, chunk per pipeline, each round
// trip bounded by budget (0: the client's I/O timeouts).
func (s *Store) readCallsOn(ctx context.Context, c redis.UniversalClient, budget time.Duration, refs []Ref, chunk int) (out []storedCall, err error) {
	err = s.readFromPrimary(ctx, func() error {
		out, err = s.readCallsOnce(ctx, c, budget, refs, chunk)
		return err
	})
	return out, err
}

// readCallsOnce is readCallsOn's reads.
func (s *Store) readCallsOnce(ctx context.Context, c redis.UniversalClient, budget time.Duration, refs []Ref, chunk int) ([]storedCall, error) {
	out := make([]storedCall, 0, len(refs))
	for len(refs) > 0 {
		part := refs[:min(chunk, len(refs))]
		refs = refs[len(part):]
		cmds := make([]*redis.SliceCmd, len(part))
		pctx, cancel := within(ctx, budget)
		_, err := c.Pipelined(pctx, func(p redis.Pipeliner) error {
			for i, r := range part {
				cmds[i] = p.HMGet(pctx, callKey(r), "v", "d", "r")
			}
			return nil
		})
		cancel()
		if err != nil {
			return nil, err
		}
		for i, cmd := range cmds {
			sc, err := decodeCall(part[i], cmd.Val())
			if err != nil {
				return nil, err
			}
			out = append(out, sc)
		}
	}
	return out, nil
}

// invalidation is one entry of an invalidation message: a record (ref) or a
// thread written at version ver.
type invalidation struct {
	ver    int64
	ref    Ref
	thread string
}

// parseInvalidations splits a message of the write script: the writer's
// origin on the first line, then "<version> <member>" per line, the member
// a record's JSON ref or a thread's id as a JSON string. A message from self
// yields no entries.
func parseInvalidations(payload, self string) (origin string, out []invalidation) {
	origin, rest, ok := strings.Cut(payload, "\n")
	if !ok || origin == self {
		return origin, nil
	}
	for line := range strings.SplitSeq(rest, "\n") {
		vs, m, ok := strings.Cut(line, " ")
		ver, err := strconv.ParseInt(vs, 10, 64)
		if !ok || err != nil || m == "" {
			continue
		}
		inv := invalidation{ver: ver}
		if m[0] == '"' {
			if json.Unmarshal([]byte(m), &inv.thread) != nil || inv.thread == "" {
				continue
			}
		} else if inv.ref, err = parseMember(m); err != nil {
			continue
		}
		out = append(out, inv)
	}
	return origin, out
}

package state

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Loss detection. Redis may lose data without ever becoming unreachable:
// FLUSHALL, a restart without persistence, a failover to a replica that
// lagged, eviction under maxmemory. Reading an absent thread as "nothing
// pending" would then let held and pending calls through. Each Store
// therefore watches for a loss, by four signs:
//
//   - its marker key (aguard:replica:<id>), renewed every heartbeat, has
//     vanished: checked by the heartbeat, and in the pipeline of every
//     request's thread read (ReadThread), so a request never acts on a
//     flushed Redis unawares (cause "marker");
//   - Redis's run_id (INFO server) changed: a restart or a failover (cause
//     "restart"); on a cluster, a master's run_id seen at the last beat is
//     gone (a master restarted, or a replica took over);
//   - evicted_keys (INFO stats) of a master grew (cause "eviction");
//   - a record or thread this Store protects is absent (cause "missing").
//
// On a loss it logs "redis lost data" once, counts it in
// aguard_state_redis_data_lost_total{cause}, reports degraded (Ready) for
// at least 10 s and until its write-back is done, flags itself in
// aguard:recovering meanwhile (so other replicas treat absent threads the
// same way), and writes back everything it holds in memory — the protected
// set first, then the LRU — as restores: a record or thread is written only
// if Redis has no newer version (versions grow with time, so whatever
// another replica wrote after the loss wins), and is flagged restored
// until the next write. A held approval read back restored, or known only
// from memory during the loss, is one whose decision may have been lost:
// an answer to it is declined (ThreadView.Judge).

type lossCause string

const (
	causeMarker   lossCause = "marker"
	causeRestart  lossCause = "restart"
	causeEviction lossCause = "eviction"
	causeMissing  lossCause = "missing"
)

// lossState is what a Store knows of Redis's data losses. Guarded by mu.
type lossState struct {
	mu     sync.Mutex
	marker bool // the marker was written since Open: its absence now means a loss
	// masters is each master's run_id as last seen, with its evicted_keys
	// (-1 unknown); nil before the first beat. One entry on one Redis, one
	// per master on a cluster.
	masters  map[string]int64
	detected time.Time
	cause    lossCause
	suspect  bool // a protected entry was found absent: classify at the next beat
	// restoredAt is when the last write-back finished. An absence read
	// before then, or while a write-back runs, is no sign of a new loss:
	// that write-back restores what this replica holds.
	restoredAt time.Time
	pending    bool // a write-back is due
	writing    bool // a write-back is running
	written    int  // records and threads the last write-back wrote
	skipped    int  // … and found newer in Redis
	completed  bool // the last write-back finished
	primary    primaryState
}

// lost records a loss detected by cause. A loss detected while one is being
// written back makes the write-back run again once it is done.
func (s *Store) lost(cause lossCause) {
	if s.rdb == nil {
		return
	}
	l := &s.loss
	l.mu.Lock()
	fresh := !l.pending && !l.writing
	l.pending = true
	if fresh {
		l.detected, l.cause, l.completed = time.Now(), cause, false
	}
	l.mu.Unlock()
	if fresh {
		s.met.dataLost.WithLabelValues(string(cause)).Inc()
		s.log.Error("redis lost data", "cause", string(cause),
			"protected", s.protectedCount(), "detail", "writing back what this replica holds; absent threads are not read as empty meanwhile")
	}
	s.wakeMonitor()
}

// lostAfter is lost for an absence read at readAt: ignored when a
// write-back began since (it restored what this replica held).
func (s *Store) lostAfter(cause lossCause, readAt time.Time) {
	if s.restoredSince(readAt) {
		return
	}
	s.lost(cause)
}

func (s *Store) restoredSince(readAt time.Time) bool {
	s.loss.mu.Lock()
	defer s.loss.mu.Unlock()
	return s.loss.restoredSinceLocked(readAt)
}

func (l *lossState) restoredSinceLocked(readAt time.Time) bool {
	return l.writing || !l.restoredAt.IsZero() && readAt.Before(l.restoredAt)
}

// suspectLoss reports a protected entry found absent, in a read made at
// readAt, outside a request: the monitor beats at once, and records the
// loss under the cause the beat finds (a restart, a vanished marker), or as
// "missing" if it finds none.
func (s *Store) suspectLoss(readAt time.Time) {
	s.loss.mu.Lock()
	if !s.loss.restoredSinceLocked(readAt) {
		s.loss.suspect = true
	}
	s.loss.mu.Unlock()
	s.wakeMonitor()
}

func (s *Store) protectedCount() int {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	return s.prot.count()
}

// inLossWindow reports whether a loss detected by this Store is recent
// (Options.lossHold, 10 s) or not yet written back: absent threads and records are then
// not read as "nothing there".
func (s *Store) inLossWindow() bool {
	l := &s.loss
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.detected.IsZero() && (l.pending || l.writing || time.Since(l.detected) < s.opt.lossHold)
}

// markerSet reports whether the marker has been written since Open.
func (s *Store) markerSet() bool {
	s.loss.mu.Lock()
	defer s.loss.mu.Unlock()
	return s.loss.marker
}

// lossReason is Ready's reason while in the loss window, "" otherwise.
func (s *Store) lossReason() string {
	l := &s.loss
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.detected.IsZero() || !(l.pending || l.writing || time.Since(l.detected) < s.opt.lossHold) {
		return ""
	}
	ago := time.Since(l.detected).Round(time.Second)
	if l.completed && !l.pending {
		return fmt.Sprintf("redis lost data (%s) %s ago; written back %d records and threads (%d newer in redis)",
			l.cause, ago, l.written, l.skipped)
	}
	return fmt.Sprintf("redis lost data (%s) %s ago; writing back what this replica holds", l.cause, ago)
}

func (s *Store) wakeMonitor() {
	select {
	case s.check <- struct{}{}:
	default:
	}
}

// runMonitor is the goroutine that beats (marker, liveness, loss checks),
// keeps the runs registry in Redis, and writes back after a loss.
func (s *Store) runMonitor() {
	defer s.wg.Done()
	tick := time.NewTicker(s.opt.heartbeat)
	defer tick.Stop()
	for {
		if s.up.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
			s.beat(ctx)
			cancel()
		}
		s.loss.mu.Lock()
		due := s.loss.pending && !s.loss.writing
		s.loss.mu.Unlock()
		if due && s.up.Load() {
			s.writeBack()
		}
		s.slowRecovered()
		if s.up.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
			if err := s.markCaughtUp(ctx); err != nil && s.unreachable(ctx, err) {
				s.setDown(err)
			}
			cancel()
		}
		select {
		case <-s.stop:
			return
		case <-tick.C:
		case <-s.check:
		}
	}
}

// beat renews the marker and the liveness score, compares run_id and
// evicted_keys with what it saw last, and writes the runs registry if it
// needs it. One round trip (two when the registry is rewritten).
func (s *Store) beat(ctx context.Context) {
	var hb *redis.Cmd
	var info *redis.StringCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		hb = s.scripts.heartbeat.Eval(ctx, p, []string{s.ks.markerKey(s.origin), s.ks.replicasKey(), s.ks.runsKey(s.origin)},
			s.origin, s.opt.TTL.Milliseconds(), s.opt.TTL.Milliseconds())
		if !s.cluster {
			info = p.Info(ctx, "server", "stats", "replication")
		}
		return nil
	})
	var masters map[string]int64
	var repl replication
	switch {
	case err != nil:
	case info != nil:
		si := parseInfo(info.Val())
		masters = map[string]int64{si.runID: si.evicted}
		repl = si.repl
	default: // a cluster: every master's INFO, at once
		masters, err = s.masterInfo(ctx)
	}
	if err != nil {
		if s.unreachable(ctx, err) {
			s.setDown(err)
		}
		return
	}
	had, _ := hb.Int64()
	l := &s.loss
	l.mu.Lock()
	if info != nil && l.primary.replacedBy(repl) {
		// Sent before a new primary was seen, on a connection to the one it
		// replaced, closed since (fence.go): that server's INFO is no sign.
		l.mu.Unlock()
		return
	}
	var causes []lossCause
	var marking chan struct{}
	old := ""
	if restarted, evicted := compareMasters(l.masters, masters); restarted || evicted {
		if restarted {
			causes = append(causes, causeRestart)
			if !s.cluster && len(masters) == 1 { // a new primary no connection saw first
				for id := range masters {
					l.primary.barrier = id
				}
				l.primary.changes++
				old = l.primaryID()
				marking = make(chan struct{})
				l.primary.marking = marking
			}
		}
		if evicted {
			causes = append(causes, causeEviction)
		}
	}
	if had == 0 && l.marker {
		causes = append(causes, causeMarker)
	}
	if l.suspect && len(causes) == 0 {
		causes = append(causes, causeMissing)
	}
	l.suspect = false
	l.marker = true
	delete(masters, "")
	if len(masters) > 0 {
		l.masters = masters
		if !s.cluster {
			l.primary.setRepl(repl)
		}
	}
	l.mu.Unlock()
	if marking != nil { // as onConnect does; which connection reached the new primary is not known here
		s.fenceOld(old, connEnds{}, marking)
	}
	for _, c := range causes {
		s.lost(c)
	}
	if err := s.syncRuns(ctx); err != nil && s.unreachable(ctx, err) {
		s.setDown(err)
	}
}

// compareMasters compares the masters' run_ids and evicted_keys seen at two
// beats: restarted when a run_id seen before is gone (a restart, or a
// failover: a master that merely joined is no loss), evicted when a master
// seen both times evicted keys since.
func compareMasters(before, now map[string]int64) (restarted, evicted bool) {
	if len(before) == 0 || len(now) == 0 {
		return false, false
	}
	for id, ev := range before {
		cur, ok := now[id]
		switch {
		case id == "":
		case !ok:
			restarted = true
		case ev >= 0 && cur > ev:
			evicted = true
		}
	}
	return restarted, evicted
}

// serverInfo is what a Store reads of an INFO reply: the server's run_id,
// its evicted_keys (-1 when absent), and its replication (fence.go; empty
// when the reply lacks that section).
type serverInfo struct {
	runID   string
	evicted int64
	repl    replication
}

// parseInfo reads an INFO reply in one pass.
func parseInfo(info string) serverInfo {
	si := serverInfo{evicted: -1}
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "run_id":
			si.runID = v
		case "evicted_keys":
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				si.evicted = n
			}
		case "role":
			si.repl.role = v
		case "master_replid":
			si.repl.id = v
		case "master_replid2":
			if strings.Trim(v, "0") == "" {
				v = ""
			}
			si.repl.prev = v
		}
	}
	return si
}

// writeBackGroup bounds the records of one restore script call, and
// writeBackPipeline the calls per round trip.
const (
	writeBackGroup    = 64
	writeBackPipeline = 16
)

// writeBack restores what this Store holds in memory, the protected set
// first, then the LRU; see the comment at the top of this file. Queued
// writes are not restored: the queue writes them (it holds newer data).
func (s *Store) writeBack() {
	l := &s.loss
	l.mu.Lock()
	l.pending, l.writing, l.suspect = false, true, false
	l.mu.Unlock()
	written, skipped, err := s.restoreAll()
	l.mu.Lock()
	l.writing = false
	if err != nil {
		l.pending = true // again, once Redis answers
	} else {
		l.written, l.skipped, l.completed, l.restoredAt = written, skipped, !l.pending, time.Now()
	}
	l.mu.Unlock()
	if err != nil {
		s.log.Warn("writing back after a redis data loss failed; retrying when redis answers", "err", err)
		return
	}
	s.met.writeBack.WithLabelValues("written").Add(float64(written))
	s.met.writeBack.WithLabelValues("newer_in_redis").Add(float64(skipped))
	s.log.Info("written back after a redis data loss", "written", written, "newer_in_redis", skipped)
}

func (s *Store) restoreAll() (written, skipped int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, s.ks.recoveringKey(), s.origin, time.Now().UnixMilli())
		p.PExpire(ctx, s.ks.recoveringKey(), recoveringTTL)
		return nil
	})
	cancel()
	if err != nil {
		return 0, 0, err
	}
	s.runs.mu.Lock()
	s.runs.dirty = true
	s.runs.mu.Unlock()

	// A write acknowledged before the loss was seen may not be in memory
	// yet: wait for it, or the snapshot misses it (inflight.go).
	ctx, cancel = context.WithTimeout(context.Background(), drainTimeout)
	err = s.acks.settle(ctx)
	cancel()
	if err != nil {
		return 0, 0, err
	}
	groups := s.restoreGroups()
	for len(groups) > 0 {
		part := groups[:min(writeBackPipeline, len(groups))]
		groups = groups[len(part):]
		ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
		res, err := s.runWrites(ctx, "r", part)
		cancel()
		if err != nil {
			if s.unreachable(context.Background(), err) {
				s.setDown(err)
			}
			return written, skipped, err
		}
		for _, r := range res {
			for _, v := range append(r.vers, r.tver) {
				switch {
				case v == -2:
					skipped++
				case v > 0:
					written++
				}
			}
		}
	}
	// What Redis kept newer is not what memory holds: read it again before
	// serving it.
	s.epoch.Add(1)
	s.markAllStale()
	ctx, cancel = context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	if err := s.rdb.HDel(ctx, s.ks.recoveringKey(), s.origin).Err(); err != nil {
		return written, skipped, err
	}
	return written, skipped, nil
}

// restoreGroups snapshots memory as restore writes, grouped by thread, the
// protected threads first.
func (s *Store) restoreGroups() []*threadWrite {
	var calls []callWrite
	var threads []*Thread
	tver := map[*Thread]int64{}
	version := func(v int64) int64 { return max(v, 1) }
	s.cacheMu.Lock()
	for _, p := range s.prot.threads {
		threads = append(threads, p.e.t)
		tver[p.e.t] = version(p.e.ver)
	}
	for _, p := range s.prot.calls {
		if p.e != nil {
			calls = append(calls, callWrite{p.e.call, version(p.e.ver)})
		}
	}
	s.cacheMu.Unlock()
	for _, e := range s.threads.Values() {
		threads = append(threads, e.t)
		tver[e.t] = version(e.ver)
	}
	for _, e := range s.calls.Values() {
		calls = append(calls, callWrite{e.call, version(e.ver)})
	}
	calls = slices.DeleteFunc(calls, func(w callWrite) bool { return s.queued(callKey(RefOf(w.call))) != nil })
	threads = slices.DeleteFunc(threads, func(t *Thread) bool { return s.queued(threadKey(t.ID)) != nil })

	var out []*threadWrite
	for _, g := range groupWrites(calls, threads) {
		if g.t != nil {
			g.tver = tver[g.t]
		}
		for len(g.calls) > writeBackGroup {
			out = append(out, &threadWrite{thread: g.thread, calls: g.calls[:writeBackGroup]})
			g.calls = g.calls[writeBackGroup:]
		}
		out = append(out, g)
	}
	return out
}

// withdraw takes this replica out of the registry at Close: its marker and
// liveness score go; a runs registry still holding runs is left for another
// replica to claim at once.
func (s *Store) withdraw() {
	ctx, cancel := context.WithTimeout(context.Background(), closeFlushTimeout)
	defer cancel()
	s.runs.mu.Lock()
	left := len(s.runs.live) + len(s.runs.lost)
	s.runs.mu.Unlock()
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, s.ks.markerKey(s.origin))
		if left > 0 {
			p.ZAdd(ctx, s.ks.replicasKey(), redis.Z{Score: 0, Member: s.origin})
		} else {
			p.ZRem(ctx, s.ks.replicasKey(), s.origin)
			p.Del(ctx, s.ks.runsKey(s.origin))
		}
		p.HDel(ctx, s.ks.recoveringKey(), s.origin)
		if !s.cluster {
			p.HDel(ctx, s.ks.primaryKey(), s.origin)
		}
		return nil
	})
}

package state

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Primary changes. On one Redis (ModeSingle, ModeSentinel) a failover
// promotes a replica, and the old primary goes on taking writes until its
// clients move: what every aguard replica wrote there after the promotion
// is missing from the new primary, which answers with the older copies
// (Redis replication is asynchronous; see
// https://redis.io/docs/latest/operate/oss_and_stack/management/sentinel/#consistency-under-partitions).
// A thread read there can list a call as pending that was answered, or
// lack one that is pending. So:
//
//   - every new connection asks the server for its run_id before it serves
//     anything (onConnect): a run_id other than the primary's seen so far
//     is a loss (cause "restart"), counted at once, not at the next beat;
//   - the Store then closes every connection it has open but those known
//     to reach the new primary, and refuses a new one that still reaches
//     the old primary (fence.go), so that nothing it writes from then on
//     can land there;
//   - each replica writes back what it holds, as for any loss, and then
//     says in aguard:primary (replica id -> run_id) which primary it has
//     caught up with; it says so at each beat too, while it has no loss to
//     write back;
//   - until every replica live in the registry has caught up with the new
//     primary, a replica that saw the change reads no record or thread
//     there: its reads wait for them (awaitCaughtUp), at most catchUpWait
//     heartbeats, then fail with ErrUnavailable (errNotCaughtUp); a read
//     that was itself the first to reach the new primary is made again
//     (readFromPrimary).
//
// On a Redis Cluster each master's run_id is compared at each beat
// (loss.go), without this barrier.

// catchUpWait is how many heartbeats a read waits for the live replicas to
// catch up with a new primary: one to notice it, one to write back, one to
// spare.
const catchUpWait = 3

// catchUpPoll is the pause between two looks at the replicas' progress.
const catchUpPoll = 10 * time.Millisecond

// errNotCaughtUp marks a read refused while replicas write back what a
// primary change lost; it is not an outage.
var errNotCaughtUp = errors.New("redis changed primary and a replica has not written back what the old one took since")

// caughtUpScriptSrc lists the live replicas (KEYS[1], the replicas index,
// scored by Redis's clock) that have not caught up with the primary ARGV[1]
// in KEYS[2] (replica id -> run_id).
//
// ARGV: run_id, liveness ms.
const caughtUpScriptSrc = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], string.format('%d', now - tonumber(ARGV[2])), '+inf')
local behind = {}
for _, r in ipairs(live) do
  if redis.call('HGET', KEYS[2], r) ~= ARGV[1] then behind[#behind + 1] = r end
end
return behind
`

// primaryState is what a Store knows of the primary it writes to. Guarded
// by Store.loss.mu.
type primaryState struct {
	// barrier is the run_id of a new primary that this Store saw replace
	// the one before, until every live replica has caught up with it; ""
	// otherwise.
	barrier string
	// caughtUp is the run_id this Store last wrote to aguard:primary.
	caughtUp string
	// changes counts the new primaries seen, so that a read can tell
	// whether it reached one.
	changes uint64
	// queuedFor and queuedUpTo: the primary this Store waits to catch up
	// with for its queued writes, and the queue's sequence when it first
	// looked; it has caught up once every write queued up to then is in.
	queuedFor  string
	queuedUpTo uint64
	// repl is the replication of the primary seen last, and replSince when
	// this Store first saw that replication ID (fence.go).
	repl      replication
	replSince time.Time
	// marking, while this Store closes its connections and marks the old
	// primary replaced (fenceOld), is closed once it is done: commands
	// that reach the new primary meanwhile wait for it.
	marking chan struct{}
}

// setRepl records r as the primary's replication; l.mu is held.
func (p *primaryState) setRepl(r replication) {
	if r.id != p.repl.id {
		p.replSince = time.Now()
	}
	p.repl = r
}

// replacedBy reports whether a server whose replication is r is the
// primary that the one this Store took last replaced (fence.go), within
// replacedHold of taking it; l.mu is held.
func (p *primaryState) replacedBy(r replication) bool {
	return replaced(r, p.repl) && time.Since(p.replSince) < replacedHold
}

// primarySeen is what the server a connection reached is to a Store.
type primarySeen int

const (
	primarySame primarySeen = iota // the primary seen so far (or none seen yet)
	primaryNew                     // a new primary: a loss
	primaryOld                     // the primary a failover this Store saw replaced
)

// onConnect is the OnConnect hook of a Store's clients on one Redis: it
// reads the server's run_id and replication. A new primary (a run_id other
// than the primary's seen so far) is a loss: every connection open until
// then is closed but those known to reach the new primary, this one among
// them (fenceOld), and the loss is counted at once, not at the next beat.
// Behind a proxy or NAT, where this one cannot be told apart, it is closed
// too, as a busy one is. The primary a failover this Store saw replaced is
// refused (errOldPrimary). A server that does not answer INFO (a managed
// Redis may hide it) is taken as it is, and so is a sentinel (go-redis
// runs the hook on its connections to the sentinels too).
func (s *Store) onConnect(ctx context.Context, cn *redis.Conn) error {
	if s == nil || s.scripts == nil { // still opening
		return nil
	}
	info, err := cn.Info(ctx, "server", "replication").Result()
	if err != nil || strings.Contains(info, "redis_mode:sentinel") {
		return nil
	}
	si := parseInfo(info)
	id := si.runID
	seen, old, marking := s.primaryChanged(id, si.repl)
	switch seen {
	case primaryOld:
		return fmt.Errorf("state: run_id %s: %w", id, errOldPrimary)
	case primaryNew:
		s.fenceOld(old, endsOf(ctx, cn), marking)
		s.lost(causeRestart)
	case primarySame:
		if marking != nil {
			select {
			case <-marking:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// primaryChanged tells what the server with run_id id and replication r
// is: the primary seen so far, the one a failover replaced, or a new
// primary, one this Store did not see at its last beat. It then takes id
// as the primary, raises the barrier until the live replicas have caught
// up with it, and returns the run_id of the primary before, and the
// channel to close once the caller has fenced it (fenceOld). For the
// primary seen so far, marking is the channel to wait on first, if the
// Store is still fencing the one before.
func (s *Store) primaryChanged(id string, r replication) (seen primarySeen, old string, marking chan struct{}) {
	l := &s.loss
	l.mu.Lock()
	defer l.mu.Unlock()
	if id == "" || len(l.masters) == 0 {
		return primarySame, "", l.primary.marking
	}
	if _, ok := l.masters[id]; ok {
		return primarySame, "", l.primary.marking
	}
	if l.primary.replacedBy(r) {
		return primaryOld, "", nil
	}
	old = l.primaryID()
	l.masters = map[string]int64{id: -1}
	l.primary.setRepl(r)
	l.primary.barrier = id
	l.primary.changes++
	l.primary.marking = make(chan struct{})
	return primaryNew, old, l.primary.marking
}

// primaryID is the run_id of the primary this Store saw last ("" on a
// cluster, or before the first beat).
func (s *Store) primaryID() string {
	s.loss.mu.Lock()
	defer s.loss.mu.Unlock()
	return s.loss.primaryID()
}

// primaryChanges is how many new primaries this Store has seen.
func (s *Store) primaryChanges() uint64 {
	s.loss.mu.Lock()
	defer s.loss.mu.Unlock()
	return s.loss.primary.changes
}

// readFromPrimary runs read once every live replica has caught up with the
// primary, and again when the read itself reached a new one (its
// connection was the first to it): what it returned then may be what the
// failover lost.
func (s *Store) readFromPrimary(ctx context.Context, read func() error) error {
	for {
		if err := s.awaitCaughtUp(ctx); err != nil {
			return err
		}
		seen := s.primaryChanges()
		err := read()
		if err != nil || s.primaryChanges() == seen {
			return err
		}
	}
}

// primaryID is the run_id of the primary this Store saw last ("" on a
// cluster, or before the first beat).
func (l *lossState) primaryID() string {
	if len(l.masters) != 1 {
		return ""
	}
	for id := range l.masters {
		return id
	}
	return ""
}

// markCaughtUp records in aguard:primary that this Store has caught up with
// the primary it saw last, when it has no loss to write back, none of the
// writes it had queued when it first looked is still queued, and it has
// not said so yet. On a cluster it does nothing.
func (s *Store) markCaughtUp(ctx context.Context) error {
	if s.cluster {
		return nil
	}
	l := &s.loss
	l.mu.Lock()
	id := l.primaryID()
	due := id != "" && id != l.primary.caughtUp && !l.pending && !l.writing
	l.mu.Unlock()
	if !due {
		return nil
	}
	if s.waitQueued(id) {
		return nil
	}
	if err := s.rdb.HSet(ctx, s.ks.primaryKey(), s.origin, id).Err(); err != nil {
		return err
	}
	l.mu.Lock()
	l.primary.caughtUp = id
	l.primary.queuedFor, l.primary.queuedUpTo = "", 0
	l.mu.Unlock()
	return nil
}

// waitQueued reports whether writes this replica queued before it first
// looked (for primary id) are still queued: they are in neither primary,
// and it has caught up once they are in the new one. It sends them at once;
// the writer wakes the monitor as they are acknowledged. Writes queued since
// do not hold it back, however many keep coming.
func (s *Store) waitQueued(id string) bool {
	s.mu.Lock()
	seq := s.q.seq
	oldest, queued := s.q.front()
	s.mu.Unlock()
	l := &s.loss
	l.mu.Lock()
	if l.primary.queuedFor != id {
		l.primary.queuedFor, l.primary.queuedUpTo = id, seq
	}
	waiting := queued && oldest.seq <= l.primary.queuedUpTo
	l.mu.Unlock()
	if waiting {
		s.catchUpQueued.Store(true)
		s.rushWriter()
	}
	return waiting
}

// awaitCaughtUp returns once every live replica has caught up with the new
// primary this Store saw (at once when it saw none), or an error wrapping
// ErrUnavailable after catchUpWait heartbeats: what the primary holds may
// then lack what a replica wrote to the old one.
func (s *Store) awaitCaughtUp(ctx context.Context) error {
	l := &s.loss
	l.mu.Lock()
	id := l.primary.barrier
	l.mu.Unlock()
	if id == "" {
		return nil
	}
	deadline := time.Now().Add(catchUpWait * s.opt.heartbeat)
	for {
		s.wakeMonitor() // this Store's own write-back, if due
		behind, err := s.scripts.caughtUp.Run(ctx, s.rdb, []string{s.ks.replicasKey(), s.ks.primaryKey()},
			id, s.opt.liveness.Milliseconds()).StringSlice()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if len(behind) == 0 {
			l.mu.Lock()
			if l.primary.barrier == id {
				l.primary.barrier = ""
			}
			l.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %w: replicas %s", ErrUnavailable, errNotCaughtUp, strings.Join(behind, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(catchUpPoll):
		}
	}
}

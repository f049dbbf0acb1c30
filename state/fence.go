package state

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Fencing the old primary. A Store's connections reach a new primary one
// at a time: go-redis moves each client (rdb, bulk, each with its own
// Sentinel view and pools) when that client next dials or hears
// +switch-master, closing its own connections to the old address then
// (go-redis sentinel.go, masterReplicaDialer and onFailover); a dial that
// began before the switch still lands on the old primary; and a managed
// endpoint moves new connections only. The old primary takes writes until
// Sentinel reconfigures it as a replica, seconds later
// (https://redis.io/docs/latest/operate/oss_and_stack/management/sentinel/#consistency-under-partitions),
// and drops them then. A write sent there once this Store has written back
// what it holds is in neither the new primary nor the write-back, though
// its caller was told it landed: an answered call would stay EXECUTING.
//
// So the first command that reaches a new primary (onConnect, or the beat)
// closes the connections this Store has open, in every client and pool,
// before the loss it counts is written back, but for those it knows to
// reach the new primary (connSet.closeOthers): its own, found by its two
// ends as the server names them, and with Sentinel the others to the same
// address. go-redis drops a closed idle connection at its next health
// check and redials, and a command on a closed busy one fails, to be
// retried or queued (writes sent before the close are in flight, and the
// write-back waits for them: inflight.go). A connection that still
// reaches the old primary after that is refused before it serves anything
// (onConnect, errOldPrimary), for up to replacedHold: its replication ID
// is the one the new primary took over as its previous one
// (master_replid2; see
// https://redis.io/docs/latest/operate/oss_and_stack/management/replication/#replication-id-explained).
// No write pays for this: the check runs once per new connection, and the
// INFO it reads is the one the run_id comes from.
//
// Other replicas hear of the failover later, each go-redis client from the
// one sentinel it subscribed to, and read the old primary meanwhile; what
// this Store writes to the new one is missing there (a call it has just
// left pending). So before anything it writes reaches the new primary, it
// marks the old one replaced (markReplaced: aguard:replaced, its own
// run_id), and a Store that finds its primary so marked in a thread read
// refuses the read (readViewOnce) until its client moves.

// replacedHold bounds how long after taking a new primary a Store refuses
// the one it replaced. Sentinel reconfigures the old primary as a replica
// within seconds (it then shares the new one's replication ID); one that
// still claims the old history after that is taken as a new primary (a
// loss, written back), so that a Store that missed a second failover (back
// to a primary Sentinel had not reconfigured yet) does not refuse every
// server for good.
const replacedHold = time.Minute

// markTimeout bounds what a Store spends marking the old primary replaced,
// while its commands on the new primary wait.
const markTimeout = 500 * time.Millisecond

// errReplaced refuses a read from a primary that another replica saw a
// failover replace (marked in aguard:replaced).
var errReplaced = errors.New("another aguard replica saw a failover replace this redis primary; this one has not reached the new primary yet")

// errOldPrimary refuses a connection to the primary that a failover this
// Store has seen replaced: what it takes there is lost once it follows the
// new one.
var errOldPrimary = errors.New("redis server is the primary a failover replaced; it has not followed the new one yet")

// connSet is the Redis connections a Store's clients have open, and the
// addresses they reached lately.
type connSet struct {
	// byAddr says that a connection's remote address names the server it
	// reaches, as with Sentinel: go-redis dials the address a sentinel
	// names, and closes its own connections to a replaced primary by that
	// address (go-redis sentinel.go, onFailover). Behind one endpoint
	// (ModeSingle) it may not: an address that moves with the primary, or
	// a load balancer that keeps each connection on the server it chose,
	// reaches the old primary and the new one alike.
	byAddr bool

	mu    sync.Mutex
	open  map[*trackedConn]struct{}
	addrs map[string]time.Time // remote address -> when a connection to it was last made
}

// maxAddrs bounds the addresses a connSet remembers (the primary, and the
// primaries before it).
const maxAddrs = 8

// track adds c to the set until it is closed, and returns the connection to
// hand go-redis in its place: c's own methods, and SyscallConn when c has
// it (go-redis's health check of idle connections reads the socket
// through it).
func (cs *connSet) track(c net.Conn) net.Conn {
	t := &trackedConn{Conn: c, set: cs}
	cs.mu.Lock()
	if cs.open == nil {
		cs.open, cs.addrs = map[*trackedConn]struct{}{}, map[string]time.Time{}
	}
	cs.open[t] = struct{}{}
	if a := c.RemoteAddr(); a != nil {
		cs.addrs[a.String()] = time.Now()
		if len(cs.addrs) > maxAddrs {
			oldest := ""
			for k, at := range cs.addrs {
				if oldest == "" || at.Before(cs.addrs[oldest]) {
					oldest = k
				}
			}
			delete(cs.addrs, oldest)
		}
	}
	cs.mu.Unlock()
	if sc, ok := c.(syscall.Conn); ok {
		return &trackedSysConn{trackedConn: t, sc: sc}
	}
	return t
}

// connEnds names a connection by its two ends as the server sees them
// (CLIENT INFO's addr and laddr): the client's address and its own.
type connEnds struct{ client, server string }

// ends is t's two ends as this side sees them ("" for one it lacks).
func (t *trackedConn) ends() connEnds {
	var e connEnds
	if a := t.LocalAddr(); a != nil {
		e.client = a.String()
	}
	if a := t.RemoteAddr(); a != nil {
		e.server = a.String()
	}
	return e
}

// closeOthers closes every connection in the set (none in a nil set) but
// the one whose ends are keep and, when the set goes by address (byAddr),
// the others to the same server address, and returns how many it closed.
// When no connection has keep's ends (keep is zero, or a proxy or NAT
// stands between, so that the two sides name the ends differently), it
// closes them all.
func (cs *connSet) closeOthers(keep connEnds) int {
	if cs == nil {
		return 0
	}
	cs.mu.Lock()
	found := false
	if keep.client != "" && keep.server != "" {
		for t := range cs.open {
			if t.ends() == keep {
				found = true
				break
			}
		}
	}
	var closing []*trackedConn
	for t := range cs.open {
		if e := t.ends(); found && (e == keep || cs.byAddr && e.server == keep.server) {
			continue
		}
		closing = append(closing, t)
		delete(cs.open, t)
	}
	cs.mu.Unlock()
	for _, t := range closing {
		_ = t.Conn.Close()
	}
	return len(closing)
}

// recentAddrs returns the remote addresses connections reached lately,
// the latest first (none in a nil set).
func (cs *connSet) recentAddrs() []string {
	if cs == nil {
		return nil
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	out := make([]string, 0, len(cs.addrs))
	for a := range cs.addrs {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b string) int { return cs.addrs[b].Compare(cs.addrs[a]) })
	return out
}

func (cs *connSet) remove(t *trackedConn) {
	cs.mu.Lock()
	delete(cs.open, t)
	cs.mu.Unlock()
}

// trackedConn is a connection in a connSet: it leaves the set when closed.
type trackedConn struct {
	net.Conn
	set *connSet
}

func (t *trackedConn) Close() error {
	t.set.remove(t)
	return t.Conn.Close()
}

// NetConn returns the connection t wraps, as crypto/tls.Conn does, for
// go-redis's look under wrappers.
func (t *trackedConn) NetConn() net.Conn { return t.Conn }

// trackedSysConn is a trackedConn whose connection has a file descriptor.
type trackedSysConn struct {
	*trackedConn
	sc syscall.Conn
}

func (t *trackedSysConn) SyscallConn() (syscall.RawConn, error) { return t.sc.SyscallConn() }

// replication is what an INFO reply's replication section says of a
// server: its role (master, slave), its replication ID, and the one it
// took over when it was promoted (master_replid2; all zeros when none).
type replication struct {
	role, id, prev string
}

// replaced reports whether a server whose replication is old has been
// replaced by the primary whose replication is cur: old is still a
// primary, with the replication ID cur took over when it was promoted.
func replaced(old, cur replication) bool {
	return old.role == "master" && old.id != "" && old.id == cur.prev
}

// markReplaced writes in aguard:replaced, on the primary whose run_id is
// old if this Store can still reach it, that it was replaced: a replica
// whose Sentinel has not named the new primary yet reads nothing there
// from then on (readViewOnce), since what this Store writes next goes to
// the new primary. The old primary's addresses are the ones the Store's
// connections reached lately; behind a proxy or a managed endpoint, which
// reaches the new primary now, there is none to mark. The key lives as
// long as the Store refuses the old primary (replacedHold), and is gone
// when the old primary follows the new one (its data is then the new
// one's).
func (s *Store) markReplaced(old string) {
	if old == "" || s.serverOpts == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), markTimeout)
	defer cancel()
	for _, addr := range s.conns.recentAddrs() {
		if ctx.Err() != nil {
			return
		}
		if s.markReplacedAt(ctx, addr, old) {
			s.log.Info("marked the redis primary a failover replaced, so that replicas still on it read nothing there", "addr", addr, "run_id", old)
			return
		}
	}
}

// markReplacedAt marks the server at addr replaced if its run_id is old.
func (s *Store) markReplacedAt(ctx context.Context, addr, old string) bool {
	c := redis.NewClient(s.serverOpts(addr))
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return false
	}
	if parseInfo(info).runID != old {
		return false
	}
	return c.Set(ctx, s.ks.replacedKey(), old, replacedHold).Err() == nil
}

// fenceOld closes every connection this Store has open but the one whose
// ends are cur, the first to reach the new primary (zero when none is
// known), and with Sentinel the others to the new primary's address
// (connSet.closeOthers); it then marks the primary whose run_id is old
// replaced, and lets the commands waiting on marking (those that reached
// the new primary meanwhile) go on. A connection to the new primary is
// spared because a command on a closed one fails without a retry (go-redis
// error.go, shouldRetry), and a Store whose commands fail serves from
// memory, which lags what other replicas write.
func (s *Store) fenceOld(old string, cur connEnds, marking chan struct{}) {
	s.conns.closeOthers(cur)
	s.markReplaced(old)
	l := &s.loss
	l.mu.Lock()
	if l.primary.marking == marking {
		l.primary.marking = nil
	}
	l.mu.Unlock()
	close(marking)
}

// replacedHere reports whether vals, the MGET of aguard:replaced on the
// server a read reached, marks that server replaced: it names the primary
// this Store takes for the current one.
func (s *Store) replacedHere(vals []any) bool {
	if len(vals) != 1 {
		return false
	}
	id, ok := vals[0].(string)
	return ok && id != "" && id == s.primaryID()
}

// endsOf names cn by its two ends as the server sees them (CLIENT INFO
// addr and laddr); zero if the server does not say.
func endsOf(ctx context.Context, cn *redis.Conn) connEnds {
	info, err := cn.Do(ctx, "CLIENT", "INFO").Text()
	if err != nil {
		return connEnds{}
	}
	var e connEnds
	for _, f := range strings.Fields(info) {
		if v, ok := strings.CutPrefix(f, "addr="); ok {
			e.client = v
		} else if v, ok := strings.CutPrefix(f, "laddr="); ok {
			e.server = v
		}
	}
	if e.client == "" || e.server == "" {
		return connEnds{}
	}
	return e
}

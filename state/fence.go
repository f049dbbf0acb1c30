package state

import (
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"
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
// closes every connection this Store has open, in every client and pool
// (connSet.closeAll), before the loss it counts is written back: go-redis
// drops a closed idle connection at its next health check and redials, and
// a command on a closed busy one fails, to be retried or queued (writes
// sent before the close are in flight, and the write-back waits for them:
// inflight.go). A connection that still reaches the old primary after that
// is refused before it serves anything (onConnect, errOldPrimary), for up
// to replacedHold: its replication ID is the one the new primary took over
// as its previous one (master_replid2; see
// https://redis.io/docs/latest/operate/oss_and_stack/management/replication/#replication-id-explained).
// No write pays for this: the check runs once per new connection, and the
// INFO it reads is the one the run_id comes from.

// replacedHold bounds how long after taking a new primary a Store refuses
// the one it replaced. Sentinel reconfigures the old primary as a replica
// within seconds (it then shares the new one's replication ID); one that
// still claims the old history after that is taken as a new primary (a
// loss, written back), so that a Store that missed a second failover (back
// to a primary Sentinel had not reconfigured yet) does not refuse every
// server for good.
const replacedHold = time.Minute

// errOldPrimary refuses a connection to the primary that a failover this
// Store has seen replaced: what it takes there is lost once it follows the
// new one.
var errOldPrimary = errors.New("redis server is the primary a failover replaced; it has not followed the new one yet")

// connSet is the Redis connections a Store's clients have open.
type connSet struct {
	mu   sync.Mutex
	open map[*trackedConn]struct{}
}

// track adds c to the set until it is closed, and returns the connection to
// hand go-redis in its place: c's own methods, and SyscallConn when c has
// it (go-redis's health check of idle connections reads the socket
// through it).
func (cs *connSet) track(c net.Conn) net.Conn {
	t := &trackedConn{Conn: c, set: cs}
	cs.mu.Lock()
	if cs.open == nil {
		cs.open = map[*trackedConn]struct{}{}
	}
	cs.open[t] = struct{}{}
	cs.mu.Unlock()
	if sc, ok := c.(syscall.Conn); ok {
		return &trackedSysConn{trackedConn: t, sc: sc}
	}
	return t
}

// closeAll closes every connection in the set (none in a nil set), and
// returns how many.
func (cs *connSet) closeAll() int {
	if cs == nil {
		return 0
	}
	cs.mu.Lock()
	open := cs.open
	cs.open = nil
	cs.mu.Unlock()
	for t := range open {
		_ = t.Conn.Close()
	}
	return len(open)
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

// parseReplication reads role, master_replid and master_replid2 from an
// INFO reply (empty when absent).
func parseReplication(info string) replication {
	var r replication
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "role:"); ok {
			r.role = v
		} else if v, ok := strings.CutPrefix(line, "master_replid:"); ok {
			r.id = v
		} else if v, ok := strings.CutPrefix(line, "master_replid2:"); ok {
			if strings.Trim(v, "0") == "" {
				v = ""
			}
			r.prev = v
		}
	}
	return r
}

// replaced reports whether a server whose replication is old has been
// replaced by the primary whose replication is cur: old is still a
// primary, with the replication ID cur took over when it was promoted.
func replaced(old, cur replication) bool {
	return old.role == "master" && old.id != "" && old.id == cur.prev
}

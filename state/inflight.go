package state

import (
	"context"
	"fmt"
	"sync"
)

// Writes on their way to memory. A write's acknowledgement reaches memory
// some time after Redis sent it: the reply is read, then the caller puts
// the versions Redis gave into the memory entries (and the writer takes
// acknowledged items off the queue). A write-back after a loss snapshots
// memory (restoreGroups). Were the snapshot taken in between, it would hold
// the copy from before the write, or skip the item as still queued; and
// when the server that acknowledged the write was a primary just replaced
// by a failover, the write would then be in neither the new primary nor
// the write-back, though the caller was told it landed.
//
// So every write to Redis holds a ticket (inflight.begin) from before it
// is sent until its acknowledgement is in memory (inflight.end), and a
// write-back waits for the tickets taken before it began (settle). Writes
// begun after that are not waited for: once a loss is detected they reach
// the server that is now the primary (the first command to reach a new
// primary, which detects the change, closes every connection this Store
// has open but those known to reach the new primary before the loss is
// written back, and a connection that still reaches the old primary
// afterwards is refused; see fence.go).

// inflight counts the writes between their send and the moment their
// acknowledgement is in memory, by the settle round they began in.
type inflight struct {
	mu      sync.Mutex
	round   uint64
	open    map[uint64]int // round -> writes begun in it and not ended
	changed chan struct{}  // closed and replaced when a round's count drops to zero
	waiters int            // settles waiting
}

// begin takes a ticket for a write about to be sent. The caller passes the
// result to end once the acknowledgement (or the failure) is in memory.
func (f *inflight) begin() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.open == nil {
		f.open = map[uint64]int{}
	}
	f.open[f.round]++
	return f.round
}

// end gives back a ticket taken in round.
func (f *inflight) end(round uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.open[round]--; f.open[round] > 0 {
		return
	}
	delete(f.open, round)
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
}

// settle waits until every write begun before the call has its
// acknowledgement in memory, or ctx ends.
func (f *inflight) settle(ctx context.Context) error {
	f.mu.Lock()
	upTo := f.round
	f.round++
	f.waiters++
	defer func() {
		f.mu.Lock()
		f.waiters--
		f.mu.Unlock()
	}()
	for {
		n := 0
		for r, c := range f.open {
			if r <= upTo {
				n += c
			}
		}
		if n == 0 {
			f.mu.Unlock()
			return nil
		}
		if f.changed == nil {
			f.changed = make(chan struct{})
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d write(s) sent before the write-back to reach memory: %w", n, ctx.Err())
		}
		f.mu.Lock()
	}
}

// settling reports whether a settle is waiting for writes (for tests).
func (f *inflight) settling() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiters > 0
}

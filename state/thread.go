package state

import (
	"fmt"
	"slices"
	"time"
)

// Thread is what aguard must remember about a thread between runs, so that
// whichever replica serves the thread's next run can hold the consumer to
// the last run's outcome (the request-side 409s of the README).
type Thread struct {
	// ID is the AG-UI threadId.
	ID string `json:"id"`
	// PendingCalls are the ids of the frontend calls the last run left
	// pending, in start order.
	PendingCalls []string `json:"pendingCalls,omitempty"`
	// Approvals are those of PendingCalls that were held for approval when
	// the run finished. An answer to one of them whose record cannot be
	// found is declined: the approval is lost, not granted.
	Approvals []string `json:"approvals,omitempty"`
	// LastRunID is the runId of the thread's last run.
	LastRunID string `json:"lastRunId,omitempty"`
	// Interrupts are the open interrupts of the last run, if it ended
	// interrupted.
	Interrupts []Interrupt `json:"interrupts,omitempty"`
	// UpdatedAt is when the thread was last written; the Store sets it.
	UpdatedAt time.Time `json:"updatedAt"`
}

// Interrupt is an open interrupt of a run, which the next run's resume must
// cover.
type Interrupt struct {
	// ID is the interrupt id.
	ID string `json:"id"`
	// ExpiresAt is the interrupt's expiry as the producer sent it (an
	// RFC 3339 timestamp), if any.
	ExpiresAt string `json:"expiresAt,omitempty"`
}

// clone returns a deep copy of t.
func (t *Thread) clone() *Thread {
	n := *t
	n.PendingCalls = slices.Clone(t.PendingCalls)
	n.Approvals = slices.Clone(t.Approvals)
	n.Interrupts = slices.Clone(t.Interrupts)
	return &n
}

// normalize validates t (a private copy) and stamps UpdatedAt.
func (t *Thread) normalize(now time.Time) error {
	if t.ID == "" {
		return fmt.Errorf("state: %w: thread with an empty id", errInvalid)
	}
	t.UpdatedAt = now.UTC()
	return nil
}

// protects reports whether t holds the consumer to something: pending calls,
// approvals or open interrupts. Such a thread is never evicted from memory.
func (t *Thread) protects() bool {
	return len(t.PendingCalls) > 0 || len(t.Approvals) > 0 || len(t.Interrupts) > 0
}

// size estimates the bytes t holds in memory.
func (t *Thread) size() int64 {
	n := int64(256 + len(t.ID) + len(t.LastRunID))
	for _, id := range t.PendingCalls {
		n += int64(16 + len(id))
	}
	for _, id := range t.Approvals {
		n += int64(16 + len(id))
	}
	for _, it := range t.Interrupts {
		n += int64(32 + len(it.ID) + len(it.ExpiresAt))
	}
	return n
}

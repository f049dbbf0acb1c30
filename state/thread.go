package state

import (
	"fmt"
	"slices"
	"time"
)

// Thread is what aguard must remember about a thread between runs, so that
// whichever replica serves the thread's next run can hold the consumer to
// the last run's outcome (the 409s of design §3).
type Thread struct {
	// ID is the AG-UI threadId.
	ID string `json:"id"`
	// PendingCalls are the ids of the frontend calls the last run left
	// pending, in start order.
	PendingCalls []string `json:"pendingCalls,omitempty"`
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

package policy

import (
	"context"
	"fmt"

	"github.com/aguard/aguard/internal/jsonedit"
)

// Inspecting a call's arguments — validating them against the tool's
// schema, converting them to the policy's input, evaluating a policy that
// reads them — costs memory for each JSON value they hold, whatever their
// length in bytes: measured, about 90 bytes a value for an array of numbers
// and up to about 280 for an array of small objects, so that 1 MiB of
// [0,0,…] (512 Ki values) took 48 MB at its peak. Every stream decides its
// own calls, so without a shared bound a lying agent's streams could make
// that many times over before the memory budget, which only turns new
// streams away, saw it.
const (
	// MaxInspectedValues bounds the JSON values of the arguments inspected
	// at once, process-wide, by calls of at least MinQueuedValues: about
	// 25 MB at the bound for numbers, 75 MB for the costliest shape
	// measured. A call of more values than the bound is inspected alone.
	MaxInspectedValues = 1 << 18
	// MinQueuedValues is the size from which a call's arguments wait their
	// turn: under it (about 1 MB at the costliest), the inspection does not
	// wait, so that a small call is never held up behind a large one.
	MinQueuedValues = 1 << 12
)

// Reserve waits until the arguments args (JSON text) may be inspected, and
// returns the function that ends the inspection: the caller validates and
// decides between the two, and calls release once, when done. Arguments of
// fewer than MinQueuedValues values never wait; larger ones wait, in the
// order they came, until the values being inspected leave room for theirs
// within MaxInspectedValues. It returns ctx's error, and no release, when ctx
// ends first: the call cannot be inspected, and so is not to be allowed.
func (e *Engine) Reserve(ctx context.Context, args []byte) (release func(), err error) {
	if len(args) < 2*MinQueuedValues || e.inspecting == nil {
		// A value takes two bytes at least, with its separator or its
		// container's closing bracket: too short to hold MinQueuedValues.
		return func() {}, nil
	}
	n := int64(min(jsonedit.Values(args), MaxInspectedValues))
	if n < MinQueuedValues {
		return func() {}, nil
	}
	if !e.inspecting.TryAcquire(n) {
		e.met.waiting(1)
		err := e.inspecting.Acquire(ctx, n)
		e.met.waiting(-1)
		if err != nil {
			return nil, fmt.Errorf("policy: waiting to inspect %d JSON values of arguments: %w", n, err)
		}
	}
	return func() { e.inspecting.Release(n) }, nil
}

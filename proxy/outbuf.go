package proxy

import "sync"

// A stream's pending output (stream.out) is its own small buffer while
// events come one at a time, as they do from a paced agent. A batch larger
// than that — a backlog read at once, every event of it framed before one
// write — is gathered in a buffer of pooledOut bytes taken from outPool,
// which goes back as soon as the batch is written: a stream that streamed
// a fast answer and then waits for a person or a long tool holds no more
// than one that never had a burst.
const (
	// keepOut is the most pending-output room a stream keeps between
	// writes.
	keepOut = 4 << 10
	// pooledOut is the size of the pooled buffers of large batches.
	pooledOut = 32 << 10
	// frameExtra is what framing adds to an event's data on one line:
	// "data: " and the blank line.
	frameExtra = len("data: \n\n")
)

var outPool = sync.Pool{New: func() any { b := make([]byte, 0, pooledOut); return &b }}

// roomLocked makes room in the pending output for n more bytes: past the
// stream's own buffer, the batch moves to a pooled one (once per batch).
// A batch too large for that grows as any slice does, and the buffer is
// dropped once written. wmu is held.
func (s *stream) roomLocked(n int) {
	need := len(s.out) + n
	if need <= cap(s.out) || s.pooled != nil || need > pooledOut {
		return
	}
	b := outPool.Get().(*[]byte)
	s.own, s.pooled = s.out, b
	s.out = append((*b)[:0], s.out...)
}

// releaseOutLocked gives back what a written batch took: the pooled
// buffer, or room past keepOut. wmu is held and the pending output is
// empty.
func (s *stream) releaseOutLocked() {
	switch {
	case s.pooled != nil:
		*s.pooled = (*s.pooled)[:0]
		outPool.Put(s.pooled)
		s.out, s.own, s.pooled = s.own[:chunkHead], nil, nil
	case cap(s.out) > keepOut:
		s.out = make([]byte, chunkHead, 512)
	}
}

package logging

import (
	"io"
	"sync"
	"time"
)

// Batching: a line is not written the moment it is logged but gathered
// with the lines logged after it, and the batch goes out in one write at
// most BatchDelay later. A write to stderr (a file, a pipe) is a system
// call that Go's runtime hands its processor away around and that wakes
// its monitor thread when the process was idle; under the tool-call load,
// where aguard logs a few lines per run, log writes caused four wake-ups
// of the monitor in five (bench/README.md, "Log lines in batches"). nginx
// offers the same for its access log (buffer=, flush=); Envoy batches its
// access logs by default.
const (
	// BatchDelay bounds how long a line waits before it is written.
	BatchDelay = 100 * time.Millisecond
	// BatchBytes bounds the lines waiting: the line that would take them
	// past it is written at once, with them, by the goroutine logging it
	// (which waits for that write, as it would without batching).
	BatchBytes = 256 << 10
)

// BatchWriter gathers what is written to it for one write to the
// underlying writer at most BatchDelay later (see above). It keeps the
// order of the writes; it never drops one. Write returns the underlying
// writer's error only when it wrote itself (past BatchBytes, or after
// Close); slog drops what it returns anyway, so every such error is also
// kept for the next Flush or Close to return.
type BatchWriter struct {
	w     io.Writer
	delay time.Duration
	max   int
	timer *time.Timer

	out sync.Mutex // held while writing to w: keeps batches in order

	mu      sync.Mutex
	pending []byte
	spare   []byte
	armed   bool // the timer will flush pending
	closed  bool // Close was called: writes go straight to w
	err     error
}

// Batch returns a BatchWriter writing to w with BatchDelay and BatchBytes.
func Batch(w io.Writer) *BatchWriter {
	return newBatch(w, BatchDelay, BatchBytes)
}

func newBatch(w io.Writer, delay time.Duration, max int) *BatchWriter {
	b := &BatchWriter{w: w, delay: delay, max: max}
	b.timer = time.AfterFunc(time.Hour, func() { b.Flush() })
	b.timer.Stop()
	return b
}

// Write adds p to the batch. p is copied: the caller may reuse it.
func (b *BatchWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	if b.closed || len(b.pending)+len(p) > b.max {
		b.mu.Unlock()
		// Written by this goroutine, after what is pending.
		b.out.Lock()
		defer b.out.Unlock()
		b.mu.Lock()
		batch := append(b.take(), p...)
		b.mu.Unlock()
		err := b.write(batch)
		return len(p), err
	}
	b.pending = append(b.pending, p...)
	if !b.armed {
		b.armed = true
		b.timer.Reset(b.delay)
	}
	b.mu.Unlock()
	return len(p), nil
}

// take returns the pending lines and leaves an empty batch. b.mu is held.
func (b *BatchWriter) take() []byte {
	batch := b.pending
	b.pending, b.spare = b.spare[:0], nil
	b.armed = false
	return batch
}

// write writes batch to w and keeps its buffer for the next batch (unless
// it grew past the bound). b.out is held.
func (b *BatchWriter) write(batch []byte) error {
	if len(batch) == 0 {
		return nil
	}
	_, err := b.w.Write(batch)
	b.mu.Lock()
	if err != nil && b.err == nil {
		b.err = err
	}
	if cap(batch) <= b.max && b.spare == nil {
		b.spare = batch[:0]
	}
	b.mu.Unlock()
	return err
}

// Flush writes what is pending now. It returns the first error the
// underlying writer returned since the last Flush, if any.
func (b *BatchWriter) Flush() error {
	b.out.Lock()
	defer b.out.Unlock()
	b.mu.Lock()
	batch := b.take()
	b.mu.Unlock()
	b.write(batch)
	b.mu.Lock()
	err := b.err
	b.err = nil
	b.mu.Unlock()
	return err
}

// Close flushes what is pending; later writes go to the underlying writer
// at once.
func (b *BatchWriter) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.timer.Stop()
	return b.Flush()
}

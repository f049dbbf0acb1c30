// Package sse frames AG-UI events on the wire.
//
// Reading: Events turns an agent's text/event-stream body into the data of each
// event, as soon as the event's blank line arrives, using go-sse's incremental
// parser. It accepts what the SSE specification accepts (LF, CRLF or CR line
// ends, "data:" with or without a space, data spread over several lines joined
// with "\n", comments, "event:", "id:" and "retry:" lines, which AG-UI consumers
// ignore and aguard drops). An incomplete final event at end of input is never
// dispatched.
//
// Writing: WriteFrame writes one event as "data: <json>\n\n" with LF only, the
// only framing aguard emits; WritePing writes the ": ping" keep-alive comment.
//
// Package sse knows nothing of AG-UI: it neither parses nor checks the JSON it
// carries (see package agui).
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"iter"
	"unsafe"

	gosse "github.com/tmaxmax/go-sse"
)

// ErrEventTooLarge reports an event larger than the configured maximum. The
// stream cannot be resumed after it.
var ErrEventTooLarge = errors.New("sse: event larger than the limit")

// Events yields the data of each event of r that carries data, in order.
// Events without data (comment-only or id-only blocks) are skipped.
//
// The yielded slice is read-only and stays valid after the next iteration: each
// event's data is a fresh buffer owned by the caller.
//
// Iteration ends at the end of r with no error, or with one error: a read error
// of r (wrapped), or ErrEventTooLarge (wrapped, naming the limit) when an event
// exceeds maxEvent bytes (maxEvent <= 0 means go-sse's default of 64 KiB).
func Events(r io.Reader, maxEvent int) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		cfg := &gosse.ReadConfig{MaxEventSize: maxEvent}
		for ev, err := range gosse.Read(r, cfg) {
			if err != nil {
				if errors.Is(err, bufio.ErrTooLong) {
					err = fmt.Errorf("%w (%d bytes)", ErrEventTooLarge, maxEvent)
				} else {
					err = fmt.Errorf("sse: reading stream: %w", err)
				}
				yield(nil, err)
				return
			}
			if ev.Data == "" {
				continue
			}
			// go-sse builds a new string for every event and never touches it
			// again, so viewing it as bytes shares nothing mutable.
			data := unsafe.Slice(unsafe.StringData(ev.Data), len(ev.Data))
			if !yield(data, nil) {
				return
			}
		}
	}
}

// AppendFrame appends one event frame, "data: " + data + "\n\n", to dst.
//
// Compact JSON is always one line. Anything else (aguard forwards a malformed
// event as it came in monitor mode) is written as one "data:" line per line
// of data, split at CR, LF or CRLF, so that whatever the bytes hold the frame
// stays one event: a consumer joins the lines back with LF, and no line
// ending inside data can end the event or start another.
func AppendFrame(dst, data []byte) []byte {
	for {
		i := lineEnd(data)
		if i < 0 {
			break
		}
		dst = append(dst, "data: "...)
		dst = append(dst, data[:i]...)
		dst = append(dst, '\n')
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
	dst = append(dst, "data: "...)
	dst = append(dst, data...)
	return append(dst, "\n\n"...)
}

// lineEnd is the index of the first CR or LF in data, or -1. Two IndexByte
// scans (vectorised) are much faster than IndexAny on the one-line data,
// compact JSON, that nearly every frame holds.
func lineEnd(data []byte) int {
	lf := bytes.IndexByte(data, '\n')
	before := data
	if lf >= 0 {
		before = data[:lf]
	}
	if cr := bytes.IndexByte(before, '\r'); cr >= 0 {
		return cr
	}
	return lf
}

// WriteFrame writes one event frame (see AppendFrame) to w. It does not
// flush.
func WriteFrame(w *bufio.Writer, data []byte) error {
	_, err := w.Write(AppendFrame(w.AvailableBuffer(), data))
	return err
}

// Ping is the keep-alive comment frame written in silence.
const Ping = ": ping\n\n"

// WritePing writes the keep-alive comment frame to w. It does not flush.
func WritePing(w *bufio.Writer) error {
	_, err := w.WriteString(Ping)
	return err
}

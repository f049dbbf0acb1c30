package proxy

import (
	"bytes"
	"net"
	"strconv"
	"time"
)

// bigFrame is the event size from which a frame is written from the event's
// own bytes rather than copied into the pending output: an event of N bytes
// then costs the stream no second N.
const bigFrame = 64 << 10

// writeBigFrameLocked writes the frame of the event data to the consumer:
// the pending output, then "data: " + data + "\n\n" in one gathered write,
// in a chunk of its own. It reports false, writing nothing, when data holds
// a line end (only a malformed event forwarded in monitor mode does), which
// the general framing splits into lines. wmu is held.
func (s *stream) writeBigFrameLocked(data []byte) (bool, error) {
	if bytes.IndexByte(data, '\n') >= 0 || bytes.IndexByte(data, '\r') >= 0 {
		return false, nil
	}
	if err := s.flushLocked(); err != nil || s.finished {
		return true, err
	}
	n := len("data: ") + len(data) + len("\n\n")
	head := make([]byte, 0, 32)
	tail := []byte("\n\n")
	if s.chunk {
		head = append(strconv.AppendInt(head, int64(n), 16), '\r', '\n')
		tail = append(tail, '\r', '\n')
	}
	head = append(head, "data: "...)
	now := time.Now()
	s.conn.SetWriteDeadline(now.Add(stalledConsumer))
	s.lastDeadline = now
	bufs := net.Buffers{head, data, tail}
	_, err := bufs.WriteTo(s.conn)
	s.c.bytesOut += float64(n)
	s.lastWrite = now
	return true, err
}

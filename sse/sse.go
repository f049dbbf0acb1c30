// Package sse frames AG-UI events on the wire.
//
// Reading: Events turns an agent's text/event-stream body into the data of each
// event, as soon as the event's blank line arrives. It accepts what the SSE
// specification accepts (LF, CRLF or CR line ends, "data:" with or without a
// space, data spread over several lines joined with "\n", comments, "event:",
// "id:" and "retry:" lines, which AG-UI consumers ignore and aguard drops). An
// incomplete final event at end of input is never dispatched. It reads what
// go-sse's sse.Read reads, event for event (FuzzEvents compares the two), in
// one buffer of its own: go-sse keeps each event three times over (its
// scanner's buffer, the token's text, the joined data) and searches the whole
// event again for its end after every read, which made an event of 16 MiB cost
// seconds of CPU and four times its size in memory.
//
// Writing: WriteFrame writes one event as "data: <json>\n\n" with LF only, the
// only framing aguard emits; Ping is the keep-alive comment.
//
// Package sse knows nothing of AG-UI: it neither parses nor checks the JSON it
// carries (see package agui).
package sse

import (
	"bufio"
	"bytes"
)

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

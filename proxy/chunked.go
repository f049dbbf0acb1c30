package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
)

// Bounds of a chunked body's framing: a chunk-size line (hex digits,
// whitespace and extensions) and the trailer section, each in bytes.
const (
	maxChunkLine = 4096
	maxTrailer   = readBufferSize
	maxHexDigits = 16
)

// errBrokenChunk is a chunked body whose framing breaks RFC 9112 §7.1.
var errBrokenChunk = errors.New("broken chunked body")

// chunked reads the body of a chunked answer (RFC 9112 §7.1): first the
// bytes the answer's head was read with left in br, then straight from the
// connection, removing the framing in place in the caller's buffer. Past
// br's bytes it holds no buffer of its own, and br goes back to its pool
// (onDrained) as soon as it is empty: a stream waiting for its agent's next
// event holds neither. Its framing checks are fasthttp's (which read the
// answer's head): a size of at most 16 hex digits, then optional whitespace
// or extensions (";…"; not after whitespace), CRLF; the data, CRLF; after
// the last chunk, trailer lines up to an empty one, ignored.
type chunked struct {
	br        *bufio.Reader // nil once drained
	onDrained func()        // called once br is drained, before reading conn
	conn      io.Reader

	state   chunkState
	size    int // the chunk size being read, then the data left in the chunk
	digits  int
	line    int  // bytes of the current size line, or of the trailer
	ows     bool // whitespace after the size
	ext     bool // in a chunk extension
	trailer bool // the current trailer line has bytes
	// extra: bytes came after the body's end; the connection must not
	// carry another request.
	extra bool
	err   error
}

type chunkState uint8

const (
	chunkSize    chunkState = iota // hex digits of the size
	chunkSizeEnd                   // after the digits: whitespace, extensions, CR
	chunkSizeLF                    // the LF ending the size line
	chunkData                      // size bytes of data
	chunkDataCR                    // the CR after the data
	chunkDataLF                    // the LF after the data
	chunkTrailer                   // trailer lines, up to an empty one
	chunkDone                      // the body has ended
)

// Read fills b with body data. It returns io.EOF once the last chunk and
// the trailers have been read, and io.ErrUnexpectedEOF when the connection
// ends before that.
func (c *chunked) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	for {
		if c.state == chunkDone {
			return 0, io.EOF
		}
		if c.err != nil {
			return 0, c.err
		}
		var n int
		var err error
		if c.br != nil && c.br.Buffered() > 0 {
			n, err = c.br.Read(b[:min(len(b), c.br.Buffered())])
		} else {
			if c.br != nil {
				c.br = nil
				if c.onDrained != nil {
					c.onDrained()
				}
			}
			n, err = c.conn.Read(b)
		}
		out := c.parse(b[:n])
		if err == io.EOF && c.state != chunkDone {
			err = io.ErrUnexpectedEOF
		}
		if err != nil && c.err == nil && c.state != chunkDone {
			c.err = err
		}
		if out > 0 {
			return out, nil
		}
	}
}

// parse consumes the raw bytes of b, moving the data in them to the front
// of b, and returns how many data bytes it moved there.
func (c *chunked) parse(b []byte) int {
	w := 0
	for i := 0; i < len(b); {
		if c.err != nil {
			return w
		}
		switch c.state {
		case chunkData:
			k := min(c.size, len(b)-i)
			w += copy(b[w:], b[i:i+k])
			i += k
			if c.size -= k; c.size == 0 {
				c.state = chunkDataCR
			}
			continue
		case chunkDone:
			c.extra = true
			return w
		}
		ch := b[i]
		i++
		switch c.state {
		case chunkSize:
			c.line++
			if v := unhex(ch); v >= 0 {
				if c.digits == maxHexDigits || c.size > math.MaxInt>>4 {
					c.fail("a chunk size of more than %d hex digits, or past %d", maxHexDigits, math.MaxInt)
					continue
				}
				c.size = c.size<<4 | v
				c.digits++
				continue
			}
			if c.digits == 0 {
				c.fail("a chunk size line starting with %q", ch)
				continue
			}
			c.state = chunkSizeEnd
			i-- // the byte after the digits is read again
			c.line--
		case chunkSizeEnd:
			c.line++
			switch {
			case c.line > maxChunkLine:
				c.fail("a chunk size line longer than %d bytes", maxChunkLine)
			case ch == '\r':
				c.state = chunkSizeLF
			case ch == '\n':
				c.fail("a bare LF in a chunk size line")
			case c.ext:
			case ch == ' ' || ch == '\t':
				c.ows = true
			case ch == ';' && !c.ows:
				c.ext = true
			default:
				c.fail("%q after a chunk size", ch)
			}
		case chunkSizeLF:
			if ch != '\n' {
				c.fail("%q after the CR of a chunk size line", ch)
				continue
			}
			c.digits, c.line, c.ows, c.ext = 0, 0, false, false
			if c.size == 0 {
				c.state = chunkTrailer
			} else {
				c.state = chunkData
			}
		case chunkDataCR:
			if ch != '\r' {
				c.fail("%q after a chunk's data instead of CRLF", ch)
				continue
			}
			c.state = chunkDataLF
		case chunkDataLF:
			if ch != '\n' {
				c.fail("%q after a chunk's data instead of CRLF", ch)
				continue
			}
			c.state = chunkSize
		case chunkTrailer:
			if c.line++; c.line > maxTrailer {
				c.fail("trailers longer than %d bytes", maxTrailer)
				continue
			}
			switch ch {
			case '\n':
				if !c.trailer {
					c.state = chunkDone
				}
				c.trailer = false
			case '\r':
			default:
				c.trailer = true
			}
		}
	}
	return w
}

func (c *chunked) fail(format string, args ...any) {
	c.err = fmt.Errorf("%w: %s", errBrokenChunk, fmt.Sprintf(format, args...))
}

// unhex is the value of a hex digit, or -1.
func unhex(ch byte) int {
	switch {
	case ch >= '0' && ch <= '9':
		return int(ch - '0')
	case ch >= 'a' && ch <= 'f':
		return int(ch-'a') + 10
	case ch >= 'A' && ch <= 'F':
		return int(ch-'A') + 10
	}
	return -1
}

// Package chunked reads the body of an HTTP/1.1 answer sent with
// Transfer-Encoding: chunked (RFC 9112 §7.1), for aguard's reads of its
// agent's event stream. Its Reader holds no buffer of its own while the
// stream waits: it removes the framing in place in the caller's buffer, and
// gives the buffer the answer's head was read with back as soon as that is
// empty.
//
// It is not a writer, and it is not a general replacement for net/http's
// reader: trailers are read, bounded and ignored, and its framing checks are
// those of fasthttp, which reads the answer's head (stricter than net/http's:
// FuzzChunked checks that it never returns bytes net/http's would not).
package chunked

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"syscall"
)

// Bounds of a chunked body's framing: a chunk-size line (hex digits,
// whitespace and extensions) and the trailer section, each in bytes, and
// the hex digits of a chunk size.
const (
	MaxLine      = 4096
	MaxTrailer   = 4096
	MaxHexDigits = 16
)

// ErrBroken is a chunked body whose framing breaks RFC 9112 §7.1 or one of
// the bounds above; Read wraps it with what broke.
var ErrBroken = errors.New("broken chunked body")

// backlogBufferSize is the size of the reads of a backlog. An agent that
// writes faster than its consumer reads leaves many small chunks waiting:
// reading them 16 KiB at a time, rather than 4, took 8-13 % off aguard's
// CPU per event with 50 streams sent as fast as they are read (fewer reads,
// and fewer, larger writes to the consumer); 32 KiB measured about as 16,
// and 64 KiB 1.4 times the CPU (bench/README.md, "Backlog reads").
const backlogBufferSize = 16 << 10

// Reader reads the body of a chunked answer (RFC 9112 §7.1): first the
// bytes the answer's head was read with left in br, then straight from the
// connection, removing the framing in place in the caller's buffer. Past
// br's bytes it holds no buffer of its own, and br goes back to its pool
// (onDrained) as soon as it is empty: a stream waiting for its agent's next
// event holds neither. Its framing checks are fasthttp's (which read the
// answer's head): a size of at most 16 hex digits, then optional whitespace
// or extensions (";…"; not after whitespace), CRLF; the data, CRLF; after
// the last chunk, trailer lines up to an empty one, ignored.
type Reader struct {
	br        *bufio.Reader // nil once drained
	onDrained func()        // called once br is drained, before reading conn
	conn      io.Reader

	// raw holds bytes read from the connection while it has more than a
	// caller's buffer takes (a backlog: a read filled the buffer), so that
	// one read brings many events, as a bufio.Reader would; it goes back
	// to its pool after a short read (the socket is drained) once its
	// bytes are used.
	raw          *rawBuf
	rpos, rend   int
	rawLastShort bool

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

// rawBuf is a Reader's read buffer during a backlog.
type rawBuf struct{ b [backlogBufferSize]byte }

var rawBufs = sync.Pool{New: func() any { return new(rawBuf) }}

// backlogRead is the smallest caller's buffer whose filling by one read
// counts as a backlog.
const backlogRead = 256

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

// NewReader reads a chunked body: first the bytes left in br (nil when
// there are none) after the answer's head, then from conn. Once br is
// empty, Read lets it go and calls onDrained (when not nil), before its
// first read of conn: the caller may then reuse br.
func NewReader(br *bufio.Reader, conn io.Reader, onDrained func()) *Reader {
	return &Reader{br: br, conn: conn, onDrained: onDrained}
}

// Extra reports whether bytes came after the body's end (which no request
// asked for): the connection must not carry another request.
func (c *Reader) Extra() bool { return c.extra }

// Read fills b with body data. It returns io.EOF once the last chunk and
// the trailers have been read, and io.ErrUnexpectedEOF when the connection
// ends before that. A read of the connection that fails with
// syscall.EAGAIN (a non-blocking connection with nothing to read yet) is
// returned as it is and ends nothing: Read may be called again.
func (c *Reader) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	for {
		if c.state == chunkDone {
			return 0, io.EOF
		}
		if c.raw != nil && c.rpos < c.rend {
			i, w := c.parse(c.raw.b[c.rpos:c.rend], b)
			c.rpos += i
			c.releaseRaw()
			if w > 0 {
				return w, nil
			}
			if c.err != nil {
				return 0, c.err
			}
			continue
		}
		if c.err != nil {
			return 0, c.err
		}
		var n int
		var err error
		var out int
		switch {
		case c.br != nil && c.br.Buffered() > 0:
			n, err = c.br.Read(b[:min(len(b), c.br.Buffered())])
			_, out = c.parse(b[:n], b)
		default:
			if c.br != nil {
				c.br = nil
				if c.onDrained != nil {
					c.onDrained()
				}
			}
			if c.raw != nil {
				n, err = c.conn.Read(c.raw.b[:])
				c.rpos, c.rend, c.rawLastShort = 0, n, n < len(c.raw.b)
				c.releaseRaw()
			} else {
				n, err = c.conn.Read(b)
				_, out = c.parse(b[:n], b)
				if n == len(b) && n >= backlogRead && err == nil {
					c.raw = rawBufs.Get().(*rawBuf)
					c.rpos, c.rend = 0, 0
				}
			}
		}
		if errors.Is(err, syscall.EAGAIN) {
			// A non-blocking connection with nothing yet: not the end of
			// the body; the caller reads again once it is readable.
			if out > 0 {
				return out, nil
			}
			return 0, err
		}
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

// releaseRaw gives the backlog buffer back once its bytes are used and the
// read that brought them was short.
func (c *Reader) releaseRaw() {
	if c.raw != nil && c.rpos == c.rend && c.rawLastShort {
		rawBufs.Put(c.raw)
		c.raw, c.rpos, c.rend = nil, 0, 0
	}
}

// parse consumes the raw bytes of src and writes the data in them to dst,
// which may be src itself (the data moves to its front: it never overtakes
// what is still to be read); it stops early only when dst is full. It
// returns the bytes of src consumed and of dst written.
func (c *Reader) parse(src, dst []byte) (consumed, written int) {
	w := 0
	i := 0
	for i < len(src) {
		if c.err != nil {
			return i, w
		}
		switch c.state {
		case chunkData:
			k := min(c.size, len(src)-i, len(dst)-w)
			if k == 0 {
				return i, w // dst is full
			}
			w += copy(dst[w:], src[i:i+k])
			i += k
			if c.size -= k; c.size == 0 {
				c.state = chunkDataCR
			}
			continue
		case chunkDone:
			c.extra = true
			return len(src), w
		}
		ch := src[i]
		i++
		switch c.state {
		case chunkSize:
			c.line++
			if v := unhex(ch); v >= 0 {
				if c.digits == MaxHexDigits || c.size > math.MaxInt>>4 {
					c.fail("a chunk size of more than %d hex digits, or past %d", MaxHexDigits, math.MaxInt)
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
			case c.line > MaxLine:
				c.fail("a chunk size line longer than %d bytes", MaxLine)
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
			if c.line++; c.line > MaxTrailer {
				c.fail("trailers longer than %d bytes", MaxTrailer)
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
	return i, w
}

func (c *Reader) fail(format string, args ...any) {
	c.err = fmt.Errorf("%w: %s", ErrBroken, fmt.Sprintf(format, args...))
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

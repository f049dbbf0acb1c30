package sse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"iter"
	"sync"
	"syscall"
)

// ErrEventTooLarge reports an event larger than the configured maximum. The
// stream cannot be resumed after it.
var ErrEventTooLarge = errors.New("sse: event larger than the limit")

// defaultMaxEvent is the limit when Events is given none: go-sse's default,
// bufio.MaxScanTokenSize.
const defaultMaxEvent = 64 << 10

// Buffer sizes of a reader. A reader reads into smallBuffer bytes of its
// own while nothing larger is needed (most events are small, and an idle
// stream should hold little): a chunked answer's read returns one chunk,
// usually one event. An event that needs more moves to a buffer of
// startBuffer bytes, doubled while it needs more, and so does a backlog (a
// read filled the small buffer: more is waiting), which is then read
// startBuffer bytes at a time rather than smallBuffer; buffers up to
// keepBuffer are taken from pools (one per size), and every such buffer is
// given back as soon as the reader holds no byte in it, so a stream
// between events holds only its small buffer.
const (
	smallBuffer = 512
	startBuffer = 4 << 10
	keepBuffer  = 64 << 10
)

// pooled is a buffer of one of the pools' sizes (startBuffer << i).
type pooled struct{ b []byte }

// pools hold the buffers of startBuffer << i bytes, up to keepBuffer.
var pools [5]sync.Pool

// getBuffer returns a buffer of at least n bytes: from a pool when n is at
// most keepBuffer (p is then what to give back), else a new one.
func getBuffer(n int) (b []byte, p *pooled) {
	for i, size := 0, startBuffer; size <= keepBuffer; i, size = i+1, size*2 {
		if n <= size {
			p, _ = pools[i].Get().(*pooled)
			if p == nil {
				p = &pooled{b: make([]byte, size)}
			}
			return p.b, p
		}
	}
	return make([]byte, n), nil
}

// putBuffer gives a pooled buffer back.
func putBuffer(p *pooled) {
	for i, size := 0, startBuffer; size <= keepBuffer; i, size = i+1, size*2 {
		if len(p.b) == size {
			pools[i].Put(p)
			return
		}
	}
}

// bom is the UTF-8 byte order mark a stream may start with.
var bom = []byte("\xEF\xBB\xBF")

// Events yields the data of each event of r that carries data, in order.
// Events without data (comment-only or id-only blocks) are skipped.
//
// The yielded slice is read-only and valid until the next iteration: it
// points into the reader's buffer, so that an event costs its own size once,
// however large. A caller that keeps an event past its step copies it.
//
// Iteration ends at the end of r with no error, or with one error: a read error
// of r (wrapped), or ErrEventTooLarge (wrapped, naming the limit) when an event
// exceeds maxEvent bytes (maxEvent <= 0 means 64 KiB). An event's size is that
// of its lines as they arrived (field names, values and line ends), as go-sse's
// ReadConfig.MaxEventSize counts it.
func Events(r io.Reader, maxEvent int) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		rd := NewReader(r, maxEvent)
		for {
			data, err := rd.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(data, nil) {
				return
			}
		}
	}
}

// Reader reads the events of a stream one at a time (Next): Events as a
// pull reader, for a caller that must stop between reads of its source and
// come back later, such as one reading a non-blocking socket. A read of the
// source that fails with syscall.EAGAIN (nothing to read yet) does not end
// the stream: Next returns that error once it has parsed every byte it
// holds, and the next call of Next reads the source again.
type Reader struct{ rd reader }

// NewReader reads the events of r, each at most maxEvent bytes (maxEvent
// <= 0 means 64 KiB).
func NewReader(r io.Reader, maxEvent int) *Reader {
	if maxEvent <= 0 {
		maxEvent = defaultMaxEvent
	}
	return &Reader{rd: reader{r: r, max: maxEvent, bom: true}}
}

// Next returns the data of the next event that carries data: a read-only
// slice into the reader's buffer, valid until the next call. At the end of
// the stream it returns io.EOF; when the source has nothing to read yet,
// an error that is syscall.EAGAIN (call again later); otherwise the error
// that ends the stream, as Events yields it, and the same error after it.
func (r *Reader) Next() ([]byte, error) { return r.rd.next() }

// reader parses the event stream format of the HTML standard
// (https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation)
// in one buffer that it reads into and joins data lines in: each byte is
// scanned for a line end once, and an event's data is moved at most once
// within the buffer, towards its start, never copied elsewhere.
//
// Layout of buf: the current event's data so far in buf[ds:de] (lines joined
// with LF), then consumed bytes, then the bytes not parsed yet in
// buf[pos:end], of which buf[pos:seen] hold no line end. The data never
// overtakes pos: a data line's value is shorter than the line, so moving it
// down next to the data before it writes only over bytes already parsed.
type reader struct {
	r   io.Reader
	max int
	buf []byte  // small, or a larger buffer while an event needs it
	own *pooled // buf's pool, when it came from one

	ds, de  int  // the current event's data
	hasData bool // the current event has a data line (possibly empty)
	pos     int  // first byte not parsed
	seen    int  // buf[pos:seen] has no CR or LF
	end     int  // end of the bytes read
	size    int  // bytes of the current event's lines parsed so far

	bom     bool // at the start of the stream: a BOM is dropped
	blocked bool // the last read had nothing to give yet (EAGAIN)
	skipLF  bool // the last line ended with a CR that was the last byte read: an LF right after it belongs to it
	eof     bool
	err     error // the read error that ends the stream, once the bytes before it are parsed

	small [smallBuffer]byte
}

// next returns the data of the next event that has data, io.EOF at the end
// of the stream (an incomplete final event is dropped, as the standard
// says), or an error.
func (r *reader) next() ([]byte, error) {
	for {
		if r.skipLF && r.pos < r.end {
			if r.buf[r.pos] == '\n' {
				r.pos++
				r.seen = max(r.seen, r.pos)
			}
			r.skipLF = false
		}
		if r.bom && (r.end-r.pos >= len(bom) || r.eof || !bytes.HasPrefix(bom, r.buf[r.pos:r.end])) {
			if bytes.HasPrefix(r.buf[r.pos:r.end], bom) {
				r.pos += len(bom)
				r.seen = r.pos
			}
			r.bom = false
		}
		if !r.bom && !(r.skipLF && r.pos == r.end) {
			if i := lineEnd(r.buf[r.seen:r.end]); i >= 0 {
				i += r.seen
				line := r.buf[r.pos:i]
				eol := 1
				if r.buf[i] == '\r' {
					switch {
					case i+1 < r.end && r.buf[i+1] == '\n':
						eol = 2
					case i+1 == r.end:
						r.skipLF = true // the LF, if any, is not read yet
					}
				}
				r.pos = i + eol
				r.seen = r.pos
				if data, ok, err := r.line(line, eol); ok || err != nil {
					return data, err
				}
				continue
			}
			r.seen = r.end
			if r.size+r.end-r.pos > r.max {
				return nil, fmt.Errorf("%w (%d bytes)", ErrEventTooLarge, r.max)
			}
		}
		if r.eof {
			if r.err != nil {
				return nil, fmt.Errorf("sse: reading stream: %w", r.err)
			}
			return nil, io.EOF
		}
		if r.blocked {
			r.blocked = false
			return nil, syscall.EAGAIN
		}
		r.fill()
	}
}

// line handles one line (without its line end of eol bytes). It reports
// ok with the event's data when the line is the blank line that dispatches
// an event with data.
func (r *reader) line(line []byte, eol int) (data []byte, ok bool, err error) {
	if len(line) == 0 {
		data, ok = r.buf[r.ds:r.de], r.hasData && r.de > r.ds
		r.ds, r.de, r.hasData, r.size = 0, 0, false, 0
		return data, ok, nil
	}
	r.size += len(line) + eol
	if r.size > r.max {
		return nil, false, fmt.Errorf("%w (%d bytes)", ErrEventTooLarge, r.max)
	}
	if line[0] == ':' {
		return nil, false, nil // a comment
	}
	name, value, found := bytes.Cut(line, []byte(":"))
	if !found {
		name, value = line, line[len(line):]
	} else if len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	// event, id and retry mean nothing to AG-UI consumers, and aguard
	// writes none; other fields are ignored, as the standard says.
	if string(name) != "data" {
		return nil, false, nil
	}
	start := cap(r.buf) - cap(value) // value's offset in buf
	if !r.hasData {
		r.ds, r.de, r.hasData = start, start+len(value), true
		return nil, false, nil
	}
	r.buf[r.de] = '\n'
	r.de += 1 + copy(r.buf[r.de+1:], value)
	return nil, false, nil
}

// fill reads more bytes, first making room when less than an eighth of the
// buffer is left, or when it holds nothing still needed: the bytes still
// needed (the current event's data and what is not parsed yet) move to the
// front of the buffer, or to one twice its size when they fill more than
// half of it, or to a pooled one when the last read filled the small
// buffer (a backlog: with 50 streams sent as fast as they are read, 3-5 %
// less CPU per event than reading the backlog 512 bytes at a time,
// bench/README.md). A buffer larger than the small one is given back
// once it holds nothing that needs it: at once when it holds nothing at all
// (the read may block for as long as the agent is silent), and when it is
// larger than keepBuffer, once what it holds fits in half of keepBuffer.
func (r *reader) fill() {
	live := r.end - r.pos
	if r.hasData {
		live += r.de - r.ds
	}
	small := r.buf != nil && &r.buf[0] == &r.small[0]
	switch {
	case r.buf == nil || (live == 0 && !small):
		r.swap(r.small[:], nil)
	case len(r.buf) > keepBuffer && live <= keepBuffer/2:
		r.swap(getBuffer(max(startBuffer, 2*live)))
	case live == 0 && r.end > 0:
		// Nothing to keep: read from the start, so that one read can take
		// as much as the buffer holds (an event that arrives alone is one
		// read, not two split at the buffer's end).
		r.move(r.buf)
	case small && r.end == len(r.buf):
		// The last read filled the small buffer (only reads move end): a
		// backlog. Read it a pooled buffer at a time, given back once it
		// holds nothing.
		r.swap(getBuffer(startBuffer))
	case len(r.buf)-r.end >= len(r.buf)/8: // room left to read into
	case live > len(r.buf)/2:
		r.swap(getBuffer(max(startBuffer, min(2*len(r.buf), r.max+startBuffer))))
	default:
		r.move(r.buf)
	}
	n, err := r.r.Read(r.buf[r.end:])
	r.end += n
	if errors.Is(err, syscall.EAGAIN) {
		r.blocked = true // the bytes read are parsed first
		return
	}
	if err != nil {
		r.eof = true
		if err != io.EOF {
			r.err = err
		}
	}
}

// swap moves what the reader holds to buf (from pool own, or nil) and gives
// the buffer it leaves back to its pool.
func (r *reader) swap(buf []byte, own *pooled) {
	if r.buf != nil {
		r.move(buf)
	} else {
		r.buf = buf
	}
	if r.own != nil {
		putBuffer(r.own)
	}
	r.own = own
}

// move copies the bytes still needed to the front of buf, which may be the
// current buffer, and makes it the buffer.
func (r *reader) move(buf []byte) {
	n := 0
	if r.hasData {
		n = copy(buf, r.buf[r.ds:r.de])
		r.ds, r.de = 0, n
	}
	m := copy(buf[n:], r.buf[r.pos:r.end])
	r.seen = n + (r.seen - r.pos)
	r.pos, r.end = n, n+m
	r.buf = buf
}

package chunked

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http/httputil"
	"strings"
	"syscall"
	"testing"
)

// readChunked reads body through a Reader, with head bytes already in a
// bufio.Reader (as the answer's head leaves them) and the rest arriving in
// reads of at most step bytes into buffers of size bytes.
func readChunked(t *testing.T, body string, buffered, step, size int) (data []byte, c *Reader, drained bool, err error) {
	t.Helper()
	src := strings.NewReader(body)
	br := bufio.NewReaderSize(io.LimitReader(src, int64(buffered)), 16)
	if buffered > 0 {
		br.Peek(min(buffered, 16))
	}
	c = NewReader(br, stepReader{src, step}, func() { drained = true })
	buf := make([]byte, size)
	for {
		n, rerr := c.Read(buf)
		data = append(data, buf[:n]...)
		if rerr != nil {
			if rerr == io.EOF {
				rerr = nil
			}
			return data, c, drained, rerr
		}
	}
}

type stepReader struct {
	r    io.Reader
	step int
}

func (s stepReader) Read(b []byte) (int, error) { return s.r.Read(b[:min(len(b), s.step)]) }

// TestChunkedBodyMatchesNetHTTP pins that a chunked body comes out as Go's
// own chunked reader (net/http/httputil) reads it, however the bytes are
// split between the head's buffer, the connection's reads and the caller's
// buffer.
func TestChunkedBodyMatchesNetHTTP(t *testing.T) {
	bodies := []string{
		"5\r\nhello\r\n0\r\n\r\n",
		"1d\r\ndata: {\"type\":\"RUN_STARTED\"}\n\r\n3;ext=1\r\n\n\n\n\r\n0\r\nX-Trailer: 1\r\n\r\n",
		"A  \r\n0123456789\r\n0\r\n\r\n",
		strings.Repeat("40\r\n"+strings.Repeat("x", 64)+"\r\n", 20) + "0\r\n\r\n",
	}
	for _, body := range bodies {
		want, err := io.ReadAll(httputil.NewChunkedReader(strings.NewReader(body)))
		if err != nil {
			t.Fatalf("net/http rejects %q: %v", body, err)
		}
		for _, buffered := range []int{0, 3, 16} {
			for _, step := range []int{1, 2, 7, 4096} {
				for _, size := range []int{1, 5, 512} {
					got, c, drained, err := readChunked(t, body, buffered, step, size)
					if err != nil || !bytes.Equal(got, want) {
						t.Fatalf("%q (buffered %d, reads of %d, buffer %d): %q, %v; want %q", body, buffered, step, size, got, err, want)
					}
					if c.extra || !drained && len(body) > buffered {
						t.Fatalf("%q: extra %v, head buffer given back %v", body, c.extra, drained)
					}
				}
			}
		}
	}
}

// TestChunkedBodyRejectsBrokenFraming pins that broken framing and a body
// cut short are errors, never data passed on as if complete.
func TestChunkedBodyRejectsBrokenFraming(t *testing.T) {
	for _, tc := range []struct{ body, why string }{
		{"5\r\nhel", "cut in the data"},
		{"5\r\nhello\r\n", "cut before the last chunk"},
		{"5\r\nhello\r\n0\r\n", "cut in the trailers"},
		{"\r\nhello\r\n0\r\n\r\n", "no size"},
		{"5\nhello\r\n0\r\n\r\n", "a bare LF after the size"},
		{"5\r\nhelloXX0\r\n\r\n", "no CRLF after the data"},
		{"5 ;x\r\nhello\r\n0\r\n\r\n", "an extension after whitespace"},
		{"5z\r\nhello\r\n0\r\n\r\n", "a letter after the size"},
		{strings.Repeat("0", 17) + "5\r\nhello\r\n0\r\n\r\n", "17 hex digits"},
		{"fffffffffffffff0\r\nhello\r\n0\r\n\r\n", "a size past the largest int"},
		{"5;" + strings.Repeat("e", MaxLine) + "\r\nhello\r\n0\r\n\r\n", "a size line past its bound"},
		{"0\r\n" + strings.Repeat("X: y\r\n", MaxTrailer) + "\r\n", "trailers past their bound"},
	} {
		_, _, _, err := readChunked(t, tc.body, 0, 4096, 512)
		if err == nil {
			t.Errorf("%s (%q): no error", tc.why, tc.body)
		}
		if strings.HasPrefix(tc.why, "cut") && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s: %v, want io.ErrUnexpectedEOF", tc.why, err)
		}
	}
}

// TestChunkedBodyNotesBytesAfterItsEnd pins that bytes after the last chunk
// (which no request asked for) keep the connection from being reused.
func TestChunkedBodyNotesBytesAfterItsEnd(t *testing.T) {
	data, c, _, err := readChunked(t, "2\r\nok\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n\r\n", 0, 4096, 512)
	if err != nil || string(data) != "ok" || !c.extra {
		t.Fatalf("data %q, err %v, extra %v", data, err, c.extra)
	}
}

// FuzzChunked checks the reader against net/http's on any input: where Go's
// reader returns the whole body, this one returns the same bytes or an
// error (its framing checks are stricter); it never returns bytes Go's
// reader would not.
func FuzzChunked(f *testing.F) {
	f.Add("5\r\nhello\r\n0\r\n\r\n", 3, 7)
	f.Add("3;a=b\r\nabc\r\n0\r\nT: 1\r\n\r\n", 0, 1)
	f.Fuzz(func(t *testing.T, body string, buffered, step int) {
		buffered, step = max(0, buffered%32), 1+max(0, step%64)
		got, _, _, err := readChunked(t, body, buffered, step, 64)
		want, werr := io.ReadAll(httputil.NewChunkedReader(strings.NewReader(body)))
		if err == nil && werr != nil {
			t.Fatalf("%q: accepted (%q), net/http: %v", body, got, werr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("%q: %q, net/http %q", body, got, want)
		}
		if !bytes.HasPrefix(want, got) && werr == nil {
			t.Fatalf("%q: %q is not a prefix of net/http's %q", body, got, want)
		}
	})
}

// TestChunkedBodyReadsABacklogInLargeReads pins that a backlog (a read that
// fills the caller's buffer) is read from the connection in reads of the
// backlog buffer's size, not of the caller's, and that the buffer goes back
// once a short read's bytes are used.
func TestChunkedBodyReadsABacklogInLargeReads(t *testing.T) {
	body := strings.Repeat("64\r\n"+strings.Repeat("x", 100)+"\r\n", 100) + "0\r\n\r\n"
	reads := 0
	src := strings.NewReader(body)
	c := NewReader(nil, readFunc(func(b []byte) (int, error) {
		reads++
		return src.Read(b)
	}), nil)
	buf := make([]byte, 512)
	total := 0
	for {
		n, err := c.Read(buf)
		total += n
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if total != 100*100 {
		t.Fatalf("read %d bytes of data, want %d", total, 100*100)
	}
	if max := 2 + len(body)/backlogBufferSize; reads > max {
		t.Fatalf("%d reads of the connection for %d bytes, want at most %d", reads, len(body), max)
	}
	if c.raw != nil {
		t.Fatal("the backlog buffer is held after the body's end")
	}
}

type readFunc func([]byte) (int, error)

func (f readFunc) Read(b []byte) (int, error) { return f(b) }

// eagainReader has nothing to read every other call, as a non-blocking
// socket between an agent's writes.
type eagainReader struct {
	r     io.Reader
	calls int
}

func (e *eagainReader) Read(b []byte) (int, error) {
	if e.calls++; e.calls%2 == 1 {
		return 0, syscall.EAGAIN
	}
	return e.r.Read(b)
}

// TestAReadThatWouldBlockEndsNothing pins that a connection with nothing
// to read yet (EAGAIN) is reported as such and the body reads on after it,
// whole, as net/http reads it.
func TestAReadThatWouldBlockEndsNothing(t *testing.T) {
	body := "1d\r\ndata: {\"type\":\"RUN_STARTED\"}\n\r\n3;ext=1\r\n\n\n\n\r\n" +
		strings.Repeat("40\r\n"+strings.Repeat("x", 64)+"\r\n", 20) + "0\r\n\r\n"
	want, err := io.ReadAll(httputil.NewChunkedReader(strings.NewReader(body)))
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []int{1, 7, 300, len(body)} {
		for _, size := range []int{16, 512, 4096} {
			c := NewReader(nil, &eagainReader{r: stepReader{strings.NewReader(body), step}}, nil)
			buf := make([]byte, size)
			var got []byte
			for calls := 0; ; calls++ {
				if calls > 4*len(body) {
					t.Fatalf("step %d, size %d: no end after %d reads", step, size, calls)
				}
				n, rerr := c.Read(buf)
				got = append(got, buf[:n]...)
				if errors.Is(rerr, syscall.EAGAIN) {
					continue
				}
				if rerr == io.EOF {
					break
				}
				if rerr != nil {
					t.Fatalf("step %d, size %d: %v", step, size, rerr)
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("step %d, size %d: read %q, want %q", step, size, got, want)
			}
		}
	}
}

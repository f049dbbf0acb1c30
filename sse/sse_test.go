package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"

	gosse "github.com/tmaxmax/go-sse"
)

func collect(t *testing.T, r io.Reader, max int) ([]string, error) {
	t.Helper()
	var got []string
	for data, err := range Events(r, max) {
		if err != nil {
			return got, err
		}
		got = append(got, string(data))
	}
	return got, nil
}

func TestEventsFraming(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"lf", "data: {\"a\":1}\n\ndata: {\"b\":2}\n\n", []string{`{"a":1}`, `{"b":2}`}},
		{"crlf", "data: {\"a\":1}\r\n\r\ndata: {\"b\":2}\r\n\r\n", []string{`{"a":1}`, `{"b":2}`}},
		{"cr", "data: {\"a\":1}\r\rdata: {\"b\":2}\r\r", []string{`{"a":1}`, `{"b":2}`}},
		{"no space after colon", "data:{\"a\":1}\n\n", []string{`{"a":1}`}},
		{"multi-line data joined with LF", "data: {\"a\":\ndata: 1}\n\n", []string{"{\"a\":\n1}"}},
		{"comments, id, event and retry dropped", ": hi\nid: 7\nevent: x\nretry: 10\ndata: {}\n\n: ping\n\n", []string{`{}`}},
		{"data-less blocks skipped", "id: 1\n\nevent: x\n\ndata: {}\n\n", []string{`{}`}},
		{"incomplete final event discarded", "data: {\"a\":1}\n\ndata: {\"b\"", []string{`{"a":1}`}},
		{"final event without blank line discarded", "data: {\"a\":1}\n\ndata: {}\n", []string{`{"a":1}`}},
		{"bom stripped", "\ufeffdata: {}\n\n", []string{`{}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(tt.in), iotest.OneByteReader(strings.NewReader(tt.in))} {
				got, err := collect(t, r, 0)
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if strings.Join(got, "|") != strings.Join(tt.want, "|") {
					t.Fatalf("got %q, want %q", got, tt.want)
				}
			}
		})
	}
}

func TestEventsTooLarge(t *testing.T) {
	in := "data: {\"a\":1}\n\ndata: " + strings.Repeat("x", 200) + "\n\ndata: {}\n\n"
	got, err := collect(t, strings.NewReader(in), 64)
	if !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("err = %v, want ErrEventTooLarge", err)
	}
	if len(got) != 1 || got[0] != `{"a":1}` {
		t.Fatalf("events before the error = %q", got)
	}
}

func TestEventsReadError(t *testing.T) {
	boom := errors.New("connection reset")
	r := io.MultiReader(strings.NewReader("data: {}\n\n"), iotest.ErrReader(boom))
	got, err := collect(t, r, 0)
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want wrapped %v", err, boom)
	}
	if len(got) != 1 {
		t.Fatalf("got %q", got)
	}
}

// TestEventsSplitAnywhere pins that where the reads of the body end changes
// nothing: every split of an input into two reads, CR LF split included,
// yields the events of the whole.
func TestEventsSplitAnywhere(t *testing.T) {
	in := "\ufeffdata: {\"a\":1}\r\n\r\n: c\r\rdata:x\r\ndata: y\n\nid: 1\nevent: e\ndata\ndata: z\r\n\r\n"
	want, err := collect(t, strings.NewReader(in), 0)
	if err != nil || strings.Join(want, "|") != "{\"a\":1}|x\ny|\nz" {
		t.Fatalf("whole: %q, %v", want, err)
	}
	for i := range len(in) {
		got, err := collect(t, io.MultiReader(strings.NewReader(in[:i]), strings.NewReader(in[i:])), 0)
		if err != nil || strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("split at %d: %q, %v; want %q", i, got, err, want)
		}
	}
}

// TestEventsLargeEventLinear pins that an event much larger than the reads
// that bring it is searched for its end once, not once per read: 8 MiB in
// reads of 4 KiB (go-sse took about 2 s of CPU for this) is read in well
// under the 64 s a rescan per read would take at 1 GB/s, and its data is
// the bytes sent.
func TestEventsLargeEventLinear(t *testing.T) {
	payload := bytes.Repeat([]byte("x"), 8<<20)
	in := append(append([]byte("data: "), payload...), "\n\ndata: {}\n\n"...)
	var sizes []int
	for data, err := range Events(smallReads{bytes.NewReader(in), 4096}, 16<<20) {
		if err != nil {
			t.Fatal(err)
		}
		if len(sizes) == 0 && !bytes.Equal(data, payload) {
			t.Fatalf("data of %d bytes differs from the %d sent", len(data), len(payload))
		}
		sizes = append(sizes, len(data))
	}
	if len(sizes) != 2 || sizes[1] != 2 {
		t.Fatalf("events of %v bytes", sizes)
	}
}

// TestEventsGivesLargeBuffersBack pins that the buffer a large event needed
// is dropped once the event is handled, before the next read: an idle stream
// after a 1 MiB event holds a small buffer, not 1 MiB.
func TestEventsGivesLargeBuffersBack(t *testing.T) {
	in := "data: " + strings.Repeat("x", 1<<20) + "\n\ndata: {}\n\n"
	r := reader{r: smallReads{strings.NewReader(in), 64 << 10}, max: 2 << 20, bom: true}
	data, err := r.next()
	if err != nil || len(data) != 1<<20 {
		t.Fatalf("first event: %d bytes, %v", len(data), err)
	}
	if cap(r.buf) < 1<<20 {
		t.Fatalf("buffer of %d bytes held a 1 MiB event", cap(r.buf))
	}
	for {
		if _, err := r.next(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if cap(r.buf) > keepBuffer {
		t.Fatalf("buffer of %d bytes kept after the large event", cap(r.buf))
	}
}

// TestEventsHoldsOnlyTheSmallBufferBetweenEvents pins that a reader holds no
// buffer but its own small one while it waits for the next event, even
// after an event that needed a larger one: an idle stream costs
// smallBuffer bytes, not startBuffer or more.
func TestEventsHoldsOnlyTheSmallBufferBetweenEvents(t *testing.T) {
	big := "data: " + strings.Repeat("x", 10<<10) + "\n\n"
	// Reads of at most 1,000 bytes that end where events end, as the
	// chunks of an agent's chunked answer do.
	pieces := []string{big, "data: {}\n\n", big}
	var lens []int
	r := reader{r: readFunc(func(b []byte) (int, error) {
		lens = append(lens, len(b))
		if len(pieces) == 0 {
			return 0, io.EOF
		}
		n := copy(b, pieces[0][:min(len(pieces[0]), 1000)])
		pieces[0] = pieces[0][n:]
		if pieces[0] == "" {
			pieces = pieces[1:]
		}
		return n, nil
	}), max: 1 << 20, bom: true}
	var sizes []int
	var next []int // the index of the read after each event
	for {
		data, err := r.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(data))
		next = append(next, len(lens))
	}
	if len(sizes) != 3 || sizes[0] != 10<<10 || sizes[1] != 2 || sizes[2] != 10<<10 {
		t.Fatalf("events of %v bytes", sizes)
	}
	for _, i := range next {
		if lens[i] > smallBuffer {
			t.Fatalf("read %d, after an event, had room for %d bytes: more than the small buffer (reads %v)", i, lens[i], lens)
		}
	}
	if r.own != nil {
		t.Fatalf("a pooled buffer of %d bytes is held after the last event", len(r.own.b))
	}
}

// readFunc is an io.Reader.
type readFunc func([]byte) (int, error)

func (f readFunc) Read(b []byte) (int, error) { return f(b) }

// smallReads returns at most n bytes per Read.
type smallReads struct {
	r io.Reader
	n int
}

func (s smallReads) Read(b []byte) (int, error) { return s.r.Read(b[:min(len(b), s.n)]) }

// BenchmarkEventsLarge reads one 4 MiB event arriving in reads of 4 KiB, as
// the agent's socket delivers it.
func BenchmarkEventsLarge(b *testing.B) {
	in := append(append([]byte("data: {\"delta\":\""), bytes.Repeat([]byte("x"), 4<<20)...), "\"}\n\n"...)
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		for _, err := range Events(smallReads{bytes.NewReader(in), 4096}, 16<<20) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkEventsSmall reads 10,000 events of 120 bytes, as most streams are.
func BenchmarkEventsSmall(b *testing.B) {
	var in []byte
	for i := range 10_000 {
		in = fmt.Appendf(in, "data: {\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"t=%020d;%s\"}\n\n", i, strings.Repeat("p", 40))
	}
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		for _, err := range Events(smallReads{bytes.NewReader(in), 16 << 10}, 16<<20) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

func TestWriteFrame(t *testing.T) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if err := WriteFrame(w, []byte(`{"type":"RUN_STARTED"}`)); err != nil {
		t.Fatal(err)
	}
	w.WriteString(Ping)
	w.Flush()
	if got, want := buf.String(), "data: {\"type\":\"RUN_STARTED\"}\n\n: ping\n\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestWriteFrameNeverSplitsAnEvent pins that data with line endings inside
// still makes exactly one event that reads back as the same text (CR and CRLF
// read back as LF).
func TestWriteFrameNeverSplitsAnEvent(t *testing.T) {
	tests := map[string]string{
		"lf":                "a\nb",
		"blank line":        "x\n\ndata: {\"type\":\"INJECTED\"}",
		"cr cr":             "x\r\rdata: y",
		"crlf":              "x\r\ny",
		"trailing newline":  "x\n",
		"only line endings": "\n\r\n\r",
	}
	for name, data := range tests {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			w := bufio.NewWriter(&buf)
			WriteFrame(w, []byte(data))
			w.Flush()
			got, err := collect(t, &buf, 0)
			if err != nil {
				t.Fatal(err)
			}
			want := strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(data)
			if len(got) != 1 || got[0] != want {
				t.Fatalf("frame %q read back as %q, want one event %q", buf.String(), got, want)
			}
		})
	}
}

// FuzzEvents checks Events against go-sse's sse.Read, the reference
// parser: the same events, whatever the bytes and wherever the reads end;
// and that a limit ends the stream after the events that fit.
func FuzzEvents(f *testing.F) {
	f.Add([]byte("data: {}\n\n"), 64, 3)
	f.Add([]byte("data:a\r\ndata:b\r\n\r\n: c\n\nid: 1\n\n"), 8, 1)
	f.Add([]byte("\ufeffdata: x\r\rdata\ndata: y\r\n\r\nevent: e\n\n"), 16, 7)
	f.Fuzz(func(t *testing.T, in []byte, max, split int) {
		if max < 0 || max > 1<<16 {
			max = 0
		}
		split = 1 + split&0x1fff // up to 8 KiB: reads that fill the small buffer, and a pooled one
		var got []string
		var gotErr error
		for data, err := range Events(smallReads{bytes.NewReader(in), split}, 1<<20) {
			if err != nil {
				gotErr = err
				break
			}
			if len(data) == 0 {
				t.Fatal("empty data yielded")
			}
			got = append(got, string(data))
		}
		// go-sse drops a BOM at the start of its first event, after blank
		// lines; the standard, and Events, only at the start of the stream.
		if gotErr == nil && bytes.LastIndex(in, bom) <= 0 {
			var want []string
			for ev, err := range gosse.Read(bytes.NewReader(in), &gosse.ReadConfig{MaxEventSize: 1 << 20}) {
				if err != nil {
					t.Fatalf("go-sse: %v", err)
				}
				if ev.Data != "" {
					want = append(want, ev.Data)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("Events read %q, go-sse %q", got, want)
			}
		}
		// With a limit: the events that fit, then ErrEventTooLarge or the end.
		if max > 0 && gotErr == nil {
			var limited []string
			for data, err := range Events(smallReads{bytes.NewReader(in), split}, max) {
				if err != nil {
					if !errors.Is(err, ErrEventTooLarge) {
						t.Fatalf("limit %d: %v", max, err)
					}
					break
				}
				if len(data) > max {
					t.Fatalf("limit %d: an event of %d bytes of data", max, len(data))
				}
				limited = append(limited, string(data))
			}
			if len(limited) > len(got) || !slices.Equal(limited, got[:len(limited)]) {
				t.Fatalf("limit %d: read %q, without the limit %q", max, limited, got)
			}
		}
		// Whatever the bytes, their frame reads back as one event with the
		// same lines.
		if len(in) > 0 && len(in) < 1<<15 {
			got, err := collect(t, bytes.NewReader(AppendFrame(nil, in)), 0)
			want := strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(string(in))
			if err != nil || len(got) != 1 || got[0] != want {
				t.Fatalf("frame of %q read back as %q (%v), want %q", in, got, err, want)
			}
		}
	})
}

func ExampleEvents() {
	body := "data: {\"type\":\"RUN_STARTED\"}\r\n\r\n: keep-alive\n\ndata: {\"type\":\ndata: \"RUN_FINISHED\"}\n\n"
	for data, err := range Events(strings.NewReader(body), 1<<20) {
		if err != nil {
			panic(err)
		}
		fmt.Printf("%q\n", data)
	}
	// Output:
	// "{\"type\":\"RUN_STARTED\"}"
	// "{\"type\":\n\"RUN_FINISHED\"}"
}

// BenchmarkGoSSESmall and BenchmarkGoSSELarge read the inputs of
// BenchmarkEventsSmall and BenchmarkEventsLarge with go-sse's sse.Read (the
// reference FuzzEvents compares with): the figures behind reading events
// with Events (README, bench/README.md).
func BenchmarkGoSSESmall(b *testing.B) {
	var in []byte
	for i := range 10_000 {
		in = fmt.Appendf(in, "data: {\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"t=%020d;%s\"}\n\n", i, strings.Repeat("p", 40))
	}
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		for _, err := range gosse.Read(smallReads{bytes.NewReader(in), 16 << 10}, &gosse.ReadConfig{MaxEventSize: 16 << 20}) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkGoSSELarge(b *testing.B) {
	in := append(append([]byte("data: {\"delta\":\""), bytes.Repeat([]byte("x"), 4<<20)...), "\"}\n\n"...)
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		for _, err := range gosse.Read(smallReads{bytes.NewReader(in), 4096}, &gosse.ReadConfig{MaxEventSize: 16 << 20}) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// wouldBlock is a source that has nothing to read every other call, as a
// non-blocking socket between an agent's writes.
type wouldBlock struct {
	chunks [][]byte
	calls  int
}

func (w *wouldBlock) Read(b []byte) (int, error) {
	w.calls++
	if w.calls%2 == 1 {
		return 0, syscall.EAGAIN
	}
	if len(w.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(b, w.chunks[0])
	if w.chunks[0] = w.chunks[0][n:]; len(w.chunks[0]) == 0 {
		w.chunks = w.chunks[1:]
	}
	return n, nil
}

func TestReaderResumesAfterASourceThatWouldBlock(t *testing.T) {
	stream := "data: one\n\ndata: t\r\ndata: wo\r\r: c\n\ndata: three\n\n"
	// Every split of the stream into two reads, each read preceded by one
	// that has nothing yet.
	for cut := 0; cut <= len(stream); cut++ {
		src := &wouldBlock{chunks: [][]byte{[]byte(stream[:cut]), []byte(stream[cut:])}}
		rd := NewReader(src, 0)
		var got []string
		blocked := 0
		for {
			data, err := rd.Next()
			if errors.Is(err, syscall.EAGAIN) {
				blocked++
				if blocked > 10 {
					t.Fatalf("cut %d: EAGAIN %d times in a row", cut, blocked)
				}
				continue
			}
			blocked = 0
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("cut %d: %v", cut, err)
			}
			got = append(got, string(data))
		}
		if want := []string{"one", "t\nwo", "three"}; !slices.Equal(got, want) {
			t.Fatalf("cut %d: events %q, want %q", cut, got, want)
		}
	}
}

// A backlog, reads that fill the buffer they are given, is read a pooled
// buffer at a time rather than the small one: an agent that writes faster
// than its consumer reads costs one read of the source per startBuffer
// bytes, not per smallBuffer. Once the backlog is drained (the source has
// nothing more: EAGAIN), the reader holds only its small buffer again.
func TestABacklogIsReadAPooledBufferAtATime(t *testing.T) {
	event := "data: " + strings.Repeat("x", 90) + "\n\n"
	backlog := strings.Repeat(event, 200) // 19,600 bytes waiting at once
	var lens []int
	r := reader{r: readFunc(func(b []byte) (int, error) {
		lens = append(lens, len(b))
		if backlog == "" {
			return 0, syscall.EAGAIN
		}
		n := copy(b, backlog)
		backlog = backlog[n:]
		return n, nil
	}), max: 1 << 20, bom: true}
	events := 0
	for {
		data, err := r.next()
		if errors.Is(err, syscall.EAGAIN) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(data) != 90 {
			t.Fatalf("event %d: %d bytes", events, len(data))
		}
		events++
	}
	if events != 200 {
		t.Fatalf("%d events of 200", events)
	}
	if len(lens) < 3 || lens[0] != smallBuffer {
		t.Fatalf("reads with room for %v bytes: the first is not the small buffer", lens)
	}
	for i, n := range lens[1 : len(lens)-1] {
		if n < startBuffer*7/8 {
			t.Fatalf("read %d of the backlog had room for %d bytes (reads %v)", i+1, n, lens)
		}
	}
	if last := lens[len(lens)-1]; last != smallBuffer {
		t.Fatalf("the read that found the backlog drained had room for %d bytes, not the small buffer's %d (reads %v)", last, smallBuffer, lens)
	}
	if r.own != nil || &r.buf[0] != &r.small[0] {
		t.Fatalf("a pooled buffer of %d bytes is held once the backlog is drained", len(r.buf))
	}
}

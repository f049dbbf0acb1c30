package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
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

func TestEventsDataOutlivesIteration(t *testing.T) {
	var kept [][]byte
	for data, err := range Events(strings.NewReader("data: {\"a\":1}\n\ndata: {\"b\":2}\n\n"), 0) {
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, data)
	}
	if string(kept[0]) != `{"a":1}` || string(kept[1]) != `{"b":2}` {
		t.Fatalf("kept = %q", kept)
	}
}

func TestWriteFrame(t *testing.T) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if err := WriteFrame(w, []byte(`{"type":"RUN_STARTED"}`)); err != nil {
		t.Fatal(err)
	}
	if err := WritePing(w); err != nil {
		t.Fatal(err)
	}
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

func FuzzEvents(f *testing.F) {
	f.Add([]byte("data: {}\n\n"), 64)
	f.Add([]byte("data:a\r\ndata:b\r\n\r\n: c\n\nid: 1\n\n"), 8)
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		if max < 0 || max > 1<<16 {
			max = 0
		}
		for data, err := range Events(bytes.NewReader(in), max) {
			if err != nil {
				return
			}
			if len(data) == 0 {
				t.Fatal("empty data yielded")
			}
			if len(data) > len(in) {
				t.Fatalf("data longer than input: %d > %d", len(data), len(in))
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

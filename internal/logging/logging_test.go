package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"log"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
)

// TestDurationsAreSeconds pins that a duration attribute is written as
// seconds, a number, in both formats.
func TestDurationsAreSeconds(t *testing.T) {
	var js, text bytes.Buffer
	New("json", &js).Info("stream ended", "duration", 1500*time.Millisecond)
	New("text", &text).Info("stream ended", "duration", 1500*time.Millisecond)
	var rec map[string]any
	if err := json.Unmarshal(js.Bytes(), &rec); err != nil || rec["duration"] != 1.5 {
		t.Errorf("json: %s (duration %v)", js.String(), rec["duration"])
	}
	if !strings.Contains(text.String(), "duration=1.5") {
		t.Errorf("text: %s", text.String())
	}
}

// lockedBuffer is written by go-redis's goroutines and read by the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestCaptureRoutesDependencies pins that what go-redis prints (here: its
// pool failing to dial a Redis that is not there) and the standard log
// package's lines become JSON lines of the structured log, with a constant
// msg and their text as the message attribute, until restored.
func TestCaptureRoutesDependencies(t *testing.T) {
	var buf lockedBuffer
	restore := Capture(New("json", &buf))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	rdb := redis.NewClient(&redis.Options{Addr: dead, MaxRetries: -1, DialTimeout: time.Second})
	if err := rdb.Ping(context.Background()).Err(); err == nil {
		t.Fatal("PING answered by nothing")
	}
	rdb.Close()
	log.Printf("http: TLS handshake error from %s: EOF\nsecond line", "10.0.0.1:5")
	restore()

	var sawRedis bool
	var details []string
	for line := range strings.Lines(buf.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		switch rec["msg"] {
		case MsgRedis:
			sawRedis = sawRedis || strings.Contains(rec["message"].(string), dead)
		case MsgLibrary:
			details = append(details, rec["message"].(string))
		default:
			t.Errorf("unexpected line %q", line)
		}
	}
	if !sawRedis {
		t.Errorf("go-redis's failure to dial %s was not logged: %s", dead, buf.String())
	}
	if strings.Join(details, "|") != "http: TLS handshake error from 10.0.0.1:5: EOF|second line" {
		t.Errorf("log package lines: %q", details)
	}
}

// TestLinesCarryTheTraceOfTheirContext pins that a line logged with a
// context holding a span context gets its trace_id and span_id, and one
// logged without gets neither.
func TestLinesCarryTheTraceOfTheirContext(t *testing.T) {
	var js bytes.Buffer
	l := New("json", &js).With("threadId", "t1")
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
	})
	l.InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "stream ended")
	l.Info("stream ended")
	lines := strings.Split(strings.TrimSpace(js.String()), "\n")
	var with, without map[string]any
	if len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &with) != nil || json.Unmarshal([]byte(lines[1]), &without) != nil {
		t.Fatalf("log: %s", js.String())
	}
	if with["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" || with["span_id"] != "00f067aa0ba902b7" || with["threadId"] != "t1" {
		t.Errorf("line with a span: %v", with)
	}
	if _, ok := without["trace_id"]; ok {
		t.Errorf("line without a span: %v", without)
	}
}

// TestLogWritesWhatLogAttrsWrites pins that Log, which skips slog's lookup
// of the caller, writes the line LogAttrs writes: the logger's attributes,
// the trace of its context, durations as seconds, and nothing under the
// logger's level.
func TestLogWritesWhatLogAttrsWrites(t *testing.T) {
	var viaLog, viaAttrs bytes.Buffer
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	attrs := []slog.Attr{slog.String("end", "completed"), slog.Duration("duration", 1500*time.Millisecond)}
	Log(ctx, New("json", &viaLog).With("threadId", "t1"), slog.LevelInfo, "stream ended", attrs...)
	New("json", &viaAttrs).With("threadId", "t1").LogAttrs(ctx, slog.LevelInfo, "stream ended", attrs...)
	var got, want map[string]any
	if err := json.Unmarshal(viaLog.Bytes(), &got); err != nil {
		t.Fatalf("Log wrote %q: %v", viaLog.String(), err)
	}
	if err := json.Unmarshal(viaAttrs.Bytes(), &want); err != nil {
		t.Fatalf("LogAttrs wrote %q: %v", viaAttrs.String(), err)
	}
	delete(got, "time")
	delete(want, "time")
	if len(got) != len(want) || got["trace_id"] != want["trace_id"] || got["duration"] != 1.5 || got["threadId"] != "t1" || got["msg"] != "stream ended" || got["end"] != "completed" {
		t.Errorf("Log wrote %v, LogAttrs %v", got, want)
	}

	var quiet bytes.Buffer
	l := slog.New(traced{slog.NewJSONHandler(&quiet, &slog.HandlerOptions{Level: slog.LevelWarn})})
	Log(ctx, l, slog.LevelInfo, "stream ended", attrs...)
	if quiet.Len() != 0 {
		t.Errorf("a line under the logger's level was written: %q", quiet.String())
	}
}

// Package logging builds aguard's one structured log and routes into it what
// its dependencies would otherwise print on their own: go-redis's messages
// and those written with the standard library's log package (net/http's
// servers among them). fasthttp and OPA are given loggers where they are
// set up (package proxy, package policy).
//
// Every line has a msg that is constant for its kind: what varies (ids,
// reasons, a dependency's own text) goes in attributes, where the handler
// escapes it. Durations are written as seconds, a number. A line logged
// with a context that carries an OpenTelemetry span gets its trace_id and
// span_id.
package logging

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
)

// Constant messages of the lines that carry a dependency's own text (in
// the attribute "message").
const (
	MsgRedis   = "redis client"   // go-redis
	MsgLibrary = "library output" // the standard log package
)

// New returns the logger writing to w in format "json" or "text".
func New(format string, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{ReplaceAttr: seconds}
	if format == "json" {
		return slog.New(traced{slog.NewJSONHandler(w, opts)})
	}
	return slog.New(traced{slog.NewTextHandler(w, opts)})
}

// Log writes a record to l as l.LogAttrs does, but without looking up the
// caller's program counter: slog's Logger does that (runtime.Callers) for
// every record although aguard's handlers never write a source, and on a
// busy proxy the lookup, cold in the cache, cost about as much as writing the
// line (bench/README.md, "Log lines in batches"). For the lines logged
// once per stream or per decision.
func Log(ctx context.Context, l *slog.Logger, level slog.Level, msg string, attrs ...slog.Attr) {
	h := l.Handler()
	if !h.Enabled(ctx, level) {
		return
	}
	r := slog.NewRecord(time.Now(), level, msg, 0)
	r.AddAttrs(attrs...)
	_ = h.Handle(ctx, r) // as slog.Logger does: a handler's error is dropped
}

// traced adds trace_id and span_id to a record logged with a context that
// carries a valid span context (https://www.w3.org/TR/trace-context/, as
// lower-case hex).
type traced struct{ slog.Handler }

func (h traced) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traced) WithAttrs(as []slog.Attr) slog.Handler { return traced{h.Handler.WithAttrs(as)} }

func (h traced) WithGroup(name string) slog.Handler { return traced{h.Handler.WithGroup(name)} }

// seconds writes a duration as seconds, a number: not the JSON handler's
// integer nanoseconds, nor the text handler's "1.5s".
func seconds(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.Float64(a.Key, a.Value.Duration().Seconds())
	}
	return a
}

var captureMu sync.Mutex

// Capture sends what go-redis and the standard log package print to l, for
// the whole process, until the returned function restores them.
func Capture(l *slog.Logger) (restore func()) {
	captureMu.Lock()
	defer captureMu.Unlock()
	redis.SetLogger(redisLogger{l})
	prevOut, prevFlags, prevPrefix := log.Writer(), log.Flags(), log.Prefix()
	log.SetOutput(lineWriter{l})
	log.SetFlags(0)
	log.SetPrefix("")
	return func() {
		captureMu.Lock()
		defer captureMu.Unlock()
		redis.SetLogger(redisLogger{slog.New(slog.DiscardHandler)})
		log.SetOutput(prevOut)
		log.SetFlags(prevFlags)
		log.SetPrefix(prevPrefix)
	}
}

// redisLogger is go-redis's Logging: its messages (a connection pool that
// could not reconnect, a reply it could not read) are warnings.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if ctx == nil {
		ctx = context.Background()
	}
	r.l.Log(ctx, slog.LevelWarn, MsgRedis, "component", "go-redis", "message", fmt.Sprintf(format, v...))
}

// lineWriter logs each line written by the standard log package.
type lineWriter struct{ l *slog.Logger }

func (w lineWriter) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		if line = bytes.TrimRight(line, "\r\n"); len(line) > 0 {
			w.l.Warn(MsgLibrary, "component", "log", "message", string(line))
		}
	}
	return len(p), nil
}

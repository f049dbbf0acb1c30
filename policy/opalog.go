package policy

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/open-policy-agent/opa/v1/logging"
)

// opaLogger sends what OPA's plugins log to the Engine's logger, so that
// nothing OPA prints bypasses it: one record with the constant message "opa",
// OPA's text in the attribute "message" and OPA's fields as attributes. OPA's
// info lines (every status upload, every activation) go out at debug level:
// the Engine logs what matters of them itself ("policy loaded", "policy load
// failed"); warnings and errors keep their level.
type opaLogger struct {
	log    *slog.Logger
	fields []slog.Attr
}

var _ logging.Logger = opaLogger{}

func (l opaLogger) logf(level slog.Level, format string, a []any) {
	ctx := context.Background()
	if !l.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, len(l.fields)+1)
	attrs = append(attrs, slog.String("message", fmt.Sprintf(format, a...)))
	attrs = append(attrs, l.fields...)
	l.log.LogAttrs(ctx, level, "opa", attrs...)
}

// Debug logs at debug level.
func (l opaLogger) Debug(format string, a ...any) { l.logf(slog.LevelDebug, format, a) }

// Info logs at debug level.
func (l opaLogger) Info(format string, a ...any) { l.logf(slog.LevelDebug, format, a) }

// Warn logs at warning level.
func (l opaLogger) Warn(format string, a ...any) { l.logf(slog.LevelWarn, format, a) }

// Error logs at error level.
func (l opaLogger) Error(format string, a ...any) { l.logf(slog.LevelError, format, a) }

// WithFields returns a logger adding fields to each record.
func (l opaLogger) WithFields(fields map[string]any) logging.Logger {
	out := l
	out.fields = make([]slog.Attr, 0, len(l.fields)+len(fields))
	out.fields = append(out.fields, l.fields...)
	for k, v := range fields {
		out.fields = append(out.fields, slog.Any(k, v))
	}
	return out
}

// GetLevel reports info: OPA sends everything from info up, and the slog
// handler has the last word.
func (opaLogger) GetLevel() logging.Level { return logging.Info }

// SetLevel does nothing: the slog handler's level rules.
func (opaLogger) SetLevel(logging.Level) {}

package policy

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"
)

// defaultWatchInterval is the poll period of Watch when none is given.
const defaultWatchInterval = 2 * time.Second

// Reload reads the policy folder again, compiles it and, when that works,
// swaps it in: decisions that start afterwards use it, decisions in flight
// finish on the previous one. When it fails the previous policy keeps
// serving, the error is logged, kept for Status and returned; it names the
// file and line at fault. Reload of the embedded set recompiles it. Concurrent
// calls are serialised.
func (e *Engine) Reload(ctx context.Context) error {
	e.reloadMu.Lock()
	defer e.reloadMu.Unlock()

	snap, err := readSnapshot(e.src, false)
	var seen string
	var p *prepared
	if err == nil {
		seen = hex.EncodeToString(snap.sum[:])
		p, err = e.prepare(ctx, snap)
	} else {
		seen = "error: " + err.Error()
	}
	if err != nil {
		err = fmt.Errorf("policy: load %s: %w", e.src.name("."), err)
	}

	e.mu.Lock()
	e.lastSeen = seen
	e.lastErr = err
	e.mu.Unlock()

	if err != nil {
		e.log.LogAttrs(ctx, slog.LevelError, "policy load failed",
			slog.String("dir", e.dir), slog.String("serving", e.servingRevision()), slog.String("error", err.Error()))
		return err
	}
	previous := e.servingRevision()
	e.current.Store(p)
	e.log.LogAttrs(ctx, slog.LevelInfo, "policy loaded",
		slog.String("dir", e.dir), slog.String("revision", p.revision), slog.String("previous", previous))
	return nil
}

func (e *Engine) servingRevision() string {
	if p := e.current.Load(); p != nil {
		return p.revision
	}
	return ""
}

// Watch polls the policy folder every interval (2s when interval <= 0) and
// reloads when the content of its .rego, .json or .yaml files differs from
// what the last load attempt read and has stayed the same for one more poll,
// so that a file caught half-written is not compiled. A broken policy is thus
// reported once, not at every poll, and fixing it reloads. Errors are logged
// and kept for Status. Watch returns when ctx is done; for the embedded set,
// which cannot change, it returns at once.
func (e *Engine) Watch(ctx context.Context, interval time.Duration) {
	if e.dir == "" {
		return
	}
	if interval <= 0 {
		interval = defaultWatchInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	pending := "" // a changed content seen at the previous poll
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		seen := e.contentKey()
		e.mu.Lock()
		changed := seen != e.lastSeen
		e.mu.Unlock()
		switch {
		case !changed:
			pending = ""
		case seen != pending:
			pending = seen // wait for it to settle
		default:
			pending = ""
			_ = e.Reload(ctx) // logged and kept for Status by Reload
		}
	}
}

// contentKey identifies the content of the policy folder: its hash, or the
// error that kept it from being read.
func (e *Engine) contentKey() string {
	snap, err := readSnapshot(e.src, false)
	if err != nil {
		return "error: " + err.Error()
	}
	return hex.EncodeToString(snap.sum[:])
}

// Status reports the revision of the policy that is serving (a short hash
// of its files) and the error of the last load attempt, nil when that
// attempt succeeded. A non-nil error with a revision means a broken policy was
// refused and the previous one is still deciding.
func (e *Engine) Status() (revision string, lastErr error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.servingRevision(), e.lastErr
}

package policy

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"
)

// closeTimeout bounds the last decision-log upload when Close is given a
// context without a deadline.
const closeTimeout = 5 * time.Second

// Reload reads the policy folder (or bundle file) again, compiles it and,
// when that works, swaps it in: decisions that start afterwards use it,
// decisions in flight finish on the previous one. When it fails the previous
// policy keeps serving, the error is logged, counted (LoadFailures), kept for
// Status and returned; it names the file and line at fault. Reload of the
// embedded set recompiles it. Concurrent calls are serialised. With an OPA
// configuration, bundles are reloaded by OPA and Reload does nothing.
func (e *Engine) Reload(ctx context.Context) error {
	if e.opa != nil {
		return nil
	}
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
		e.failures.Add(1)
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
// of its files, or the bundle's manifest revision) and the error of the last
// load attempt, nil when that attempt succeeded. A non-nil error with a
// revision means a broken policy was refused and the previous one is still
// deciding. With an OPA configuration, the error is that of the bundles
// whose last download or activation failed.
func (e *Engine) Status() (revision string, lastErr error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.servingRevision(), e.lastErr
}

// Ready reports whether a policy is serving. ok is false while none is —
// with an OPA configuration, until the first bundle is active — and reason
// says why; ok true with a reason means degraded: the last load failed and
// the last good policy keeps serving.
func (e *Engine) Ready() (ok bool, reason string) {
	rev, err := e.Status()
	switch {
	case rev == "" && err != nil:
		return false, "no policy is serving: " + err.Error()
	case rev == "" && e.opa != nil:
		return false, "no policy is serving: waiting for the first bundle"
	case rev == "":
		return false, "no policy is serving"
	case err != nil:
		return true, "policy load failed, the last good policy (revision " + rev + ") is serving: " + err.Error()
	}
	return true, ""
}

// LoadFailures counts the loads that failed since the Engine was created:
// folder reloads, and with an OPA configuration every bundle download or
// activation that failed (OPA retries at its polling interval).
func (e *Engine) LoadFailures() uint64 {
	return e.failures.Load()
}

// Close stops what the Engine runs in the background: with an OPA
// configuration, OPA's plugins, after a last upload of the decision log
// bounded by ctx (5s when ctx has no deadline). Decisions after Close still
// work, on the last policy, but are no longer sent to the decision log.
func (e *Engine) Close(ctx context.Context) {
	if e.opa == nil {
		return
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, closeTimeout)
		defer cancel()
	}
	e.opa.stop(ctx)
}

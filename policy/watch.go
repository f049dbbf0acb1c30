package policy

import (
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

const (
	// defaultWatchInterval is the poll period of Watch's fallback when none
	// is given.
	defaultWatchInterval = 2 * time.Second
	// watchSettle is how long the folder must stay quiet after a change
	// before it is read, so that a file being written is read whole.
	watchSettle = 100 * time.Millisecond
	// watchMaxDelay bounds the wait for quiet: a folder that keeps changing
	// is read this long after its first change all the same.
	watchMaxDelay = 500 * time.Millisecond
)

// Watch reloads the policy folder (or bundle file) when it changes, until
// ctx is done. It is told of changes by the operating system (fsnotify:
// inotify on Linux) and reads the folder once it has been quiet for 100ms
// (500ms at most after the first change), so a change applies well within a
// second. It also polls the folder every interval (2s when interval <= 0),
// reloading when the content has changed and stayed the same for one more
// poll: that catches changes whose notification was lost, and is all it
// does when notifications cannot be had (no inotify instance left, a file
// system without them) or the watched folder itself goes away.
//
// Either way it reloads only when the content of the .rego, .json and .yaml
// files differs from what the last load attempt read, so a broken policy is
// reported once, not at every change of an unrelated file, and fixing it
// reloads. Errors are logged and kept for Status. For the embedded set, which
// cannot change, and with an OPA configuration, whose bundles OPA polls,
// Watch returns at once.
func (e *Engine) Watch(ctx context.Context, interval time.Duration) {
	if e.dir == "" || e.opa != nil {
		return
	}
	if interval <= 0 {
		interval = defaultWatchInterval
	}
	if !e.notify(ctx, interval) {
		e.poll(ctx, interval)
	}
}

// notify watches with fsnotify until ctx is done (true), or until
// notifications stop working (false: the caller polls).
func (e *Engine) notify(ctx context.Context, interval time.Duration) bool {
	root := e.dir
	if e.src.bundle != "" {
		root = filepath.Dir(e.dir) // a file is watched through its folder
	}
	w, err := fsnotify.NewWatcher()
	if err == nil {
		err = addTree(w, root)
	}
	if err != nil {
		if w != nil {
			w.Close()
		}
		e.log.LogAttrs(ctx, slog.LevelWarn, "policy folder not watched, polling",
			slog.String("dir", e.dir), slog.String("error", err.Error()))
		return false
	}
	defer w.Close()
	// A change made between the first load and the watch being set up is
	// caught by this first look.
	e.reloadIfChanged(ctx)

	settle := time.NewTimer(time.Hour)
	settle.Stop()
	var first time.Time // first change not yet read; zero when none
	// Notifications can be lost (an overflowed queue, a file system that
	// sends none for some changes): the folder is also polled, as the
	// fallback does.
	tick := time.NewTicker(interval)
	defer tick.Stop()
	pending := ""
	for {
		select {
		case <-ctx.Done():
			return true
		case <-tick.C:
			e.pollOnce(ctx, &pending)
			continue
		case ev, ok := <-w.Events:
			if !ok {
				return false
			}
			if ev.Name == root && ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 {
				e.log.LogAttrs(ctx, slog.LevelWarn, "policy folder not watched, polling",
					slog.String("dir", e.dir), slog.String("error", "the watched folder was removed or renamed"))
				return false
			}
			if ev.Op&fsnotify.Create != 0 {
				if info, err := os.Stat(ev.Name); err == nil && info.IsDir() && !hidden(ev.Name) {
					_ = addTree(w, ev.Name) // a new subfolder: watch it too
				}
			}
		case err, ok := <-w.Errors:
			if !ok {
				return false
			}
			// An overflowed event queue loses events: read the folder.
			e.log.LogAttrs(ctx, slog.LevelWarn, "policy folder watch error",
				slog.String("dir", e.dir), slog.String("error", err.Error()))
		case <-settle.C:
			first = time.Time{}
			e.reloadIfChanged(ctx)
			continue
		}
		now := time.Now()
		if first.IsZero() {
			first = now
		}
		settle.Reset(min(watchSettle, max(0, first.Add(watchMaxDelay).Sub(now))))
	}
}

// addTree watches dir and its subfolders, except those whose name starts
// with "." (they are not read either).
func addTree(w *fsnotify.Watcher, dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if path != dir && hidden(path) {
			return fs.SkipDir
		}
		return w.Add(path)
	})
}

func hidden(path string) bool {
	return strings.HasPrefix(filepath.Base(path), ".")
}

// reloadIfChanged reloads when the folder's content differs from what the
// last load attempt read.
func (e *Engine) reloadIfChanged(ctx context.Context) {
	seen := e.contentKey()
	e.mu.Lock()
	changed := seen != e.lastSeen
	e.mu.Unlock()
	if changed {
		_ = e.Reload(ctx) // logged and kept for Status by Reload
	}
	e.looks.Add(1)
}

// poll checks the folder every interval until ctx is done.
func (e *Engine) poll(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	pending := "" // a changed content seen at the previous poll
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			e.pollOnce(ctx, &pending)
		}
	}
}

// pollOnce looks at the folder and reloads when its content has changed
// and stayed the same since the previous look (*pending), so that a file
// caught half-written is not compiled.
func (e *Engine) pollOnce(ctx context.Context, pending *string) {
	seen := e.contentKey()
	e.mu.Lock()
	changed := seen != e.lastSeen
	e.mu.Unlock()
	switch {
	case !changed:
		*pending = ""
	case seen != *pending:
		*pending = seen // wait for it to settle
	default:
		*pending = ""
		_ = e.Reload(ctx) // logged and kept for Status by Reload
	}
	e.looks.Add(1)
}

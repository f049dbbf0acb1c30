package policy

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/syncbuf"
)

// watching runs e.Watch with interval until the test ends.
func watching(t *testing.T, e *Engine, interval time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Watch(ctx, interval)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Watch did not return after its context was cancelled")
		}
	})
}

// waitLogged waits until logs hold n lines containing s.
func waitLogged(t *testing.T, logs *syncbuf.Buffer, s string, n int) {
	t.Helper()
	await.For(t, "log line "+s, func() bool { return strings.Count(logs.String(), s) >= n })
}

// extraPolicy allows with data.extra.reason, or def when there is none.
func extraPolicy(def string) string {
	return "package aguard\n\ndefault reason := \"" + def + "\"\n\nreason := data.extra.reason\n\ndecision := {\"action\": \"allow\", \"reason\": reason}\n"
}

// With polling set to an hour, only a notification can bring a change in.
func TestWatchAppliesChangesByNotification(t *testing.T) {
	dir := policyDir(t, map[string]string{
		"policy.rego": extraPolicy("v1"),
	})
	var logs syncbuf.Buffer
	e := newEngine(t, Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	watching(t, e, time.Hour)
	// The watch starts with a look at the folder; wait for it to be set up
	// by making a first change and seeing it applied.
	start := time.Now()
	writeAtomic(t, dir, map[string]string{"policy.rego": extraPolicy("v2")})
	await.For(t, "v2", func() bool { return reasonOf(t, e) == "v2" })
	t.Logf("an edited file applied %v after it was written", time.Since(start).Round(time.Millisecond))

	// A folder created after the watch started is watched too.
	if err := os.MkdirAll(filepath.Join(dir, "extra"), 0o755); err != nil {
		t.Fatal(err)
	}
	loads := strings.Count(logs.String(), "policy loaded")
	writeFiles(t, dir, map[string]string{"extra/data.json": `{"reason": "from a new folder"}`})
	await.For(t, "the new folder's data", func() bool { return reasonOf(t, e) == "from a new folder" })
	waitLogged(t, &logs, "policy loaded", loads+1)
	if strings.Contains(logs.String(), "polling") {
		t.Errorf("the watch fell back to polling:\n%s", logs.String())
	}
}

// A Kubernetes ConfigMap volume changes by swapping a symbolic link
// (..data) to a new hidden folder; the visible files are links through it.
func TestWatchFollowsAConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, reason string) {
		writeFiles(t, dir, map[string]string{name + "/policy.rego": "package aguard\n\ndecision := {\"action\": \"allow\", \"reason\": \"" + reason + "\"}\n"})
	}
	version("..v1", "v1")
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/policy.rego", filepath.Join(dir, "policy.rego")); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, Options{Dir: dir})
	if got := reasonOf(t, e); got != "v1" {
		t.Fatalf("reason %q, want v1", got)
	}
	watching(t, e, time.Hour)

	version("..v2", "v2")
	if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	await.For(t, "v2 through the swapped link", func() bool { return reasonOf(t, e) == "v2" })
}

// When the watched folder itself is replaced, notifications for it stop:
// the watch says so and polls.
func TestWatchFallsBackToPollingWhenTheFolderIsReplaced(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "policy")
	writeFiles(t, dir, constPolicy(`{"action": "allow", "reason": "v1"}`))
	var logs syncbuf.Buffer
	e := newEngine(t, Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	watching(t, e, 20*time.Millisecond)
	// The first look of the watch is logged only when something changed;
	// make sure the watch is set up before replacing the folder.
	writeAtomic(t, dir, constPolicy(`{"action": "allow", "reason": "v2"}`))
	await.For(t, "v2", func() bool { return reasonOf(t, e) == "v2" })

	next := filepath.Join(parent, "policy.next")
	writeFiles(t, next, constPolicy(`{"action": "allow", "reason": "v3"}`))
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, dir); err != nil {
		t.Fatal(err)
	}
	await.For(t, "v3", func() bool { return reasonOf(t, e) == "v3" })
	waitLogged(t, &logs, "policy folder not watched, polling", 1)
}

func TestWatchReloadsABundleFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.tar.gz")
	if err := os.WriteFile(file, buildBundle(t, constPolicy(`{"action": "allow", "reason": "b1"}`), "b1", ""), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, Options{Dir: file})
	if rev, _ := e.Status(); rev != "b1" {
		t.Fatalf("revision %q, want the manifest's b1", rev)
	}
	watching(t, e, time.Hour)
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, buildBundle(t, constPolicy(`{"action": "allow", "reason": "b2"}`), "b2", ""), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	await.For(t, "b2", func() bool { return reasonOf(t, e) == "b2" })
	if rev, _ := e.Status(); rev != "b2" {
		t.Errorf("revision %q, want b2", rev)
	}
}

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

const brokenPolicy = "package aguard\n\ndecision := {\"action\": \"deny\"}\n\ndeny {\n  true\n}\n"

func reasonOf(t *testing.T, e *Engine) string {
	t.Helper()
	d := e.Decide(context.Background(), frontendCall())
	if d.Err != nil {
		t.Fatalf("Decide: %v", d.Err)
	}
	return d.Reason
}

func TestReload(t *testing.T) {
	ctx := context.Background()
	dir := policyDir(t, constPolicy(`{"action": "allow", "reason": "v1"}`))
	e := newEngine(t, Options{Dir: dir})
	rev1, err := e.Status()
	if err != nil || rev1 == "" {
		t.Fatalf("Status = %q, %v", rev1, err)
	}

	steps := []struct {
		name       string
		files      map[string]string
		remove     string
		wantErr    []string // substrings of Reload's error; nil = success
		wantReason string
	}{
		{name: "changed decision is picked up", files: constPolicy(`{"action": "allow", "reason": "v2"}`), wantReason: "v2"},
		{name: "data change is picked up", files: map[string]string{
			"policy.rego": "package aguard\n\ndecision := {\"action\": \"allow\", \"reason\": data.cfg.reason}\n",
			"data.json":   `{"cfg": {"reason": "from data"}}`,
		}, wantReason: "from data"},
		{name: "broken policy keeps the last good one", files: map[string]string{"policy.rego": brokenPolicy},
			wantErr: []string{filepath.Join(dir, "policy.rego") + ":5", "rego_parse_error"}, wantReason: "from data"},
		{name: "policy without decision keeps the last good one", files: map[string]string{"policy.rego": "package aguard\n\nx := 1\n"},
			wantErr: []string{"no rule defines data.aguard.decision"}, wantReason: "from data"},
		{name: "fixed policy serves again", files: constPolicy(`{"action": "allow", "reason": "v3"}`), remove: "data.json", wantReason: "v3"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			revBefore, _ := e.Status()
			writeFiles(t, dir, st.files)
			if st.remove != "" {
				if err := os.Remove(filepath.Join(dir, st.remove)); err != nil {
					t.Fatal(err)
				}
			}
			err := e.Reload(ctx)
			rev, statusErr := e.Status()
			if st.wantErr == nil {
				if err != nil || statusErr != nil {
					t.Fatalf("Reload = %v, Status error = %v; want both nil", err, statusErr)
				}
				if rev == revBefore {
					t.Errorf("revision stayed %s after a change", rev)
				}
			} else {
				if err == nil {
					t.Fatal("Reload succeeded, want an error")
				}
				for _, want := range st.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("Reload error %q does not contain %q", err, want)
					}
				}
				if statusErr == nil || statusErr.Error() != err.Error() {
					t.Errorf("Status error = %v, want %v", statusErr, err)
				}
				if rev != revBefore {
					t.Errorf("revision changed from %s to %s on a failed reload", revBefore, rev)
				}
			}
			if got := reasonOf(t, e); got != st.wantReason {
				t.Errorf("decision reason = %q, want %q", got, st.wantReason)
			}
		})
	}
}

func TestRevisionIsContentHash(t *testing.T) {
	a := newEngine(t, Options{Dir: policyDir(t, constPolicy(`{"action": "allow"}`))})
	b := newEngine(t, Options{Dir: policyDir(t, constPolicy(`{"action": "allow"}`))})
	c := newEngine(t, Options{Dir: policyDir(t, constPolicy(`{"action": "deny"}`))})
	ra, _ := a.Status()
	rb, _ := b.Status()
	rc, _ := c.Status()
	if ra != rb || ra == rc || len(ra) != 12 {
		t.Errorf("revisions %q %q %q: want equal for equal content, different otherwise, 12 hex digits", ra, rb, rc)
	}
}

// writeAtomic replaces files in dir the way deployment tools do: write a
// hidden temporary file, then rename it over the old one.
func writeAtomic(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		tmp := filepath.Join(dir, ".tmp-"+name)
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// awaitLook waits until Watch has looked at the folder at least once after
// the call: Watch looks one at a time, so of two looks completed after the
// call, the second began after it.
func awaitLook(t *testing.T, e *Engine) {
	t.Helper()
	after := e.looks.Load() + 2
	await.For(t, "the watcher to look at the folder", func() bool { return e.looks.Load() >= after })
}

func TestWatch(t *testing.T) {
	dir := policyDir(t, constPolicy(`{"action": "allow", "reason": "v1"}`))
	var logs syncbuf.Buffer
	e := newEngine(t, Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Watch(ctx, 10*time.Millisecond)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Watch did not return after its context was cancelled")
		}
	}()

	writeAtomic(t, dir, constPolicy(`{"action": "allow", "reason": "v2"}`))
	await.For(t, "the new decision", func() bool { return reasonOf(t, e) == "v2" })

	goodRev, _ := e.Status()
	writeAtomic(t, dir, map[string]string{"policy.rego": brokenPolicy})
	await.For(t, "the broken policy to be reported", func() bool { _, err := e.Status(); return err != nil })
	rev, err := e.Status()
	if !strings.Contains(err.Error(), "policy.rego:5") || rev != goodRev {
		t.Errorf("Status = %q, %v; want %q and an error naming policy.rego:5", rev, err, goodRev)
	}
	if got := reasonOf(t, e); got != "v2" {
		t.Errorf("reason %q while the broken policy is on disk, want v2", got)
	}
	// The broken content is reported once, not at every look.
	awaitLook(t, e)
	if n := strings.Count(logs.String(), "policy load failed"); n != 1 {
		t.Errorf("broken policy logged %d times, want once", n)
	}

	loaded := strings.Count(logs.String(), "policy loaded")
	writeAtomic(t, dir, constPolicy(`{"action": "allow", "reason": "v3"}`))
	// The load is logged just after Status reports it: wait for both.
	await.For(t, "the fixed policy", func() bool {
		_, err := e.Status()
		return err == nil && strings.Count(logs.String(), "policy loaded") > loaded
	})
	if got := reasonOf(t, e); got != "v3" {
		t.Errorf("reason %q after the fix, want v3", got)
	}

	// A test file is not part of the policy: changing it reloads nothing.
	rev, _ = e.Status()
	loads := strings.Count(logs.String(), "policy loaded")
	writeAtomic(t, dir, map[string]string{"policy_test.rego": "package aguard_test\n"})
	awaitLook(t, e)
	if r, _ := e.Status(); r != rev || strings.Count(logs.String(), "policy loaded") != loads {
		t.Errorf("changing a _test.rego file reloaded the policy")
	}
}

func TestWatchEmbeddedReturns(t *testing.T) {
	e := newEngine(t, Options{})
	done := make(chan struct{})
	go func() {
		e.Watch(context.Background(), time.Millisecond)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Watch of the embedded set did not return")
	}
	if err := e.Reload(context.Background()); err != nil {
		t.Errorf("Reload of the embedded set: %v", err)
	}
}

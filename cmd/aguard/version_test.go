package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// TestReadVersion pins how the revision is chosen: one set with -ldflags
// wins over the build information's; vcs.modified is shown only for the
// revision it describes; neither leaves the revision unknown.
func TestReadVersion(t *testing.T) {
	stamped := &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "aaaa"}, {Key: "vcs.modified", Value: "true"}}}
	tests := []struct {
		name, revision string
		info           *debug.BuildInfo
		want           versionInfo
	}{
		{"stamped", "", stamped, versionInfo{Version: "v1", Revision: "aaaa", Modified: "true"}},
		{"ldflags over the stamp", "bbbb", stamped, versionInfo{Version: "v1", Revision: "bbbb"}},
		{"ldflags naming the stamped revision", "aaaa", stamped, versionInfo{Version: "v1", Revision: "aaaa", Modified: "true"}},
		{"ldflags, stamping off", "bbbb", &debug.BuildInfo{}, versionInfo{Version: "v1", Revision: "bbbb"}},
		{"neither", "", &debug.BuildInfo{}, versionInfo{Version: "v1"}},
		{"no build information", "", nil, versionInfo{Version: "v1"}},
	}
	for _, tt := range tests {
		got := readVersion("v1", tt.revision, tt.info)
		got.Go = ""
		if got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
	if s := readVersion("v1", "", nil).String(); !strings.Contains(s, "revision: unknown (built without VCS stamping; build with -ldflags \"-X main.revision=$(git rev-parse HEAD)\")") {
		t.Errorf("an unknown revision is not explained:\n%s", s)
	}
}

// gitCopy copies the module into a new git repository with one commit, so
// that builds can stamp a known revision wherever the tests run (a tarball,
// a git worktree, whose .git Go does not read), and returns its directory
// and the commit.
func gitCopy(t *testing.T) (dir, head string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed; building with VCS stamping needs it")
	}
	dir = t.TempDir()
	err := filepath.WalkDir(moduleRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(moduleRoot, p)
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || rel == "bin") {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() || rel == "aguard" || d.Name() == ".git" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, _ := d.Info()
		os.MkdirAll(filepath.Join(dir, filepath.Dir(rel)), 0o755)
		return os.WriteFile(filepath.Join(dir, rel), data, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-c", "user.name=aguard test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "a copy to build")
	return dir, git("rev-parse", "HEAD")
}

// build runs a command line in dir with GOFLAGS set to goflags and
// -trimpath, which keeps the copy's compiled packages in the build cache
// from one test run to the next (it changes nothing about the revision).
func build(t *testing.T, dir, goflags string, args ...string) {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS="+goflags+" -trimpath")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// versionOf runs bin --version.
func versionOf(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", bin, err)
	}
	return string(out)
}

// dockerfileBuild is the RUN instruction of deploy/Dockerfile that builds
// aguard, continuation lines joined, without "RUN" and its options.
func dockerfileBuild(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(moduleRoot, "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := regexp.MustCompile(`(?m)^\s*#.*\n`).ReplaceAllString(string(b), "")
	text = strings.ReplaceAll(text, "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "RUN ") && strings.Contains(line, "./cmd/aguard") {
			return regexp.MustCompile(`^RUN\s+(--\S+\s+)*`).ReplaceAllString(line, "")
		}
	}
	t.Fatal("deploy/Dockerfile: no RUN builds ./cmd/aguard")
	return ""
}

// TestVersionRevision builds aguard the two ways it gets built and pins the
// revision --version prints: stamped by Go (VCS stamping on), and with VCS
// stamping off from -ldflags, with the README's build command. Which
// revision wins when both are given, and the modified line, are
// TestReadVersion's; that deploy/Dockerfile passes -X main.revision from a
// required build argument is checked in package deploy and by
// TestDockerfileBuildNeedsARevision.
func TestVersionRevision(t *testing.T) {
	dir, head := gitCopy(t)
	out := t.TempDir()

	t.Run("VCS stamping on", func(t *testing.T) {
		bin := filepath.Join(out, "stamped")
		build(t, dir, "-buildvcs=true", "go", "build", "-o", bin, "./cmd/aguard")
		if v := versionOf(t, bin); !strings.Contains(v, "\nrevision: "+head+"\nmodified: false\n") {
			t.Fatalf("--version:\n%s\nwant revision %s, not modified", v, head)
		}
	})
	t.Run("README build command, VCS stamping off", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(dir, "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		line := regexp.MustCompile(`(?m)^go build .*-o aguard \./cmd/aguard$`).FindString(string(b))
		if line == "" || !strings.Contains(line, "-ldflags") {
			t.Fatalf("README.md has no `go build -ldflags … -o aguard ./cmd/aguard` line")
		}
		build(t, dir, "-buildvcs=false", "sh", "-c", line)
		if v := versionOf(t, filepath.Join(dir, "aguard")); !strings.Contains(v, "\nrevision: "+head+"\n") {
			t.Fatalf("%s\n--version:\n%s\nwant revision %s", line, v, head)
		}
	})
}

// TestDockerfileBuildNeedsARevision runs deploy/Dockerfile's build step
// without the REVISION build argument: it stops before compiling and says
// how to pass one.
func TestDockerfileBuildNeedsARevision(t *testing.T) {
	out := t.TempDir()
	step := strings.ReplaceAll(dockerfileBuild(t), "/out/", out+"/")
	cmd := exec.Command("sh", "-c", step)
	cmd.Dir = moduleRoot
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REVISION=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "VERSION=dev", "TARGETOS=linux", "TARGETARCH=amd64")
	msg, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "REVISION") || !strings.Contains(string(msg), "--build-arg REVISION=$(git rev-parse HEAD)") {
		t.Fatalf("the build step without REVISION: %v\n%s", err, msg)
	}
	if entries, _ := os.ReadDir(out); len(entries) > 0 {
		t.Fatalf("the build step without REVISION built %v", entries)
	}
}

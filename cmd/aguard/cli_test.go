package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/aguard/aguard/config"
	"github.com/spf13/cobra"
)

// runAguard runs one aguard command line as a process of the built binary,
// with the test's environment.
func runAguard(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(buildAguard(t), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("aguard %s: %v", strings.Join(args, " "), err)
	}
	return code, out.String(), errOut.String()
}

// commandPaths lists every command under c, c first, as typed after
// "aguard": nil for aguard itself, {"policy", "test"}, ….
func commandPaths(c *cobra.Command, prefix []string) [][]string {
	out := [][]string{prefix}
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			out = append(out, commandPaths(sub, append(slices.Clone(prefix), sub.Name()))...)
		}
	}
	return out
}

// TestHelpGoesToStdoutAndExitsZero pins that every command and subcommand
// answers --help, -h and `aguard help <command>` with its own help on stdout,
// nothing on stderr, and exit 0; `aguard policy test --help` reads no folder.
func TestHelpGoesToStdoutAndExitsZero(t *testing.T) {
	paths := commandPaths(newRootCmd(), nil)
	if len(paths) < 9 {
		t.Fatalf("commands = %q, want aguard, serve, config, config check, demo, replay, policy, policy test, version", paths)
	}
	for _, path := range paths {
		forms := [][]string{append(slices.Clone(path), "--help"), append(slices.Clone(path), "-h"), append([]string{"help"}, path...)}
		for _, args := range forms {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				code, stdout, stderr := runAguard(t, args...)
				if code != 0 || stderr != "" {
					t.Fatalf("exit %d, stderr %q", code, stderr)
				}
				usage := "Usage:\n  " + strings.Join(append([]string{"aguard"}, path...), " ")
				if !strings.Contains(stdout, usage) {
					t.Fatalf("stdout lacks %q:\n%s", usage, stdout)
				}
			})
		}
	}
	// Without a command: the help, on stdout.
	if code, stdout, stderr := runAguard(t); code != 0 || stderr != "" || !strings.Contains(stdout, "Usage:\n  aguard <command>") {
		t.Fatalf("aguard: exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
	}
}

// flagEntries splits the Flags section of a help text into one entry per
// flag, by long name, its continuation lines joined.
func flagEntries(t *testing.T, help string) map[string]string {
	t.Helper()
	_, flags, ok := strings.Cut(help, "\nFlags:\n")
	if !ok {
		t.Fatalf("no Flags section:\n%s", help)
	}
	flags, _, _ = strings.Cut(flags, "\n\n")
	flags = strings.TrimSuffix(flags, "\n")
	start := regexp.MustCompile(`^  (?:-\w, |    )--([a-z0-9-]+)`)
	entries := map[string]string{}
	name := ""
	for _, line := range strings.Split(flags, "\n") {
		if m := start.FindStringSubmatch(line); m != nil {
			name = m[1]
			entries[name] = strings.TrimSpace(line)
			continue
		}
		if name == "" || !strings.HasPrefix(line, "    ") {
			t.Fatalf("line %q is neither a flag nor its continuation:\n%s", line, flags)
		}
		entries[name] += " " + strings.TrimSpace(line)
	}
	return entries
}

// TestSettingsHelpNamesEnvironmentAndDefault pins the help of serve and of
// config check: every setting of config.Flags as a GNU long flag, its
// environment variable, and its default only when it has one.
func TestSettingsHelpNamesEnvironmentAndDefault(t *testing.T) {
	for _, cmd := range [][]string{{"serve", "--help"}, {"config", "check", "--help"}} {
		_, stdout, _ := runAguard(t, cmd...)
		if strings.Contains(stdout, `(default "")`) || regexp.MustCompile(`(?m)^\s+-[a-z]{2,}`).MatchString(stdout) {
			t.Errorf("%v: a single-dash long flag or an empty default:\n%s", cmd, stdout)
		}
		entries := flagEntries(t, stdout)
		for _, f := range append(slices.Clone(config.Flags), config.Flag{Name: "config"}) {
			e, ok := entries[f.Name]
			if !ok {
				t.Errorf("%v: no entry for --%s", cmd, f.Name)
				continue
			}
			env := f.Env()
			if !strings.Contains(e, "env "+env+")") {
				t.Errorf("%v: --%s does not name %s: %q", cmd, f.Name, env, e)
			}
			hasDefault := strings.Contains(e, "(default ")
			if f.Default == "" && hasDefault {
				t.Errorf("%v: --%s has no default but its help shows one: %q", cmd, f.Name, e)
			}
			if f.Default != "" && !strings.Contains(e, "(default "+f.Default+";") {
				t.Errorf("%v: --%s: help does not show its default %s: %q", cmd, f.Name, f.Default, e)
			}
		}
	}
}

// TestGNUFlagForms pins both GNU spellings of a flag, a repeated flag, and a
// flag's precedence over the environment, through config check.
func TestGNUFlagForms(t *testing.T) {
	t.Setenv("AGUARD_MODE", "enforce")
	for _, args := range [][]string{
		{"config", "check", "--upstream", "http://agent:8000", "--mode", "monitor", "--webhook", "http://h/1", "--webhook", "http://h/2"},
		{"config", "check", "--upstream=http://agent:8000", "--mode=monitor", "--webhook=http://h/1", "--webhook=http://h/2"},
	} {
		code, stdout, stderr := runAguard(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		for _, want := range []string{
			`(?m)^upstream +http://agent:8000 +flag --upstream$`,
			`(?m)^mode +monitor +flag --mode$`,
			`(?m)^webhook +http://h/1, http://h/2 +flag --webhook$`,
		} {
			if !regexp.MustCompile(want).MatchString(stdout) {
				t.Errorf("%v: stdout does not match %s:\n%s", args, want, stdout)
			}
		}
	}
}

// TestConfigCheckPrintsEachSettingAndItsSource pins config check's report:
// every setting once, its value and its source (flag, env, file, default),
// secrets redacted, the routes of the file, and the policy that loads.
func TestConfigCheckPrintsEachSettingAndItsSource(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "aguard.yaml")
	os.WriteFile(file, []byte("upstream: http://file-agent:8000\nmax-event: 4MiB\nwebhook-secret: file-secret-value\n"+
		"routes:\n  - path: /agents/research\n    upstream: http://research:8000\n    protocol: 0.x\n"), 0o600)
	reviewers := filepath.Join(dir, "reviewers.yaml")
	os.WriteFile(reviewers, []byte("- name: alice\n  tokenSha256: "+strings.Repeat("ab", 32)+"\n  role: reviewer\n"), 0o600)
	t.Setenv("AGUARD_ADMIN_TOKEN", "env-token-value")
	t.Setenv("AGUARD_MAX_EVENT", "2MiB")
	t.Setenv("AGUARD_CONFIG", file)
	code, stdout, stderr := runAguard(t, "config", "check", "--max-event=1MiB", "--redis", "redis://:redis-password@redis:6379/0",
		"--webhook", "http://hooks/in?token=query-token", "--admin-tokens", reviewers)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, secret := range []string{"env-token-value", "file-secret-value", "redis-password", "query-token"} {
		if strings.Contains(stdout, secret) {
			t.Errorf("config check printed the secret %q:\n%s", secret, stdout)
		}
	}
	for _, want := range []string{
		`(?m)^SETTING +VALUE +SOURCE$`,
		`(?m)^listen +127\.0\.0\.1:8080 +default$`,
		`(?m)^upstream +http://file-agent:8000 +file ` + regexp.QuoteMeta(file) + `$`,
		`(?m)^admin-token +\(redacted\) +env AGUARD_ADMIN_TOKEN$`,
		`(?m)^webhook-secret +\(redacted\) +file `,
		`(?m)^max-event +1MiB +flag --max-event$`,
		`(?m)^redis +redis://:xxxxx@redis:6379/0 +flag --redis$`,
		`(?m)^webhook +http://hooks/in\?token=xxxxx +flag --webhook$`,
		`(?m)^policy +\(none\) +default$`,
		`(?m)^config +` + regexp.QuoteMeta(file) + ` +env AGUARD_CONFIG$`,
		`(?m)^  /agents/research -> http://research:8000 \(AG-UI 0\.x\)$`,
		`(?m)^consumers: not authenticated$`,
		`(?m)^admin-tokens +` + regexp.QuoteMeta(reviewers) + ` +flag --admin-tokens$`,
		`(?m)^reviewers: 2$`,
		`(?m)^policy: built-in default: loads, revision [0-9a-f]{12}$`,
		`(?m)^configuration OK$`,
	} {
		if !regexp.MustCompile(want).MatchString(stdout) {
			t.Errorf("stdout does not match %s:\n%s", want, stdout)
		}
	}
	for _, f := range config.Flags {
		if n := len(regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(f.Name)+` `).FindAllString(stdout, -1)); n != 1 {
			t.Errorf("setting %s printed %d times, want once", f.Name, n)
		}
	}
}

// TestConfigCheckShowsTheServersOfARedisURL pins that config check shows
// the servers a sentinel or cluster URL names (addr, master_name) and the
// mode's source, and neither password: the sentinels' in the user info nor
// the primary's in the query.
func TestConfigCheckShowsTheServersOfARedisURL(t *testing.T) {
	t.Setenv("AGUARD_REDIS_MODE", "sentinel")
	code, stdout, stderr := runAguard(t, "config", "check", "--upstream", "http://a",
		"--redis", "redis://:sentinel-pw@s1:26379/0?master_name=mymaster&addr=s2:26379&addr=s3:26379&password=primary-pw")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{
		`(?m)^redis +redis://:xxxxx@s1:26379/0\?master_name=mymaster&addr=s2:26379&addr=s3:26379&password=xxxxx +flag --redis$`,
		`(?m)^redis-mode +sentinel +env AGUARD_REDIS_MODE$`,
		`(?m)^configuration OK$`,
	} {
		if !regexp.MustCompile(want).MatchString(stdout) {
			t.Errorf("stdout does not match %s:\n%s", want, stdout)
		}
	}
	for _, pw := range []string{"sentinel-pw", "primary-pw"} {
		if strings.Contains(stdout, pw) {
			t.Errorf("config check printed the password %q:\n%s", pw, stdout)
		}
	}
}

// TestConfigCheckSaysWhereTracesGo pins config check's line on tracing,
// which the standard OTEL_* variables set: off and why, or the OTLP
// protocol, the collector, the variable that named it and the propagators.
func TestConfigCheckSaysWhereTracesGo(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{nil, "traces: off (no OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
			"traces: OTLP http/protobuf to http://collector:4318 (env OTEL_EXPORTER_OTLP_ENDPOINT), propagators tracecontext,baggage"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://u:secret@traces:4317",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_PROPAGATORS": "b3multi,tracecontext"},
			"traces: OTLP grpc to https://u:xxxxx@traces:4317 (env OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), propagators b3multi,tracecontext"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"},
			"traces: off (OTEL_SDK_DISABLED is true)"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"},
			"traces: off (OTEL_TRACES_EXPORTER is none)"},
	} {
		t.Run(tt.want, func(t *testing.T) {
			for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
				"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_PROPAGATORS"} {
				t.Setenv(k, tt.env[k])
			}
			code, stdout, stderr := runAguard(t, "config", "check", "--upstream", "http://a")
			if code != 0 || stderr != "" {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(tt.want) + `$`).MatchString(stdout) {
				t.Errorf("no line %q:\n%s", tt.want, stdout)
			}
		})
	}
}

// TestConfigCheckFailsOnABadConfiguration pins that config check exits 1
// with an error naming the setting, where its value came from and the value,
// and prints no report.
func TestConfigCheckFailsOnABadConfiguration(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"bad duration flag", []string{"--upstream", "http://a", "--drain-timeout", "soon"}, nil,
			`aguard: config: drain-timeout (from --drain-timeout): want a duration such as 30s, got "soon"`},
		{"bad duration in the environment", []string{"--upstream", "http://a"}, map[string]string{"AGUARD_HEARTBEAT": "often"},
			`aguard: config: heartbeat (from AGUARD_HEARTBEAT): want a duration such as 30s, got "often"`},
		{"no upstream", nil, nil, "--upstream is required"},
		{"missing policy folder", []string{"--upstream", "http://a", "--policy", filepath.Join(dir, "nope")}, nil,
			"policy folder " + filepath.Join(dir, "nope") + " does not exist"},
		{"missing config file", []string{"--config", filepath.Join(dir, "none.yaml")}, nil, filepath.Join(dir, "none.yaml")},
		{"missing reviewers file", []string{"--upstream", "http://a", "--admin-tokens", filepath.Join(dir, "reviewers.yaml")}, nil,
			filepath.Join(dir, "reviewers.yaml")},
		{"jwks and header", []string{"--upstream", "http://a", "--auth-jwks", "https://idp/jwks", "--auth-issuer", "i", "--auth-audience", "a", "--auth-header", "X-User"}, nil,
			"--auth-jwks and --auth-header exclude each other"},
		{"sentinel URL without a master", []string{"--upstream", "http://a", "--redis", "redis://:sentinel-pw@s1:26379/0?addr=s2:26379&password=primary-pw"},
			map[string]string{"AGUARD_REDIS_MODE": "sentinel"},
			"aguard: config: redis (from --redis): state: redis sentinel url redis://:xxxxx@s1:26379/0?addr=s2:26379&password=xxxxx: no master_name"},
		{"bad Redis mode", []string{"--upstream", "http://a", "--redis-mode", "ring"}, nil,
			`aguard: config: redis-mode (from --redis-mode): want single, sentinel or cluster, got "ring"`},
		{"trace exporter other than OTLP", []string{"--upstream", "http://a"}, map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"},
			`tracing: OTEL_TRACES_EXPORTER="zipkin": aguard exports traces with otlp only (or none)`},
		{"OTLP protocol aguard does not speak", []string{"--upstream", "http://a"},
			map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
			`tracing: OTLP protocol "http/json": want http/protobuf or grpc`},
		{"unknown trace propagator", []string{"--upstream", "http://a"},
			map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_PROPAGATORS": "tracecontext,zipkin"},
			`tracing: OTEL_PROPAGATORS="tracecontext,zipkin"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			code, stdout, stderr := runAguard(t, append([]string{"config", "check"}, tt.args...)...)
			if code != 1 || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want exit 1 and %q", code, stderr, tt.want)
			}
			if strings.Contains(stdout, "configuration OK") {
				t.Fatalf("a bad configuration reported OK:\n%s", stdout)
			}
		})
	}
}

// TestCommandLineErrors pins the errors of a command line aguard cannot
// run: exit 2, the reason and where to find help on stderr, and the closest
// command or flag suggested.
func TestCommandLineErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--upstrem", "http://a"}, "unknown flag --upstrem; did you mean --upstream?"},
		{[]string{"serve", "--upstream-keepalive", "2s"}, "did you mean --upstream-keepalive-timeout?"},
		{[]string{"serve", "-upstream", "http://a"}, "unknown flag -upstream: long flags take two dashes: --upstream"},
		{[]string{"config", "check", "--admin-tokn", "x"}, "did you mean --admin-token?"},
		{[]string{"replay", "--inptu", "in.json", "x.sse"}, "did you mean --input?"},
		{[]string{"policy", "test", "--policy-capabilites", "caps.json"}, "did you mean --policy-capabilities?"},
		{[]string{"serve", "--zzz"}, "unknown flag --zzz"},
		{[]string{"servve"}, `unknown command "servve" for "aguard"; did you mean "serve"?`},
		{[]string{"policy", "tst"}, `unknown command "tst" for "aguard policy"; did you mean "test"?`},
		{[]string{"serve", "extra"}, `unexpected argument "extra"`},
		{[]string{"policy", "test", "a", "b"}, "want at most one policy folder or bundle file"},
		{[]string{"replay", "--approval-timeout", "soon", "--input", "in.json", "x.sse"}, `invalid argument "soon" for "--approval-timeout"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runAguard(t, tt.args...)
			if code != 2 || !strings.Contains(stderr, tt.want) || !strings.Contains(stderr, "--help' for usage.") || stdout != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 and %q", code, stdout, stderr, tt.want)
			}
		})
	}
}

// TestMissingPolicyFolderIsNamed pins the error of a policy folder or bundle
// that does not exist: its path, and that it does not exist.
func TestMissingPolicyFolderIsNamed(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.json")
	os.WriteFile(input, []byte(demoInput("run-1")), 0o600)
	os.WriteFile(filepath.Join(dir, "up.sse"), nil, 0o600)
	nope, bundle := filepath.Join(dir, "nope"), filepath.Join(dir, "nope.tar.gz")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"policy", "test", nope}, "policy folder " + nope + " does not exist"},
		{[]string{"policy", "test", bundle}, "policy bundle " + bundle + " does not exist"},
		{[]string{"replay", "--input", input, "--policy", nope, filepath.Join(dir, "up.sse")}, "policy folder " + nope + " does not exist"},
		{[]string{"policy", "test", input}, "policy folder " + input + " is not a folder"},
	} {
		code, _, stderr := runAguard(t, tt.args...)
		if code != 1 || !strings.Contains(stderr, tt.want) || strings.Contains(stderr, "stat .") {
			t.Errorf("%v: exit %d, stderr %q; want exit 1 and %q", tt.args, code, stderr, tt.want)
		}
	}
}

// TestVersionFlagAndCommand pins that --version and `aguard version` print
// the same on stdout and exit 0.
func TestVersionFlagAndCommand(t *testing.T) {
	code, flag, stderr := runAguard(t, "--version")
	if code != 0 || stderr != "" || !strings.HasPrefix(flag, "aguard "+version+"\nrevision: ") {
		t.Fatalf("--version: exit %d, stderr %q, stdout %q", code, stderr, flag)
	}
	code, cmd, stderr := runAguard(t, "version")
	if code != 0 || stderr != "" || cmd != flag {
		t.Fatalf("version: exit %d, stderr %q, stdout %q; want %q", code, stderr, cmd, flag)
	}
}

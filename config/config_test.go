package config

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// TestPrecedence pins flag > environment > file > default for every kind of
// setting.
func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "aguard.yaml")
	os.WriteFile(file, []byte("upstream: http://file:1\nmax-body: 1MiB\ndrain-timeout: 5s\nmode: monitor\n"+
		"routes:\n  - path: /agents/a\n    upstream: http://a:2/base\n"), 0o600)
	c, err := Load([]string{"--config", file, "--max-body", "2KiB"},
		env(map[string]string{"AGUARD_MAX_BODY": "3KiB", "AGUARD_DRAIN_TIMEOUT": "7s"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxBody != 2048 {
		t.Errorf("max-body = %d, want the flag's 2048", c.MaxBody)
	}
	if c.DrainTimeout != 7*time.Second {
		t.Errorf("drain-timeout = %s, want the environment's 7s", c.DrainTimeout)
	}
	if c.Upstream != "http://file:1" || c.Mode != "monitor" {
		t.Errorf("upstream, mode = %q, %q, want the file's", c.Upstream, c.Mode)
	}
	if c.Listen != "127.0.0.1:8080" || c.MaxEvent != 16<<20 || c.Heartbeat != 15*time.Second {
		t.Errorf("defaults not applied: %+v", c)
	}
	if c.WebhookQueueBytes != 64<<20 || c.MaxMemory != -1 {
		t.Errorf("webhook-queue-bytes, max-memory = %d, %d; want 64 MiB and -1 (the container's limit)", c.WebhookQueueBytes, c.MaxMemory)
	}
	if len(c.Routes) != 1 || c.Routes[0].Path != "/agents/a" || c.Routes[0].Upstream != "http://a:2/base" {
		t.Errorf("routes = %+v", c.Routes)
	}
}

// TestConfigErrors pins that bad settings are refused with an error naming the
// setting, where it came from and the value.
func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o600)
		return p
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no upstream", nil, nil, "--upstream is required"},
		{"bad mode flag", []string{"--upstream", "http://a", "--mode", "audit"}, nil, `mode (from --mode): want enforce or monitor, got "audit"`},
		{"bad size env", []string{"--upstream", "http://a"}, map[string]string{"AGUARD_MAX_EVENT": "lots"}, `max-event (from AGUARD_MAX_EVENT): want a size such as 8MiB, got "lots"`},
		{"bad duration", []string{"--upstream", "http://a", "--drain-timeout", "-1s"}, nil, "drain-timeout (from --drain-timeout)"},
		{"upstream not a URL", []string{"--upstream", "localhost:8000"}, nil, `want an http:// or https:// URL`},
		{"keep-alive bound of none", []string{"--upstream", "http://a", "--upstream-keepalive-timeout", "0s"}, nil, `upstream-keepalive-timeout (from --upstream-keepalive-timeout): want a positive duration, got "0s"`},
		{"ledger cache of none", []string{"--upstream", "http://a", "--ledger-cache", "0"}, nil, `ledger-cache (from --ledger-cache): want a positive number of records, got "0"`},
		{"webhook queue of no bytes", []string{"--upstream", "http://a", "--webhook-queue-bytes", "0"}, nil, `webhook-queue-bytes (from --webhook-queue-bytes): want a positive size, got "0"`},
		{"memory budget not a size", []string{"--upstream", "http://a"}, map[string]string{"AGUARD_MAX_MEMORY": "half"}, `max-memory (from AGUARD_MAX_MEMORY): want a size such as 8MiB, got "half"`},
		{"protected ledger of none", []string{"--upstream", "http://a", "--ledger-protected-bytes", "0"}, nil, `ledger-protected-bytes (from --ledger-protected-bytes): want a positive size, got "0"`},
		{"unknown key in file", []string{"--config", write("typo.yaml", "upstream: http://a\nmax_body: 1MiB\n")}, nil, `line 2: unknown setting "max_body"`},
		{"route without slash", []string{"--config", write("r.yaml", "routes:\n  - path: agents\n    upstream: http://a\n")}, nil, "routes[0].path: must start with /"},
		{"missing file", []string{"--config", filepath.Join(dir, "nope.yaml")}, nil, "no such file"},
		{"stray argument", []string{"--upstream", "http://a", "extra"}, nil, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.args, env(tt.env), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestRepeatableWebhook pins the three spellings of a repeatable setting.
func TestRepeatableWebhook(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a.yaml")
	os.WriteFile(file, []byte("upstream: http://a\nwebhook:\n  - http://hooks/one\n  - http://hooks/two?token=x\n"), 0o600)
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"flags", []string{"--upstream", "http://a", "--webhook", "http://h/1", "--webhook", "http://h/2"}, nil, "http://h/1,http://h/2"},
		{"environment", []string{"--upstream", "http://a"}, map[string]string{"AGUARD_WEBHOOK": "http://h/1, http://h/2"}, "http://h/1,http://h/2"},
		{"file list", []string{"--config", file}, nil, "http://hooks/one,http://hooks/two?token=x"},
		{"none", []string{"--upstream", "http://a"}, nil, ""},
	}
	for _, tt := range tests {
		c, err := Load(tt.args, env(tt.env), io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := strings.Join(c.Webhooks, ","); got != tt.want {
			t.Errorf("%s: webhooks = %q, want %q", tt.name, got, tt.want)
		}
	}
	if _, err := Load([]string{"--upstream", "http://a", "--webhook", "ftp://x"}, env(nil), io.Discard); err == nil {
		t.Error("a non-HTTP webhook URL was accepted")
	}
}

func TestParseSize(t *testing.T) {
	tests := map[string]int64{"0": 0, "512": 512, "8MiB": 8 << 20, "16 MiB": 16 << 20, "1KB": 1000, "2GiB": 2 << 30, "10B": 10}
	for in, want := range tests {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v, want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "MiB", "-1", "1.5MiB", "9999999999999GiB"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) succeeded", bad)
		}
	}
}

func TestEnvNames(t *testing.T) {
	f, ok := Lookup("admin-token")
	if !ok || f.Env() != "AGUARD_ADMIN_TOKEN" {
		t.Fatalf("Lookup(admin-token) = %+v, %v", f, ok)
	}
}

func TestPolicyAndOPAConfigExcludeEachOther(t *testing.T) {
	_, err := Load([]string{"--upstream", "http://a", "--policy", "p", "--opa-config", "opa.yaml"}, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--policy and --opa-config exclude each other") {
		t.Fatalf("Load = %v", err)
	}
	c, err := Load([]string{"--upstream", "http://a", "--opa-config", "opa.yaml", "--policy-capabilities", "caps.json"}, func(string) string { return "" }, io.Discard)
	if err != nil || c.OPAConfig != "opa.yaml" || c.PolicyCapabilities != "caps.json" {
		t.Fatalf("Load = %+v, %v", c, err)
	}
}

// TestAuthSettingsFitTogether pins the checks on the identity flags: JWTs
// need an issuer and an audience, and exclude a trusted header.
func TestAuthSettingsFitTogether(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string // "" loads
	}{
		{[]string{"--auth-jwks=https://idp/jwks", "--auth-issuer=https://idp/", "--auth-audience=aguard"}, ""},
		{[]string{"--auth-header=X-Authenticated-User"}, ""},
		{[]string{"--auth-jwks=jwks.json", "--auth-issuer=https://idp/"}, "needs --auth-issuer and --auth-audience"},
		{[]string{"--auth-jwks=jwks.json", "--auth-issuer=i", "--auth-audience=a", "--auth-header=X-User"}, "exclude each other"},
		{[]string{"--auth-audience=a"}, "not set"},
		{[]string{"--auth-jwks=j", "--auth-issuer=i", "--auth-audience=a", "--auth-jwks-refresh=10ms"}, "1s or more"},
	} {
		_, err := Load(append([]string{"--upstream=http://agent:8000"}, tt.args...), func(string) string { return "" }, io.Discard)
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%v: %v, want %q", tt.args, err, tt.want)
		}
	}
}

package config

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestGNUFlagSpellings pins that --flag value and --flag=value set the same
// thing, and that a single-dash long flag is refused rather than misread.
func TestGNUFlagSpellings(t *testing.T) {
	for _, args := range [][]string{
		{"--upstream", "http://a", "--max-body", "2KiB", "--webhook", "http://h/1", "--webhook", "http://h/2"},
		{"--upstream=http://a", "--max-body=2KiB", "--webhook=http://h/1", "--webhook=http://h/2"},
	} {
		c, err := Load(args, env(nil), io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if c.Upstream != "http://a" || c.MaxBody != 2048 || strings.Join(c.Webhooks, ",") != "http://h/1,http://h/2" {
			t.Errorf("%q: upstream %q, max-body %d, webhooks %q", args, c.Upstream, c.MaxBody, c.Webhooks)
		}
	}
	if _, err := Load([]string{"-upstream", "http://a"}, env(nil), io.Discard); err == nil {
		t.Error("-upstream was accepted")
	}
}

// TestSettingsSayWhereEachValueCameFrom pins Config.Settings: every setting
// of Flags, then --config, with its value and its source.
func TestSettingsSayWhereEachValueCameFrom(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a.yaml")
	os.WriteFile(file, []byte("upstream: http://file\nmax-body: 1MiB\nwebhook:\n  - http://h/1\n  - http://h/2\n"), 0o600)
	c, err := Load([]string{"--max-body", "2KiB"}, env(map[string]string{"AGUARD_CONFIG": file, "AGUARD_MODE": "monitor"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Settings) != len(Flags)+1 {
		t.Fatalf("%d settings, want %d", len(c.Settings), len(Flags)+1)
	}
	got := map[string]Setting{}
	for i, s := range c.Settings {
		if i < len(Flags) && s.Name != Flags[i].Name {
			t.Fatalf("setting %d is %s, want %s: the order of Flags", i, s.Name, Flags[i].Name)
		}
		got[s.Name] = s
	}
	for _, tt := range []struct {
		name   string
		value  string
		source Source
		origin string
	}{
		{"max-body", "2KiB", FromFlag, "--max-body"},
		{"mode", "monitor", FromEnv, "AGUARD_MODE"},
		{"upstream", "http://file", FromFile, file},
		{"webhook", "http://h/1, http://h/2", FromFile, file},
		{"listen", "127.0.0.1:8080", FromDefault, ""},
		{"policy", "", FromDefault, ""},
		{"config", file, FromEnv, "AGUARD_CONFIG"},
	} {
		s := got[tt.name]
		if s.String() != tt.value || s.Source != tt.source || s.Origin != tt.origin {
			t.Errorf("%s = %q from %s %q, want %q from %s %q", tt.name, s.String(), s.Source, s.Origin, tt.value, tt.source, tt.origin)
		}
	}
}

// TestSecretsAreRedacted pins what a Setting prints: never a credential's
// value, nor a URL's password or query values.
func TestSecretsAreRedacted(t *testing.T) {
	c, err := Load([]string{"--upstream", "http://a", "--admin-token", "tok", "--webhook-secret", "sec",
		"--redis", "redis://user:pw@r:6379/0", "--webhook", "https://h/x?token=qt&v=1"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"admin-token":    "(redacted)",
		"webhook-secret": "(redacted)",
		"redis":          "redis://user:xxxxx@r:6379/0",
		"webhook":        "https://h/x?token=xxxxx&v=xxxxx",
		"upstream":       "http://a",
	}
	for _, s := range c.Settings {
		if w, ok := want[s.Name]; ok && s.String() != w {
			t.Errorf("%s prints %q, want %q", s.Name, s.String(), w)
		}
	}
	for in, want := range map[string]string{
		// Sentinel: the sentinels' password in the user info, the primary's
		// in the query; the other sentinels and the primary's name shown.
		"redis://:spw@s1:26379/0?master_name=mymaster&addr=s2:26379&password=ppw": "redis://:xxxxx@s1:26379/0?master_name=mymaster&addr=s2:26379&password=xxxxx",
		"redis://n1:6379?addr=n2:6379&addr=n3:6379&dial_timeout=1s":               "redis://n1:6379?addr=n2:6379&addr=n3:6379&dial_timeout=xxxxx",
		"https://h/x?addr=a&master_name=b":                                        "https://h/x?addr=xxxxx&master_name=xxxxx",
		"redis://r:6379/0?pass%77ord=ppw":                                         "redis://r:6379/0?pass%77ord=xxxxx",
		"not a url":                                                               "not a url",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
	for _, name := range []string{"admin-token", "webhook-secret", "redis-password"} {
		if !(Flag{Name: name}).Secret() {
			t.Errorf("%s is not a secret", name)
		}
	}
	if (Flag{Name: "max-held"}).Secret() || (Flag{Name: "admin-listen"}).Secret() || (Flag{Name: "admin-tokens"}).Secret() {
		t.Error("a setting that is no credential is a secret")
	}
}

// TestAddFlagsDescribesEachSetting pins what help is made from: each flag's
// default, its environment variable and its kind of value.
func TestAddFlagsDescribesEachSetting(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	AddFlags(fs)
	for _, f := range append(slices.Clone(Flags), Flag{Name: "config"}) {
		fl := fs.Lookup(f.Name)
		if fl == nil {
			t.Fatalf("no --%s", f.Name)
		}
		if fl.DefValue != f.Default || fl.Usage == "" || strings.Join(fl.Annotations[EnvAnnotation], "") != f.Env() {
			t.Errorf("--%s: default %q, env %q, usage %q", f.Name, fl.DefValue, fl.Annotations[EnvAnnotation], fl.Usage)
		}
	}
	for name, typ := range map[string]string{"listen": "string", "drain-timeout": "duration", "max-body": "size", "ledger-cache": "int", "config": "file"} {
		if got := fs.Lookup(name).Value.Type(); got != typ {
			t.Errorf("--%s takes a %s, want %s", name, got, typ)
		}
	}
}

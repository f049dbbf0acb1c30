package config

import (
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// EnvAnnotation is the key of the pflag.Flag annotation that holds the
// environment variable of a setting, for help output.
const EnvAnnotation = "aguard/env"

// configFlag is the flag, and the environment variable, naming the YAML file.
const (
	configFlag = "config"
	configEnv  = "AGUARD_CONFIG"
	configHelp = "YAML file with settings (keys spelled like the flags) and routes"
)

// Source says where a setting's value came from.
type Source string

// The sources of a setting, from the weakest to the strongest.
const (
	FromDefault Source = "default"
	FromFile    Source = "file"
	FromEnv     Source = "env"
	FromFlag    Source = "flag"
)

// Setting is one setting as resolved: its value and where it came from.
type Setting struct {
	Name string // spelled like the flag, e.g. "max-body"; "config" for the file itself
	// Values is the value as given: none for an empty setting, one, or
	// several for a repeatable setting.
	Values []string
	Source Source
	// Origin names the source: the flag ("--max-body"), the environment
	// variable ("AGUARD_MAX_BODY") or the file's path; "" for a default.
	Origin string
	Secret bool // a credential (Flag.Secret): its value is never shown
}

// String is the value fit to print: "(redacted)" for a secret setting, and
// URLs with their password and query values replaced by "xxxxx"; the values
// of a repeatable setting are separated by ", ".
func (s Setting) String() string {
	if len(s.Values) == 0 {
		return ""
	}
	if s.Secret {
		return "(redacted)"
	}
	out := make([]string, len(s.Values))
	for i, v := range s.Values {
		out[i] = RedactURL(v)
	}
	return strings.Join(out, ", ")
}

// RedactURL returns v with the password and the query values of a URL
// replaced by "xxxxx" (a Redis password, a webhook's token); v unchanged when
// it is not a URL with a scheme and a host. In a redis:// or rediss:// URL
// the query values that name servers are kept (redisServerKeys): they are
// what --redis-mode sentinel and cluster read.
func RedactURL(v string) string {
	u, err := url.Parse(v)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return v
	}
	isRedis := u.Scheme == "redis" || u.Scheme == "rediss"
	if u.RawQuery != "" {
		pairs := strings.Split(u.RawQuery, "&")
		for i, p := range pairs {
			k, _, _ := strings.Cut(p, "=")
			if name, err := url.QueryUnescape(k); err == nil && isRedis && redisServerKeys[name] {
				continue
			}
			pairs[i] = k + "=xxxxx"
		}
		u.RawQuery = strings.Join(pairs, "&")
	}
	return u.Redacted()
}

// redisServerKeys are the query keys of a Redis URL that go-redis reads as
// the servers to reach, never a credential: addr (another sentinel, or a
// seed node of a cluster) and master_name (the primary Sentinel names).
var redisServerKeys = map[string]bool{"addr": true, "master_name": true}

// Secret reports a setting whose value is a credential, which aguard never
// prints: one whose name ends in -token, -secret or -password. A file of
// credentials (--admin-tokens) is named, not read, so its path is shown.
func (f Flag) Secret() bool {
	for _, s := range []string{"-token", "-secret", "-password"} {
		if strings.HasSuffix(f.Name, s) {
			return true
		}
	}
	return false
}

// valueType names the kind of value f takes, for help output, from its
// default: int, duration, size, or string.
func (f Flag) valueType() string {
	d := f.Default
	if d == "" {
		return "string"
	}
	if _, err := strconv.Atoi(d); err == nil {
		return "int"
	}
	if _, err := time.ParseDuration(d); err == nil {
		return "duration"
	}
	if _, err := ParseSize(d); err == nil {
		return "size"
	}
	return "string"
}

// CommandLine holds the values of aguard serve's flags as given on one
// command line. Make one with AddFlags.
type CommandLine struct {
	given map[string][]string // by flag name, in the order given
}

// AddFlags defines every setting of Flags, then --config, on fs, in the
// order of Flags: GNU long flags (--name value or --name=value), each with
// its default as DefValue and its environment variable under EnvAnnotation.
// A repeatable flag may be given several times; any other flag's last value
// wins. Values are checked by Load, not as they are parsed, so that an error
// says where the bad value came from.
func AddFlags(fs *pflag.FlagSet) *CommandLine {
	cl := &CommandLine{given: map[string][]string{}}
	fs.SortFlags = false
	add := func(name, def, usage, typ, env string, repeatable bool) {
		fl := fs.VarPF(&givenValue{cl: cl, name: name, def: def, typ: typ, repeatable: repeatable}, name, "", usage)
		fl.DefValue = def
		fl.Annotations = map[string][]string{EnvAnnotation: {env}}
	}
	for _, f := range Flags {
		add(f.Name, f.Default, f.Usage, f.valueType(), f.Env(), f.Repeatable())
	}
	add(configFlag, "", configHelp, "file", configEnv, false)
	return cl
}

// givenValue records a flag's values as given; it is a pflag.Value.
type givenValue struct {
	cl         *CommandLine
	name, def  string
	typ        string
	repeatable bool
}

func (g *givenValue) String() string {
	if vs, ok := g.cl.given[g.name]; ok {
		return strings.Join(vs, ",")
	}
	return g.def
}

func (g *givenValue) Set(v string) error {
	if g.repeatable {
		g.cl.given[g.name] = append(g.cl.given[g.name], v)
	} else {
		g.cl.given[g.name] = []string{v}
	}
	return nil
}

func (g *givenValue) Type() string { return g.typ }

// Load resolves the configuration from the flags given, the environment
// lookup function and the YAML file named by --config (or AGUARD_CONFIG).
// Precedence: flag, then environment, then file, then the default. Errors
// name the setting, where its value came from, and the value.
func (cl *CommandLine) Load(getenv func(string) string) (*Config, error) {
	c := &Config{}
	file := Setting{Name: configFlag, Source: FromDefault}
	if vs := cl.given[configFlag]; len(vs) > 0 && vs[0] != "" {
		file.Values, file.Source, file.Origin = vs, FromFlag, "--"+configFlag
	} else if v := getenv(configEnv); v != "" {
		file.Values, file.Source, file.Origin = []string{v}, FromEnv, configEnv
	}
	if len(file.Values) > 0 {
		c.ConfigFile = file.Values[0]
	}
	fromFile := map[string]string{}
	if c.ConfigFile != "" {
		var err error
		if fromFile, c.Routes, err = readFile(c.ConfigFile); err != nil {
			return nil, err
		}
	}
	for _, f := range Flags {
		s := Setting{Name: f.Name, Source: FromDefault, Secret: f.Secret()}
		v := f.Default
		if fv, ok := fromFile[f.Name]; ok {
			v, s.Source, s.Origin = fv, FromFile, c.ConfigFile
		}
		if ev := getenv(f.Env()); ev != "" {
			v, s.Source, s.Origin = ev, FromEnv, f.Env()
			if f.Repeatable() {
				v = strings.ReplaceAll(ev, ",", listSep)
			}
		}
		if fv, ok := cl.given[f.Name]; ok {
			v, s.Source, s.Origin = strings.Join(fv, listSep), FromFlag, "--"+f.Name
		}
		if err := f.set(c, v); err != nil {
			from := s.Origin
			if from == "" {
				from = string(FromDefault)
			}
			return nil, fmt.Errorf("config: %s (from %s): %w", f.Name, from, err)
		}
		if f.Repeatable() {
			s.Values = splitList(v)
		} else if v != "" {
			s.Values = []string{v}
		}
		c.Settings = append(c.Settings, s)
	}
	c.Settings = append(c.Settings, file)
	return c, c.validate()
}

// Load resolves the configuration from args (without the program and command
// names), as aguard serve parses them, the environment lookup function and
// the YAML file named by --config (or AGUARD_CONFIG); see CommandLine.Load.
// Parse errors are also written to stderr.
func Load(args []string, getenv func(string) string, stderr io.Writer) (*Config, error) {
	fs := pflag.NewFlagSet("aguard serve", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	cl := AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return cl.Load(getenv)
}

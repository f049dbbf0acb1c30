// Package config holds aguard serve's settings and reads them from, in order
// of precedence, command-line flags (GNU long flags, through pflag), AGUARD_*
// environment variables and a YAML file given with --config, and says where
// each value came from.
//
// Every setting is defined once, in Flags; the flags, their help, the
// environment names, the YAML keys and the README's configuration reference
// all come from that table. Package config does not start anything, and it
// does not print: the command line and its help are cmd/aguard's.
package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the resolved configuration of aguard serve.
type Config struct {
	Listen              string
	Upstream            string
	UpstreamProtocol    string
	Routes              []Route
	AdminListen         string
	AdminToken          string
	AdminTokens         string
	AuthJWKS            string
	AuthIssuer          string
	AuthAudience        string
	AuthJWKSRefresh     time.Duration
	AuthHeader          string
	Mode                string
	Policy              string
	PolicyCapabilities  string
	OPAConfig           string
	ApprovalTimeout     time.Duration
	Redis               string
	RedisMode           string
	RedisTimeout        time.Duration
	RedisWriteDelay     time.Duration
	LedgerCache         int
	LedgerCacheBytes    int64
	LedgerProtected     int64
	ClientToolTimeout   time.Duration
	Webhooks            []string
	WebhookSecret       string
	WebhookQueueBytes   int64
	MaxBody             int64
	MaxEvent            int64
	MaxMemory           int64 // bytes; 0: no budget; -1: not given (the container's limit applies)
	MaxHeld             int64
	DrainTimeout        time.Duration
	Heartbeat           time.Duration
	UpstreamTimeout     time.Duration
	UpstreamIdleTimeout time.Duration
	UpstreamKeepalive   time.Duration
	LogFormat           string
	ConfigFile          string

	// Settings lists every setting of Flags, then --config, with the value
	// it resolved to and where that value came from.
	Settings []Setting
}

// Route sends requests whose path starts with Path to Upstream. The longest
// matching Path wins; requests no route matches go to --upstream.
type Route struct {
	Path     string `yaml:"path"`
	Upstream string `yaml:"upstream"`
	// Protocol is the agent server's AG-UI line: 1.0 (default) or 0.x.
	Protocol string `yaml:"protocol"`
}

// Flag describes one setting.
type Flag struct {
	Name    string // flag name; env AGUARD_<NAME>; YAML key
	Default string // as it would be written on the command line
	Usage   string
	set     func(c *Config, v string) error
}

// Repeatable reports a flag that takes several values: the flag given
// several times, a comma-separated environment variable, or a YAML list.
func (f Flag) Repeatable() bool { return f.Name == "webhook" }

// listSep joins the values of a repeatable setting internally.
const listSep = "\n"

func splitList(v string) []string {
	var out []string
	for _, x := range strings.Split(v, listSep) {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// Env is the environment variable that sets f.
func (f Flag) Env() string {
	return "AGUARD_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
}

// Flags is the table of aguard serve's settings, in the order the README lists them.
var Flags = []Flag{
	{"listen", "127.0.0.1:8080", "address of the data plane (consumers connect here)",
		func(c *Config, v string) error { c.Listen = v; return nil }},
	{"upstream", "", "agent server base URL; the request path is appended (required unless routes are configured)",
		func(c *Config, v string) error { c.Upstream = v; return nil }},
	{"upstream-protocol", "1.0", "the upstream agent server's AG-UI line: 1.0, or 0.x (tool-message content parts are flattened to text before forwarding)",
		func(c *Config, v string) error {
			if v != "1.0" && v != "0.x" {
				return fmt.Errorf("want 1.0 or 0.x, got %q", v)
			}
			c.UpstreamProtocol = v
			return nil
		}},
	{"admin-listen", "127.0.0.1:9090", "address for /healthz, /readyz and /metrics",
		func(c *Config, v string) error { c.AdminListen = v; return nil }},
	{"admin-token", "", "bearer token for the admin API, the reviewer named admin (none, and no --admin-tokens: the admin API answers 401)",
		func(c *Config, v string) error { c.AdminToken = v; return nil }},
	{"admin-tokens", "", "YAML file listing the admin API's reviewers: {name, tokenSha256 (lower-case hex SHA-256 of the token), role: viewer (reads) or reviewer (also approves and rejects)}; read at start",
		func(c *Config, v string) error { c.AdminTokens = v; return nil }},
	{"auth-jwks", "", "JSON Web Key Set, a file or an http(s) URL, whose keys sign the bearer JWTs every data-plane request must carry (401 unauthenticated otherwise); refreshed every --auth-jwks-refresh, and at once for a key id it lacks (none: consumers are not authenticated)",
		func(c *Config, v string) error { c.AuthJWKS = v; return nil }},
	{"auth-issuer", "", "the iss a consumer's JWT must carry (required with --auth-jwks)",
		func(c *Config, v string) error { c.AuthIssuer = v; return nil }},
	{"auth-audience", "", "an aud a consumer's JWT must name (required with --auth-jwks)",
		func(c *Config, v string) error { c.AuthAudience = v; return nil }},
	{"auth-jwks-refresh", "5m", "how often the --auth-jwks key set is fetched again; a failed fetch keeps the last good set and is retried within 10s (addition)",
		func(c *Config, v string) (err error) {
			if c.AuthJWKSRefresh, err = parseDuration(v); err == nil && c.AuthJWKSRefresh < time.Second {
				err = fmt.Errorf("want 1s or more, got %q", v)
			}
			return err
		}},
	{"auth-header", "", "header a trusted ingress sets to the authenticated consumer's name, in place of --auth-jwks: a request without it gets 401 (the ingress must remove it from clients' requests)",
		func(c *Config, v string) error { c.AuthHeader = v; return nil }},
	{"mode", "enforce", "enforce, or monitor (decide, log and count everything, change nothing)",
		func(c *Config, v string) error {
			if v != "enforce" && v != "monitor" {
				return fmt.Errorf("want enforce or monitor, got %q", v)
			}
			c.Mode = v
			return nil
		}},
	{"policy", "", "folder of .rego and data files (or a bundle file, .tar.gz) deciding tool calls, reloaded within a second of a change (none: the default policy built into the binary)",
		func(c *Config, v string) error { c.Policy = v; return nil }},
	{"policy-capabilities", "", "OPA capabilities file (JSON, as opa build --capabilities takes) listing the built-in functions policies may call (none: every built-in function of OPA except those that reach outside the process, such as http.send and net.lookup_ip_addr)",
		func(c *Config, v string) error { c.PolicyCapabilities = v; return nil }},
	{"opa-config", "", "OPA configuration file (OPA's own format: services, bundles, keys, decision_logs, status, labels); policies then come from its bundles, in place of --policy",
		func(c *Config, v string) error { c.OPAConfig = v; return nil }},
	{"approval-timeout", "10m", "default time a reviewer has to decide a call a policy holds for approval",
		func(c *Config, v string) (err error) { c.ApprovalTimeout, err = parseDuration(v); return err }},
	{"redis", "", "redis://host:port/db of the Redis that replicas share the ledger through (none: the in-process LRU only)",
		func(c *Config, v string) error {
			if v != "" && !strings.HasPrefix(v, "redis://") && !strings.HasPrefix(v, "rediss://") {
				return fmt.Errorf("want a redis:// URL, got %q", v)
			}
			c.Redis = v
			return nil
		}},
	{"redis-mode", "single", "how --redis names Redis: single (one server, parsed by go-redis's ParseURL), sentinel (the sentinels, with ?master_name=…&addr=…; ParseFailoverURL) or cluster (seed nodes of a Redis Cluster, with ?addr=…; ParseClusterURL)",
		func(c *Config, v string) error {
			switch v {
			case "single", "sentinel", "cluster":
				c.RedisMode = v
				return nil
			}
			return fmt.Errorf("want single, sentinel or cluster, got %q", v)
		}},
	{"redis-timeout", "250ms", "how long a RUN_FINISHED waits for Redis to acknowledge its write (the pending calls it announces) before it goes out with the write queued; other events never wait for Redis. Redis answering slower than this is reported degraded on /readyz, logged and counted",
		func(c *Config, v string) (err error) {
			if c.RedisTimeout, err = parseDuration(v); err == nil && c.RedisTimeout <= 0 {
				err = fmt.Errorf("want a positive duration, got %q", v)
			}
			return err
		}},
	{"redis-write-delay", "250ms", "how long a ledger write that no one waits for may wait for others, so that one round trip to Redis carries them all (0: each goes at once). A RUN_FINISHED's write, a call held for approval, a decision on a call and shutdown send what is waiting at once (a webhook leaves once its record's write is in Redis); other replicas may read a record that much later, and a replica that dies loses at most that much of its writes",
		func(c *Config, v string) (err error) {
			if c.RedisWriteDelay, err = parseDuration(v); err == nil && (c.RedisWriteDelay < 0 || c.RedisWriteDelay > 10*time.Second) {
				err = fmt.Errorf("want 0 to 10s, got %q", v)
			}
			return err
		}},
	{"ledger-cache", "100000", "tool-call records the ledger keeps in memory, and as many threads; past it the oldest are evicted (read back from Redis when needed; gone without --redis). Held approvals and pending calls are kept apart, never evicted, up to as many again",
		func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return fmt.Errorf("want a positive number of records, got %q", v)
			}
			c.LedgerCache = n
			return nil
		}},
	{"ledger-cache-bytes", "32MiB", "bytes of tool-call records and threads the ledger keeps in memory, beside --ledger-cache (count); past it the least recently used are evicted (read back from Redis when needed; gone without --redis)",
		func(c *Config, v string) error {
			n, err := ParseSize(v)
			if err == nil && n == 0 {
				err = fmt.Errorf("want a positive size, got %q", v)
			}
			c.LedgerCacheBytes = n
			return err
		}},
	{"ledger-protected-bytes", "256MiB", "bytes of held approvals, pending calls and the threads listing them that the ledger keeps in memory, never evicted (at most --ledger-cache of them); when full, new holds for approval are denied",
		func(c *Config, v string) error {
			n, err := ParseSize(v)
			if err == nil && n == 0 {
				err = fmt.Errorf("want a positive size, got %q", v)
			}
			c.LedgerProtected = n
			return err
		}},
	{"client-tool-timeout", "24h", "time the application has to answer a pending frontend call (clientToolDeadlineAt)",
		func(c *Config, v string) (err error) { c.ClientToolTimeout, err = parseDuration(v); return err }},
	{"webhook", "", "URL that receives tool-call webhooks (repeatable; comma-separated in the environment, a list in the file)",
		func(c *Config, v string) error {
			c.Webhooks = splitList(v)
			for _, u := range c.Webhooks {
				if err := checkURL(u); err != nil && !strings.Contains(err.Error(), "no query") {
					return err
				}
			}
			return nil
		}},
	{"webhook-secret", "", "key signing webhooks as Standard Webhooks (webhook-signature: HMAC-SHA256): whsec_<base64>, or any other string used as the key itself",
		func(c *Config, v string) error { c.WebhookSecret = v; return nil }},
	{"webhook-queue-bytes", "64MiB", "bytes of webhook deliveries waiting for each URL (besides 10000 deliveries); past it the oldest are dropped and counted in aguard_webhook_deliveries_total{result=\"dropped\"}",
		func(c *Config, v string) (err error) {
			if c.WebhookQueueBytes, err = ParseSize(v); err == nil && c.WebhookQueueBytes == 0 {
				err = fmt.Errorf("want a positive size, got %q", v)
			}
			return err
		}},
	{"max-body", "8MiB", "largest RunAgentInput accepted (413 too_large above it)",
		func(c *Config, v string) (err error) { c.MaxBody, err = ParseSize(v); return err }},
	{"max-event", "16MiB", "largest single SSE event accepted from the agent (AGUARD_LIMIT_EXCEEDED above it)",
		func(c *Config, v string) (err error) { c.MaxEvent, err = ParseSize(v); return err }},
	{"max-memory", "", "memory budget of the whole process (none: the container's memory limit when one is set, cgroup v2 memory.max or v1 memory.limit_in_bytes; 0: no budget); GOMEMLIMIT is set to 90 % of it unless set in the environment, and once memory in use is past 90 % of it new runs get 503 overloaded until it is back under 80 %",
		func(c *Config, v string) (err error) {
			if v == "" {
				c.MaxMemory = -1
				return nil
			}
			c.MaxMemory, err = ParseSize(v)
			return err
		}},
	{"max-held", "8MiB", "bytes of events one stream may hold back from the consumer while tool calls are held until judged (a call past it is denied)",
		func(c *Config, v string) (err error) {
			c.MaxHeld, err = ParseSize(v)
			if err == nil && (c.MaxHeld <= 0 || c.MaxHeld > 1<<30) {
				err = fmt.Errorf("want a size from 1B to 1GiB, got %q", v)
			}
			return err
		}},
	{"drain-timeout", "30s", "how long running streams may finish after SIGTERM",
		func(c *Config, v string) (err error) { c.DrainTimeout, err = parseDuration(v); return err }},
	{"heartbeat", "15s", "interval of silence after which a \": ping\" comment is sent to the consumer",
		func(c *Config, v string) (err error) { c.Heartbeat, err = parseDuration(v); return err }},
	{"upstream-timeout", "30s", "how long the agent may take to connect and send response headers (504 after it)",
		func(c *Config, v string) (err error) { c.UpstreamTimeout, err = parseDuration(v); return err }},
	{"upstream-idle-timeout", "10m", "a stream whose agent sends nothing (not even a comment) for this long ends with AGUARD_UPSTREAM_LOST; checked at each heartbeat",
		func(c *Config, v string) (err error) { c.UpstreamIdleTimeout, err = parseDuration(v); return err }},
	{"upstream-keepalive-timeout", "1s", "the longest an idle connection to an agent is kept for a next request: below agents' own keep-alive timeouts (Node and uvicorn 5s, gunicorn 2s); cut to 3/4 of an agent's timeout once aguard learns it (addition)",
		func(c *Config, v string) (err error) {
			if c.UpstreamKeepalive, err = parseDuration(v); err == nil && c.UpstreamKeepalive <= 0 {
				err = fmt.Errorf("want a positive duration, got %q", v)
			}
			return err
		}},
	{"log-format", "text", "log format on stderr: text or json",
		func(c *Config, v string) error {
			if v != "text" && v != "json" {
				return fmt.Errorf("want text or json, got %q", v)
			}
			c.LogFormat = v
			return nil
		}},
}

func (c *Config) validate() error {
	if c.Upstream == "" && len(c.Routes) == 0 {
		return errors.New("config: --upstream is required unless the config file has routes")
	}
	if c.Upstream != "" {
		if err := checkURL(c.Upstream); err != nil {
			return fmt.Errorf("config: upstream: %w", err)
		}
	}
	for i, r := range c.Routes {
		if !strings.HasPrefix(r.Path, "/") {
			return fmt.Errorf("config: routes[%d].path: must start with /, got %q", i, r.Path)
		}
		if err := checkURL(r.Upstream); err != nil {
			return fmt.Errorf("config: routes[%d].upstream: %w", i, err)
		}
		if r.Protocol != "" && r.Protocol != "1.0" && r.Protocol != "0.x" {
			return fmt.Errorf("config: routes[%d].protocol: want 1.0 or 0.x, got %q", i, r.Protocol)
		}
	}
	if c.Policy != "" && c.OPAConfig != "" {
		return errors.New("config: --policy and --opa-config exclude each other: with an OPA configuration, policies come from its bundles")
	}
	switch {
	case c.AuthJWKS != "" && c.AuthHeader != "":
		return errors.New("config: --auth-jwks and --auth-header exclude each other: verify JWTs, or trust an ingress's header")
	case c.AuthJWKS != "" && (c.AuthIssuer == "" || c.AuthAudience == ""):
		return errors.New("config: --auth-jwks needs --auth-issuer and --auth-audience: a token from another issuer or for another audience must not pass")
	case c.AuthJWKS == "" && (c.AuthIssuer != "" || c.AuthAudience != ""):
		return errors.New("config: --auth-issuer and --auth-audience apply to --auth-jwks, which is not set")
	}
	if c.MaxBody <= 0 || c.MaxEvent <= 0 {
		return errors.New("config: max-body and max-event must be positive")
	}
	return nil
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: want an http:// or https:// URL with a host", s)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q: a base URL has no query or fragment", s)
	}
	return nil
}

// readFile reads a YAML config file: settings as top-level keys spelled like
// the flags, and an optional routes list. Unknown keys are an error, so a typo
// never passes silently.
func readFile(path string) (map[string]string, []Route, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	var raw map[string]yaml.Node
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return nil, nil, fmt.Errorf("config: %s: %w", path, err)
	}
	known, repeatable := map[string]bool{}, map[string]bool{}
	for _, f := range Flags {
		known[f.Name], repeatable[f.Name] = true, f.Repeatable()
	}
	out := map[string]string{}
	var routes []Route
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		n := raw[k]
		switch {
		case k == "routes":
			dec := n
			if err := dec.Decode(&routes); err != nil {
				return nil, nil, fmt.Errorf("config: %s: routes: %w", path, err)
			}
		case known[k] && n.Kind == yaml.SequenceNode && repeatable[k]:
			var vals []string
			for _, item := range n.Content {
				if item.Kind != yaml.ScalarNode {
					return nil, nil, fmt.Errorf("config: %s: line %d: %s: want a list of values", path, item.Line, k)
				}
				vals = append(vals, item.Value)
			}
			out[k] = strings.Join(vals, listSep)
		case known[k]:
			if n.Kind != yaml.ScalarNode {
				return nil, nil, fmt.Errorf("config: %s: line %d: %s: want a single value", path, n.Line, k)
			}
			out[k] = n.Value
		default:
			return nil, nil, fmt.Errorf("config: %s: line %d: unknown setting %q", path, n.Line, k)
		}
	}
	return out, routes, nil
}

// ParseSize reads a byte size: a whole number with an optional unit B, KiB,
// MiB or GiB (also KB, MB, GB as powers of 1000), e.g. "8MiB".
func ParseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("want a size such as 8MiB, got %q", s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * mult, nil
}

func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("want a duration such as 30s, got %q", s)
	}
	return d, nil
}

// Lookup returns the flag named name.
func Lookup(name string) (Flag, bool) {
	i := slices.IndexFunc(Flags, func(f Flag) bool { return f.Name == name })
	if i < 0 {
		return Flag{}, false
	}
	return Flags[i], true
}

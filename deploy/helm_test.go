package deploy

// The Helm chart in helm/aguard is linted and rendered with Helm's own Go SDK
// (the code behind `helm lint` and `helm template`) with each values file of
// chartCases, and what it renders goes through the checks the manifests in
// k8s/ go through, plus the chart's own: every flag of aguard serve has a
// value, every value reaches aguard as the setting it names, the
// ServiceMonitor scrapes the admin listener, the NetworkPolicy opens the
// ports aguard listens on.
//
// Helm is imported by tests only: the aguard binary does not link it.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/aguard/aguard/admin"
	"github.com/aguard/aguard/config"
	"github.com/aguard/aguard/policy"
)

// chartDir is the chart, relative to deploy/.
const chartDir = "helm/aguard"

// releaseNamespace is the namespace the chart is rendered for.
const releaseNamespace = "aguard"

// chartCase is one values file the chart is linted and rendered with.
type chartCase struct {
	name   string
	values string // a values file relative to deploy/; "" for the chart's defaults
	// existing are the objects the values file refers to that the operator
	// creates beforehand (its comment says how).
	existing []*corev1.Secret
}

var chartCases = []chartCase{
	{name: "defaults"},
	{name: "production: Redis, webhooks, ServiceMonitor, NetworkPolicy", values: "helm/examples/production.yaml", existing: []*corev1.Secret{
		secretOf("aguard-secrets", map[string]string{"admin-token": "admin-token-from-the-secret", "webhook-secret": "webhook-secret-from-the-secret"}),
		secretOf("aguard-redis", map[string]string{"redis-url": "redis://:password@redis-primary:6379/0"}),
		secretOf("aguard-reviewers", map[string]string{"admin-tokens.yaml": "- {name: oncall, tokenSha256: " + strings.Repeat("ab", 32) + ", role: reviewer}\n"}),
	}},
	{name: "routes, a policy and two replicas", values: "helm/examples/routes.yaml"},
}

func secretOf(name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// chartSettings are the flags the chart sets from values outside `config`,
// with the value that sets each. Every other flag is a key of `config`.
var chartSettings = map[string]string{
	"admin-token":         "secrets.adminToken",
	"admin-tokens":        "reviewers.list",
	"webhook-secret":      "secrets.webhookSecret",
	"redis":               "redis.url",
	"policy":              "policy.files",
	"policy-capabilities": "opa.capabilities",
	"opa-config":          "opa.config",
	"config":              "", // the chart's own ConfigMap, always
}

// TestChartValuesCoverEveryFlag pins that values.yaml has a value for every
// flag of aguard serve (config.Flags), so that a flag added later is caught
// here until the chart sets it, and that `config` holds nothing else.
func TestChartValuesCoverEveryFlag(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range valuesCoverageProblems(data) {
		t.Error(p)
	}
}

func valuesCoverageProblems(data []byte) []string {
	var vals map[string]any
	if err := yaml.Unmarshal(data, &vals); err != nil {
		return []string{"values.yaml: " + err.Error()}
	}
	var ps []string
	cfg, _ := vals["config"].(map[string]any)
	names := []string{"config"}
	for _, f := range config.Flags {
		names = append(names, f.Name)
	}
	for _, name := range names {
		if at, ok := chartSettings[name]; ok {
			if at == "" {
				continue
			}
			if _, err := chartutil.Values(vals).PathValue(at); err != nil {
				if _, isTable := lookupTable(vals, at); !isTable {
					ps = append(ps, fmt.Sprintf("values.yaml: --%s is set from %s, which values.yaml does not have", name, at))
				}
			}
			if _, inConfig := cfg[name]; inConfig {
				ps = append(ps, fmt.Sprintf("values.yaml: config.%s: --%s comes from %s; a key here would put it in the ConfigMap", name, name, at))
			}
			continue
		}
		if _, ok := cfg[name]; !ok {
			ps = append(ps, fmt.Sprintf("values.yaml: config: no key %q for --%s; add it (with its default) so that operators can set it", name, name))
		}
	}
	for k := range cfg {
		if _, ok := config.Lookup(k); !ok && k != "routes" {
			ps = append(ps, fmt.Sprintf("values.yaml: config.%s is not a flag of aguard serve", k))
		}
	}
	return ps
}

// lookupTable finds a map at a dotted path (PathValue only returns leaves).
func lookupTable(vals map[string]any, at string) (map[string]any, bool) {
	cur := vals
	for _, k := range strings.Split(at, ".") {
		next, ok := cur[k].(map[string]any)
		if !ok {
			return nil, false
		}
		cur = next
	}
	return cur, true
}

// TestChartLints runs what `helm lint --strict -f <values>` runs: a warning
// fails too.
func TestChartLints(t *testing.T) {
	for _, c := range chartCases {
		t.Run(c.name, func(t *testing.T) {
			linter := lint.All(chartDir, c.userValues(t), releaseNamespace, false)
			for _, m := range linter.Messages {
				if m.Severity >= support.WarningSev {
					t.Error(m)
				}
			}
		})
	}
}

// TestChartLintCatchesBreakage pins that the lint above can fail: a copy of
// the chart with a template that does not parse, or without a version, is
// reported.
func TestChartLintCatchesBreakage(t *testing.T) {
	for _, br := range []struct{ file, old, new string }{
		{"Chart.yaml", "version: 0.1.0\n", ""},
		{"templates/service.yaml", "{{- include \"aguard.labels\" . | nindent 4 }}", "{{- include \"aguard.labels\" . | nindent 4 }"},
	} {
		t.Run(br.file, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "aguard")
			for name, data := range readChart(t) {
				if name == br.file {
					if !bytes.Contains(data, []byte(br.old)) {
						t.Fatalf("%s no longer contains %q: update this breakage", name, br.old)
					}
					data = bytes.Replace(data, []byte(br.old), []byte(br.new), 1)
				}
				p := filepath.Join(dir, filepath.FromSlash(name))
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			linter := lint.All(dir, map[string]any{}, releaseNamespace, false)
			if linter.HighestSeverity < support.ErrorSev {
				t.Fatalf("lint of a chart with %q replaced in %s: no error, messages %v", br.old, br.file, linter.Messages)
			}
		})
	}
}

// TestChartRenders renders the chart with each values file and runs every
// check on what it renders.
func TestChartRenders(t *testing.T) {
	files := readChart(t)
	for _, c := range chartCases {
		t.Run(c.name, func(t *testing.T) {
			b, err := c.render(t, files)
			if err != nil {
				t.Fatal(err)
			}
			if len(b.k8s) < 4 {
				t.Fatalf("rendered only %d objects", len(b.k8s))
			}
			for _, ch := range chartChecks {
				t.Run(ch.name, func(t *testing.T) {
					for _, p := range ch.run(b) {
						t.Error(p)
					}
				})
			}
		})
	}
}

// TestChartRefusesWhatCannotWork pins the chart's own refusals: several
// replicas without a shared ledger (a thread's next run or a reviewer's
// approval could reach a replica that never saw the call), and no agent.
func TestChartRefusesWhatCannotWork(t *testing.T) {
	files := readChart(t)
	for _, tc := range []struct {
		name, values, want string
	}{
		{"two replicas without Redis", "replicaCount: 2", "shared ledger"},
		{"autoscaling without Redis", "autoscaling: {enabled: true}", "shared ledger"},
		{"no upstream and no routes", "config: {upstream: \"\"}", "config.upstream"},
		{"a policy and an OPA configuration", "{policy: {files: {a.rego: \"package aguard\"}}, opa: {config: \"services: {}\"}}", "exclude each other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var vals map[string]any
			if err := yaml.Unmarshal([]byte(tc.values), &vals); err != nil {
				t.Fatal(err)
			}
			_, err := renderChart(files, vals)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("rendering with %s: got %v, want an error mentioning %q", tc.values, err, tc.want)
			}
		})
	}
}

// TestChartChecksCatchBreakage breaks the chart in memory, one way at a time,
// renders it with a values file, and requires some problem mentioning want.
func TestChartChecksCatchBreakage(t *testing.T) {
	const (
		dep, helpers, sm, np, vals   = "templates/deployment.yaml", "templates/_helpers.tpl", "templates/servicemonitor.yaml", "templates/networkpolicy.yaml", "values.yaml"
		defaults, production, routes = 0, 1, 2
	)
	breakages := []struct {
		name     string
		file     string
		old, new string
		withCase int
		want     string
	}{
		{"a flag without a value", vals, "  heartbeat: 15s\n", "", defaults, `no key "heartbeat"`},
		{"a secret setting in the ConfigMap", vals, "  mode: enforce\n", "  mode: enforce\n  admin-token: \"\"\n", defaults, "config.admin-token"},
		{"a setting left out of the config file", helpers, `(list "routes" "listen" "admin-listen")`, `(list "routes" "listen" "admin-listen" "drain-timeout")`, production, "DrainTimeout"},
		{"listen addresses left to the image", dep, "            - --listen\n            - {{ .Values.config.listen | quote }}\n", "", production, "8081"},
		{"secrets from other keys", dep, `key: {{ get $.Values.secrets (printf "%sKey" $key) }}`, "key: token", routes, "AdminToken"},
		{"webhook secret not wired", dep, `"AGUARD_WEBHOOK_SECRET" "webhookSecret"`, `"WEBHOOK_SECRET" "webhookSecret"`, production, "WebhookSecret"},
		{"redis secret not wired", dep, "- name: AGUARD_REDIS\n", "- name: REDIS_URL\n", production, "Redis"},
		{"readiness on a path not served", dep, "path: /readyz", "path: /ready", defaults, "readinessProbe"},
		{"liveness on readiness", dep, "path: /healthz", "path: /readyz", defaults, "livenessProbe"},
		{"writable root", dep, "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", defaults, "readOnlyRootFilesystem"},
		{"misspelt field", dep, "readOnlyRootFilesystem:", "readOnlyRootFileSystem:", defaults, "unknown field"},
		{"grace period too short", vals, "terminationGracePeriodSeconds: 50", "terminationGracePeriodSeconds: 35", routes, "terminationGracePeriodSeconds"},
		{"policy not mounted", dep, "mountPath: /etc/aguard/policy\n", "mountPath: /etc/aguard/policies\n", routes, "--policy"},
		{"reviewers not mounted", dep, "mountPath: /etc/aguard/reviewers\n", "mountPath: /etc/aguard/reviewer\n", routes, "--admin-tokens"},
		{"reviewers from another key of their Secret", dep, "- key: {{ .Values.reviewers.existingSecretKey }}", "- key: tokens", production, "--admin-tokens"},
		{"reviewers file not a list", "templates/reviewers-secret.yaml", "toYaml .Values.reviewers.list", "toYaml .Values.reviewers", routes, "--admin-tokens"},
		{"reviewers file not passed", dep, "            - --admin-tokens\n            - /etc/aguard/reviewers/admin-tokens.yaml\n", "", routes, "--admin-tokens is"},
		{"OPA files not mounted", dep, "mountPath: /etc/aguard/opa\n", "mountPath: /etc/aguard/opa-files\n", production, "--opa-config"},
		{"HPA and a fixed replica count", dep, "{{- if not .Values.autoscaling.enabled }}", "{{- if true }}", production, "spec.replicas"},
		{"PDB blocking every drain", vals, "  minAvailable: 1\n", "  minAvailable: 2\n", routes, "minAvailable"},
		{"ServiceMonitor on a port the Service lacks", sm, "- port: admin", "- port: metrics", production, "endpoints[0].port"},
		{"ServiceMonitor on a path not served", sm, "path: /metrics", "path: /metric", production, "endpoints[0].path"},
		{"ServiceMonitor selecting no Service", sm, "aguard/service: admin", "aguard/service: metrics", production, "selector"},
		{"ServiceMonitor misspelt field", sm, "scrapeTimeout:", "scrape_timeout:", production, "unknown field"},
		{"NetworkPolicy on a port aguard does not listen on", np, "- port: http", "- port: web", production, "ingress"},
		{"NetworkPolicy selecting no pod", np, "podSelector:\n    matchLabels:", "podSelector:\n    matchLabels:\n      tier: none", production, "podSelector"},
		{"NetworkPolicy without DNS", np, "port: 53\n          protocol: UDP", "port: 5353\n          protocol: UDP", production, "DNS"},
	}
	orig := readChart(t)
	for _, br := range breakages {
		t.Run(br.name, func(t *testing.T) {
			files := maps.Clone(orig)
			if !bytes.Contains(files[br.file], []byte(br.old)) {
				t.Fatalf("%s no longer contains %q: update this breakage", br.file, br.old)
			}
			files[br.file] = bytes.Replace(files[br.file], []byte(br.old), []byte(br.new), 1)
			c := chartCases[br.withCase]
			var ps []string
			if br.file == vals {
				ps = valuesCoverageProblems(files[vals])
			}
			b, err := c.render(t, files)
			if err != nil {
				ps = append(ps, err.Error())
			} else {
				for _, ch := range chartChecks {
					ps = append(ps, ch.run(b)...)
				}
			}
			i := slices.IndexFunc(ps, func(p string) bool { return strings.Contains(p, br.want) })
			if i < 0 {
				t.Fatalf("replacing %q with %q in %s (values %q): want a problem mentioning %q, got %q", br.old, br.new, br.file, c.name, br.want, ps)
			}
			t.Logf("caught: %s", ps[i])
		})
	}
}

// ---- rendering -------------------------------------------------------------

// readChart reads the chart's files, by path relative to the chart.
func readChart(t *testing.T) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(chartDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(chartDir, p)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)], err = os.ReadFile(p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func (c chartCase) userValues(t *testing.T) map[string]any {
	t.Helper()
	if c.values == "" {
		return map[string]any{}
	}
	vals, err := chartutil.ReadValuesFile(c.values)
	if err != nil {
		t.Fatal(err)
	}
	return vals
}

// rendered is what the chart renders: manifests by template path, and the
// values they were rendered with (the chart's defaults under the user's).
type rendered struct {
	manifests map[string]string
	values    chartutil.Values
}

// renderChart renders the chart's templates as `helm template` does, for
// release "aguard" in releaseNamespace.
func renderChart(files map[string][]byte, user map[string]any) (*rendered, error) {
	var bf []*loader.BufferedFile
	for _, name := range slices.Sorted(maps.Keys(files)) {
		bf = append(bf, &loader.BufferedFile{Name: name, Data: files[name]})
	}
	ch, err := loader.LoadFiles(bf)
	if err != nil {
		return nil, err
	}
	top, err := chartutil.ToRenderValues(ch, user, chartutil.ReleaseOptions{Name: "aguard", Namespace: releaseNamespace, Revision: 1, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	out, err := engine.Render(ch, top)
	if err != nil {
		return nil, err
	}
	vals, err := top.Table("Values")
	if err != nil {
		return nil, err
	}
	return &rendered{manifests: out, values: vals}, nil
}

// render renders the chart with the case's values and loads the manifests,
// with the objects the operator creates, into a bundle the checks read.
func (c chartCase) render(t *testing.T, files map[string][]byte) (*bundle, error) {
	t.Helper()
	r, err := renderChart(files, c.userValues(t))
	if err != nil {
		return nil, err
	}
	dockerfile, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{tree: tree{}, dockerfiles: map[string][]stage{"Dockerfile": parseDockerfile(dockerfile)}, chartValues: r.values}
	for _, name := range slices.Sorted(maps.Keys(r.manifests)) {
		if path.Base(name) == "NOTES.txt" || strings.HasPrefix(path.Base(name), "_") {
			continue
		}
		b.loadK8s(name, []byte(r.manifests[name]))
	}
	for _, s := range c.existing {
		b.k8s = append(b.k8s, k8sDoc{where: "the operator's Secret " + s.Name, file: "(created beforehand)", obj: s})
	}
	return b, nil
}

// ---- chart checks ------------------------------------------------------------

var chartChecks = []check{
	{"manifests decode strictly", func(b *bundle) []string { return b.parseProblems }},
	{"flags and env vars are aguard settings", checkDeploymentSettingNames},
	{"every value reaches aguard", checkChartValuesReachAguard},
	{"probes hit admin paths on the admin port", checkDeploymentProbes},
	{"the policy ConfigMap is mounted at --policy and loads", checkChartPolicy},
	{"grace period outlasts preStop and drain", checkGracePeriod},
	{"container is locked down", checkSecurityContext},
	{"resources are set", checkResources},
	{"references resolve (labels, ports, ConfigMaps, Secrets)", checkReferences},
	{"replicas, Redis, PodDisruptionBudget and HPA fit together", checkChartScaling},
	{"ServiceMonitor scrapes the admin listener", checkServiceMonitor},
	{"NetworkPolicy opens the ports aguard listens on", checkNetworkPolicy},
}

// checkChartValuesReachAguard resolves the settings aguard starts with from
// the rendered Deployment, ConfigMap and Secrets, and compares them with what
// the values say, read independently as flags.
func checkChartValuesReachAguard(b *bundle) []string {
	ad, got, ps := b.deploymentConfig()
	if got == nil {
		return ps
	}
	want, err := b.configFromValues()
	if err != nil {
		return []string{"values: " + err.Error()}
	}
	// Files the chart mounts: set or not, as the values say, and there.
	l, _ := b.deploymentLaunch(ad)
	for _, f := range []struct {
		flag      string
		got, want *string
		folder    bool
	}{
		{"--policy", &got.Policy, &want.Policy, true},
		{"--policy-capabilities", &got.PolicyCapabilities, &want.PolicyCapabilities, false},
		{"--opa-config", &got.OPAConfig, &want.OPAConfig, false},
		{"--admin-tokens", &got.AdminTokens, &want.AdminTokens, false},
	} {
		if (*f.got == "") != (*f.want == "") {
			ps = append(ps, fmt.Sprintf("%s: %s is %q, but the values %s it", ad.where, f.flag, *f.got, map[bool]string{true: "set", false: "do not set"}[*f.want != ""]))
		}
		if _, mounted := l.files[path.Clean(*f.got)]; *f.got != "" && !f.folder && !mounted {
			ps = append(ps, fmt.Sprintf("%s: %s %s: no such file in the container (nothing is mounted there)", ad.where, f.flag, *f.got))
		}
		*f.got, *f.want = "", ""
	}
	ps = append(ps, b.checkReviewersFile(ad, l)...)
	got.ConfigFile, want.ConfigFile = "", ""
	got.Settings, want.Settings = nil, nil // where each value came from differs: file or flags
	gv, wv := reflect.ValueOf(got).Elem(), reflect.ValueOf(want).Elem()
	for i := range gv.NumField() {
		if !reflect.DeepEqual(gv.Field(i).Interface(), wv.Field(i).Interface()) {
			ps = append(ps, fmt.Sprintf("%s: aguard starts with %s %v, but the values say %v", ad.where, gv.Type().Field(i).Name, gv.Field(i).Interface(), wv.Field(i).Interface()))
		}
	}
	return ps
}

// checkReviewersFile reads the --admin-tokens file the Deployment mounts as
// aguard reads it, and requires the reviewers the values list (all of
// them, or, from an existing Secret, at least one).
func (b *bundle) checkReviewersFile(ad *aguardDeployment, l launch) []string {
	var file string
	for i, a := range l.args {
		if a == "--admin-tokens" && i+1 < len(l.args) {
			file = path.Clean(l.args[i+1])
		}
	}
	data, ok := l.files[file]
	if file == "" || !ok {
		return nil // the files check above reports a flag without its file
	}
	f, err := os.CreateTemp("", "aguard-chart-reviewers-*.yaml")
	if err != nil {
		return []string{err.Error()}
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return []string{err.Error()}
	}
	got, err := admin.ReadReviewers(f.Name())
	if err != nil {
		return []string{fmt.Sprintf("%s: --admin-tokens %s: aguard does not start with it: %v", ad.where, file, err)}
	}
	var names []string
	for _, r := range got {
		names = append(names, r.Name+":"+string(r.Role))
	}
	var want []string
	list, _ := b.chartValues["reviewers"].(map[string]any)["list"].([]any)
	for _, e := range list {
		m, _ := e.(map[string]any)
		want = append(want, fmt.Sprintf("%v:%v", m["name"], m["role"]))
	}
	if ex, _ := b.chartValues.PathValue("reviewers.existingSecret"); ex != "" && ex != nil {
		want = nil
	}
	if len(names) == 0 || (want != nil && !slices.Equal(names, want)) {
		return []string{fmt.Sprintf("%s: --admin-tokens %s lists reviewers %q, but the values list %q", ad.where, file, names, want)}
	}
	return nil
}

// configFromValues is the configuration the values describe, as aguard
// would read it from flags.
func (b *bundle) configFromValues() (*config.Config, error) {
	vals := b.chartValues
	cfgVals, _ := vals["config"].(map[string]any)
	var args []string
	for _, f := range config.Flags {
		for _, v := range flagValues(cfgVals[f.Name]) {
			args = append(args, "--"+f.Name+"="+v)
		}
	}
	str := func(at string) string {
		v, _ := vals.PathValue(at)
		s, _ := v.(string)
		return s
	}
	fromSecret := func(name, key string) string {
		v, _ := b.secretValue(name, key)
		return v
	}
	token, hookSecret := str("secrets.adminToken"), str("secrets.webhookSecret")
	if s := str("secrets.existingSecret"); s != "" {
		token, hookSecret = fromSecret(s, str("secrets.adminTokenKey")), fromSecret(s, str("secrets.webhookSecretKey"))
	}
	redis := str("redis.url")
	if s := str("redis.existingSecret"); s != "" {
		redis = fromSecret(s, str("redis.existingSecretKey"))
	}
	for flag, v := range map[string]string{"admin-token": token, "webhook-secret": hookSecret, "redis": redis} {
		if v != "" {
			args = append(args, "--"+flag+"="+v)
		}
	}
	files, _ := lookupTable(vals, "policy.files")
	if len(files) > 0 || str("policy.existingConfigMap") != "" {
		args = append(args, "--policy=set")
	}
	if str("opa.capabilities") != "" {
		args = append(args, "--policy-capabilities=set")
	}
	if str("opa.config") != "" {
		args = append(args, "--opa-config=set")
	}
	if list, _ := vals["reviewers"].(map[string]any)["list"].([]any); len(list) > 0 || str("reviewers.existingSecret") != "" {
		args = append(args, "--admin-tokens=set")
	}
	routes, _ := cfgVals["routes"].([]any)
	standIn := len(routes) > 0 && len(flagValues(cfgVals["upstream"])) == 0
	if standIn {
		// Routes come from the file only: stand in for --upstream, which
		// aguard requires without them, and drop it again below.
		args = append(args, "--upstream=http://stand-in")
	}
	cfg, err := config.Load(args, func(string) string { return "" }, &strings.Builder{})
	if err != nil {
		return nil, err
	}
	if standIn {
		cfg.Upstream = ""
	}
	if len(routes) > 0 {
		j, _ := json.Marshal(routes)
		if err := json.Unmarshal(j, &cfg.Routes); err != nil {
			return nil, fmt.Errorf("config.routes: %w", err)
		}
	}
	return cfg, nil
}

// flagValues renders a values entry as the flag values it stands for: none
// for an empty one, one per element of a list.
func flagValues(v any) []string {
	switch v := v.(type) {
	case nil:
		return nil
	case string:
		if v == "" {
			return nil
		}
		return []string{v}
	case float64:
		return []string{strconv.FormatFloat(v, 'f', -1, 64)}
	case int64:
		return []string{strconv.FormatInt(v, 10)}
	case int:
		return []string{strconv.Itoa(v)}
	case bool:
		return []string{strconv.FormatBool(v)}
	case []any:
		var out []string
		for _, x := range v {
			out = append(out, flagValues(x)...)
		}
		return out
	default:
		return []string{fmt.Sprint(v)}
	}
}

// checkChartPolicy: with a policy in the values, the ConfigMap is mounted at
// --policy, whole, and the folder it makes loads in aguard's policy engine.
func checkChartPolicy(b *bundle) []string {
	ad, cfg, ps := b.deploymentConfig()
	if cfg == nil || cfg.Policy == "" {
		return ps
	}
	if ps = checkDeploymentPolicyMount(b); len(ps) > 0 {
		return ps
	}
	cm, ps := b.policyConfigMap()
	if cm == nil {
		return ps
	}
	dir, err := os.MkdirTemp("", "aguard-chart-policy-")
	if err != nil {
		return []string{err.Error()}
	}
	defer os.RemoveAll(dir)
	for name, content := range cm.obj.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return []string{err.Error()}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := policy.New(ctx, policy.Options{Dir: dir}); err != nil {
		return []string{fmt.Sprintf("%s: the policy folder mounted at --policy does not load: %v", ad.where, err)}
	}
	return nil
}

// checkChartScaling: one replica keeps the ledger in memory and gets no
// PodDisruptionBudget (it would block every drain); more than one share
// Redis, get a PodDisruptionBudget that lets one go, and an HPA, when there
// is one, owns the replica count.
func checkChartScaling(b *bundle) []string {
	ad, cfg, ps := b.deploymentConfig()
	if cfg == nil {
		return ps
	}
	labels := ad.d.Spec.Template.Labels
	hpas := objects[*autoscalingv2.HorizontalPodAutoscaler](b)
	pdbs := objects[*policyv1.PodDisruptionBudget](b)
	floor := int32(1)
	if ad.d.Spec.Replicas != nil {
		floor = *ad.d.Spec.Replicas
	}
	for _, h := range hpas {
		if ad.d.Spec.Replicas != nil {
			ps = append(ps, fmt.Sprintf("%s: spec.replicas is set although %s scales it: every upgrade would reset the count", ad.where, h.where))
		}
		ref := h.obj.Spec.ScaleTargetRef
		if ref.APIVersion != "apps/v1" || ref.Kind != "Deployment" || ref.Name != ad.d.Name {
			ps = append(ps, fmt.Sprintf("%s: spec.scaleTargetRef: %s %s %s, want apps/v1 Deployment %s", h.where, ref.APIVersion, ref.Kind, ref.Name, ad.d.Name))
		}
		if m := h.obj.Spec.MinReplicas; m == nil || *m < 2 {
			ps = append(ps, h.where+": spec.minReplicas: want at least 2")
		} else {
			floor = *m
		}
		cpu := slices.ContainsFunc(h.obj.Spec.Metrics, func(m autoscalingv2.MetricSpec) bool {
			return m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU
		})
		if !cpu {
			ps = append(ps, h.where+": spec.metrics: no Resource metric on cpu")
		}
	}
	if len(hpas) > 1 {
		ps = append(ps, fmt.Sprintf("want at most one HorizontalPodAutoscaler, found %d", len(hpas)))
	}
	if floor <= 1 && len(hpas) == 0 {
		for _, p := range pdbs {
			ps = append(ps, fmt.Sprintf("%s: a PodDisruptionBudget on a single replica blocks every node drain", p.where))
		}
		return ps
	}
	if cfg.Redis == "" {
		ps = append(ps, fmt.Sprintf("%s: %d or more replicas without --redis: each keeps its own ledger", ad.where, floor))
	}
	if len(pdbs) != 1 {
		ps = append(ps, fmt.Sprintf("want one PodDisruptionBudget with %d or more replicas, found %d", floor, len(pdbs)))
	}
	for _, p := range pdbs {
		if p.obj.Spec.Selector == nil || !selects(p.obj.Spec.Selector.MatchLabels, labels) {
			ps = append(ps, p.where+": spec.selector: does not select the Deployment's pods")
		}
		if ma := p.obj.Spec.MinAvailable; ma == nil || ma.Type != intstr.Int || ma.IntVal < 1 || ma.IntVal >= floor {
			ps = append(ps, fmt.Sprintf("%s: spec.minAvailable: %v with at least %d replicas; want a number from 1 to %d, or no drain can proceed", p.where, ma, floor, floor-1))
		}
	}
	return ps
}

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// (monitoring.coreos.com/v1) that the chart writes, its fields spelled as in
// the operator's CRD: strict decoding rejects any other field.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		JobLabel          string               `json:"jobLabel,omitempty"`
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port          string `json:"port,omitempty"`
			Path          string `json:"path,omitempty"`
			Scheme        string `json:"scheme,omitempty"`
			Interval      string `json:"interval,omitempty"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// checkServiceMonitor: a ServiceMonitor selects exactly the admin Service in
// the release's namespace, on a port that reaches the admin listener, and
// scrapes a path the admin handler serves.
func checkServiceMonitor(b *bundle) []string {
	sms := objects[*serviceMonitor](b)
	if len(sms) == 0 {
		if enabled, _ := b.chartValues.PathValue("serviceMonitor.enabled"); enabled == true {
			return []string{"serviceMonitor.enabled but no ServiceMonitor rendered"}
		}
		return nil
	}
	ad, cfg, ps := b.deploymentConfig()
	if cfg == nil {
		return ps
	}
	adminPort, _, _ := listenPort(cfg.AdminListen)
	for _, sm := range sms {
		spec := sm.obj.Spec
		if ns := spec.NamespaceSelector.MatchNames; !spec.NamespaceSelector.Any && len(ns) > 0 && !slices.Contains(ns, releaseNamespace) {
			ps = append(ps, fmt.Sprintf("%s: spec.namespaceSelector.matchNames %v: not the release's namespace %s", sm.where, ns, releaseNamespace))
		}
		var svcs []located[*corev1.Service]
		for _, s := range objects[*corev1.Service](b) {
			if len(spec.Selector.MatchExpressions) == 0 && selects(spec.Selector.MatchLabels, s.obj.Labels) {
				svcs = append(svcs, s)
			}
		}
		if len(svcs) != 1 {
			ps = append(ps, fmt.Sprintf("%s: spec.selector %v selects %d Services, want exactly the admin one", sm.where, spec.Selector.MatchLabels, len(svcs)))
			continue
		}
		svc := svcs[0]
		if len(spec.Endpoints) == 0 {
			ps = append(ps, sm.where+": spec.endpoints: none")
		}
		for i, ep := range spec.Endpoints {
			field := fmt.Sprintf("%s: spec.endpoints[%d]", sm.where, i)
			j := slices.IndexFunc(svc.obj.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port })
			if j < 0 {
				ps = append(ps, fmt.Sprintf("%s.port: %q is not a port of %s", field, ep.Port, svc.where))
			} else if port, ok := containerPort(ad.c, svc.obj.Spec.Ports[j].TargetPort); !ok || int(port) != adminPort {
				ps = append(ps, fmt.Sprintf("%s.port: %q does not reach the admin listener (admin-listen %s)", field, ep.Port, cfg.AdminListen))
			}
			if status := adminStatus(ep.Path, true); status != 200 {
				ps = append(ps, fmt.Sprintf("%s.path: %q answers %d on the admin listener, want /metrics", field, ep.Path, status))
			}
			interval, err1 := time.ParseDuration(ep.Interval)
			timeout, err2 := time.ParseDuration(ep.ScrapeTimeout)
			if err1 != nil || err2 != nil || timeout > interval {
				ps = append(ps, fmt.Sprintf("%s: interval %q and scrapeTimeout %q: want durations, the timeout no longer than the interval", field, ep.Interval, ep.ScrapeTimeout))
			}
		}
	}
	return ps
}

// checkNetworkPolicy: a NetworkPolicy selects aguard's pods, admits the data
// plane on a port aguard listens on, names only ports the container has, lets
// a ServiceMonitor's Prometheus in, and allows DNS when it restricts egress.
func checkNetworkPolicy(b *bundle) []string {
	nps := objects[*networkingv1.NetworkPolicy](b)
	if len(nps) == 0 {
		return nil
	}
	ad, cfg, ps := b.deploymentConfig()
	if cfg == nil {
		return ps
	}
	dataPort, _, _ := listenPort(cfg.Listen)
	adminPort, _, _ := listenPort(cfg.AdminListen)
	for _, np := range nps {
		spec := np.obj.Spec
		if len(spec.PodSelector.MatchExpressions) > 0 || !selects(spec.PodSelector.MatchLabels, ad.d.Spec.Template.Labels) {
			ps = append(ps, fmt.Sprintf("%s: spec.podSelector %v does not select aguard's pods", np.where, spec.PodSelector.MatchLabels))
		}
		open := map[int32]bool{}
		for i, rule := range spec.Ingress {
			for j, p := range rule.Ports {
				if p.Port == nil {
					continue
				}
				port, ok := containerPort(ad.c, *p.Port)
				if !ok {
					ps = append(ps, fmt.Sprintf("%s: spec.ingress[%d].ports[%d].port: %s is not a port of the aguard container", np.where, i, j, p.Port.String()))
				}
				open[port] = true
			}
		}
		if !open[int32(dataPort)] {
			ps = append(ps, fmt.Sprintf("%s: spec.ingress: no rule admits the data plane's port %d", np.where, dataPort))
		}
		if len(objects[*serviceMonitor](b)) > 0 && !open[int32(adminPort)] {
			ps = append(ps, fmt.Sprintf("%s: spec.ingress: a ServiceMonitor is rendered but no rule admits Prometheus to the admin port %d (networkPolicy.adminFrom)", np.where, adminPort))
		}
		if slices.Contains(spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
			dns := false
			for _, rule := range spec.Egress {
				for _, p := range rule.Ports {
					if p.Port != nil && p.Port.IntValue() == 53 && p.Protocol != nil && *p.Protocol == corev1.ProtocolUDP && len(rule.To) == 0 {
						dns = true
					}
				}
			}
			if !dns {
				ps = append(ps, np.where+": spec.egress: restricted without allowing DNS (UDP 53): aguard could resolve neither agents nor Redis")
			}
		}
	}
	return ps
}

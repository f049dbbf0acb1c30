package deploy

// The deployment files are checked against the code they configure, not
// against a copy of its rules: settings with config.Flags and config.Load,
// probes with admin.Handler, the policy copy with policies/aguard/default.rego.
//
// TestDeployFiles runs every check on the files as they are.
// TestChecksCatchBreakage breaks the files in memory, one way at a time, and
// requires the checks to notice: a check that cannot fail is caught there.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/aguard/aguard/admin"
	"github.com/aguard/aguard/config"
)

// defaultRego is the shipped default policy, as a key of tree.
const defaultRego = "../policies/aguard/default.rego"

// notChecked are local, git-ignored copies of the examples (see .gitignore):
// they may hold secrets and are not part of what is shipped.
var notChecked = map[string]bool{"aguard.env": true, "k8s/secret.yaml": true}

// tree is the content of the deployment files, by slash path relative to
// deploy/ (plus defaultRego).
type tree map[string][]byte

func readTree(t *testing.T) tree {
	t.Helper()
	files := tree{}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel := filepath.ToSlash(p)
		if strings.HasSuffix(rel, ".go") || notChecked[rel] {
			return nil
		}
		files[rel], err = os.ReadFile(p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if files[defaultRego], err = os.ReadFile(filepath.FromSlash(defaultRego)); err != nil {
		t.Fatal(err)
	}
	return files
}

// check is one rule about the deployment files; it returns the problems it
// finds, each naming the file and the field.
type check struct {
	name string
	run  func(b *bundle) []string
}

var checks = []check{
	{"files parse (Kubernetes objects strictly, by kind)", func(b *bundle) []string { return b.parseProblems }},
	{"dockerfiles run as non-root", checkDockerfilesNonRoot},
	{"Dockerfile builds ./cmd/aguard and listens where it exposes", checkAguardDockerfile},
	{"k8s flags and env vars are aguard settings", checkDeploymentSettingNames},
	{"k8s configuration loads", checkDeploymentConfigLoads},
	{"k8s probes hit admin paths on the admin port", checkDeploymentProbes},
	{"k8s policy mount matches --policy", checkDeploymentPolicyMount},
	{"k8s policy ConfigMap equals policies/aguard/default.rego", checkPolicyCopy},
	{"k8s grace period outlasts preStop and drain", checkGracePeriod},
	{"k8s container is locked down", checkSecurityContext},
	{"k8s resources are set", checkResources},
	{"k8s references resolve (labels, ports, ConfigMaps, Secrets)", checkReferences},
	{"k8s PodDisruptionBudget and HPA fit the Deployment", checkPDBAndHPA},
	{"kustomization lists every manifest", checkKustomization},
	{"compose flags and env vars are aguard settings", checkComposeSettingNames},
	{"compose aguard services load, probe /healthz and drain", checkComposeServices},
	{"nginx balances over the aguard services", checkNginx},
}

func TestDeployFiles(t *testing.T) {
	b := load(readTree(t))
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			for _, p := range c.run(b) {
				t.Error(p)
			}
		})
	}
}

// TestChecksCatchBreakage breaks one thing at a time and requires some
// problem mentioning want. Every `old` must still be in its file, so that
// this table follows the files when they change.
func TestChecksCatchBreakage(t *testing.T) {
	const dep, cm, compose = "k8s/deployment.yaml", "k8s/configmap.yaml", "compose.yaml"
	breakages := []struct {
		name, file, old, new, want string
	}{
		{"misspelled field", dep, "readOnlyRootFilesystem:", "readOnlyRootFileSystem:", `unknown field "spec.template.spec.containers[0].securityContext.readOnlyRootFileSystem"`},
		{"misspelled PDB field", "k8s/pdb.yaml", "minAvailable:", "minAvailabe:", "unknown field"},
		{"wrong apiVersion", "k8s/hpa.yaml", "autoscaling/v2\n", "autoscaling/v1\n", "apiVersion"},
		{"readiness on a path not served", dep, "path: /readyz", "path: /ready", "readinessProbe"},
		{"readiness that never drops", dep, "path: /readyz", "path: /healthz", "readinessProbe"},
		{"liveness on readiness", dep, "path: /healthz", "path: /readyz", "livenessProbe"},
		{"probes on the data port", dep, "port: admin", "port: http", "livenessProbe"},
		{"admin port moved", dep, "value: 0.0.0.0:9090", "value: 0.0.0.0:9191", "9191"},
		{"admin on loopback", dep, "value: 0.0.0.0:9090", "value: 127.0.0.1:9090", "127.0.0.1"},
		{"unknown env var", dep, "name: AGUARD_LISTEN\n", "name: AGUARD_LISTEN_ADDR\n", "AGUARD_LISTEN_ADDR"},
		{"unknown flag", dep, "- --policy\n", "- --policy-dir\n", "--policy-dir"},
		{"not serve", dep, "- serve\n", "- replay\n", `"serve"`},
		{"policy mounted elsewhere", dep, "mountPath: /etc/aguard/policy\n", "mountPath: /etc/aguard/policies\n", "--policy"},
		{"config file not mounted", dep, "mountPath: /etc/aguard/config\n", "mountPath: /etc/aguard/conf\n", "--config"},
		{"grace period too short", dep, "terminationGracePeriodSeconds: 50", "terminationGracePeriodSeconds: 35", "terminationGracePeriodSeconds"},
		{"drain timeout raised in the config file", cm, "drain-timeout: 30s", "drain-timeout: 45s", "terminationGracePeriodSeconds"},
		{"unknown config file key", cm, "drain-timeout: 30s", "drain-timout: 30s", "drain-timout"},
		{"policy copy out of date", cm, "# A deny always wins.", "# A deny wins.", "default.rego"},
		{"root allowed", dep, "runAsNonRoot: true", "runAsNonRoot: false", "runAsNonRoot"},
		{"capabilities kept", dep, `drop: ["ALL"]`, `drop: ["NET_RAW"]`, "capabilities.drop"},
		{"writable root", dep, "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "readOnlyRootFilesystem"},
		{"no memory limit", dep, "memory: 512Mi", "ephemeral-storage: 1Gi", "limits.memory"},
		{"service targets a missing port", "k8s/service.yaml", "targetPort: admin", "targetPort: metrics", "targetPort"},
		{"service selects nothing", "k8s/service.yaml", "component: proxy\n  ports:", "component: gateway\n  ports:", "selector"},
		{"secret key mismatch", "k8s/secret.example.yaml", "  token:", "  admin-token:", "secretKeyRef"},
		{"HPA targets another Deployment", "k8s/hpa.yaml", "kind: Deployment\n    name: aguard", "kind: Deployment\n    name: aguard-proxy", "scaleTargetRef"},
		{"HPA may scale to one", "k8s/hpa.yaml", "minReplicas: 2", "minReplicas: 1", "minReplicas"},
		{"kustomization names a missing file", "k8s/kustomization.yaml", "- hpa.yaml", "- hpas.yaml", "hpas.yaml"},
		{"compose: unknown flag", compose, "- --redis\n", "- --redis-url\n", "--redis-url"},
		{"compose: unknown env var", compose, "AGUARD_LOG_FORMAT:", "AGUARD_LOGFORMAT:", "AGUARD_LOGFORMAT"},
		{"compose: unknown env var in the env file", "aguard.env.example", "AGUARD_ADMIN_TOKEN=", "AGUARD_ADMINTOKEN=", "AGUARD_ADMINTOKEN"},
		{"compose: healthcheck path", compose, "9090/healthz", "9090/health", "healthcheck"},
		{"compose: healthcheck port", compose, "127.0.0.1:9090/healthz", "127.0.0.1:8080/healthz", "healthcheck"},
		{"compose: grace period", compose, "stop_grace_period: 30s", "stop_grace_period: 10s", "stop_grace_period"},
		{"compose: Redis host is no service", compose, "redis://redis:6379/0", "redis://cache:6379/0", `"cache"`},
		{"compose: policy not mounted", compose, ":/etc/aguard/policy:ro", ":/etc/aguard/pol:ro", "--policy"},
		{"Dockerfile: root user", "Dockerfile", "USER 65532:65532", "USER root", "USER"},
		{"Dockerfile: builds something else", "Dockerfile", "/out/aguard ./cmd/aguard", "/out/aguard ./cmd/other", "./cmd/aguard"},
		{"Dockerfile: no revision", "Dockerfile", " -X main.revision=$REVISION", "", "main.revision"},
		{"Dockerfile: revision optional", "Dockerfile", `: "${REVISION:?`, `: "${REVISION:-`, "main.revision"},
		{"compose: no revision", compose, "REVISION: ${AGUARD_REVISION:-unknown}", "", "REVISION"},
		{"Dockerfile: exposes another port", "Dockerfile", "EXPOSE 8080 9090", "EXPOSE 8080", "EXPOSE"},
		{"Dockerfile: unknown env var", "Dockerfile", "AGUARD_ADMIN_LISTEN=", "AGUARD_ADMIN_ADDR=", "AGUARD_ADMIN_ADDR"},
		{"Dockerfile: healthcheck not shipped", "Dockerfile", "/out/healthcheck /healthcheck", "/out/healthcheck /usr/bin/healthcheck", "/healthcheck"},
		{"demo agent: root user", "demo-agent/Dockerfile", "USER 65532:65532", "USER 0", "USER"},
		{"nginx: wrong port", "nginx.conf", "server aguard-2:8080", "server aguard-2:9090", "nginx.conf"},
		{"nginx: replica left out", "nginx.conf", "server aguard-2:8080", "server aguard-1:8080", "aguard-2"},
	}
	orig := readTree(t)
	if ps := allProblems(load(orig)); len(ps) > 0 {
		t.Fatalf("the files as they are have problems (see TestDeployFiles): %q", ps)
	}
	for _, br := range breakages {
		t.Run(br.name, func(t *testing.T) {
			files := maps.Clone(orig)
			if !bytes.Contains(files[br.file], []byte(br.old)) {
				t.Fatalf("%s no longer contains %q: update this breakage", br.file, br.old)
			}
			files[br.file] = bytes.ReplaceAll(files[br.file], []byte(br.old), []byte(br.new))
			ps := allProblems(load(files))
			i := slices.IndexFunc(ps, func(p string) bool { return strings.Contains(p, br.want) })
			if i < 0 {
				t.Fatalf("replacing %q with %q in %s: want a problem mentioning %q, got %q", br.old, br.new, br.file, br.want, ps)
			}
			t.Logf("caught: %s", ps[i])
		})
	}
}

func allProblems(b *bundle) []string {
	var ps []string
	for _, c := range checks {
		ps = append(ps, c.run(b)...)
	}
	return ps
}

// ---- loading ----------------------------------------------------------------

// bundle is the deployment files, parsed.
type bundle struct {
	tree          tree
	parseProblems []string
	k8s           []k8sDoc
	kustomization *kustomization
	compose       *composeFile
	dockerfiles   map[string][]stage // by tree key
	// chartValues are the values a chart was rendered with (helm_test.go);
	// nil for the files in k8s/.
	chartValues chartutil.Values
}

// k8sDoc is one decoded Kubernetes object.
type k8sDoc struct {
	where string // file, document number, kind and name
	file  string
	obj   any
}

// k8sKinds are the kinds the manifests may hold, with their API version.
var k8sKinds = map[string]struct {
	apiVersion string
	new        func() any
}{
	"Deployment":              {"apps/v1", func() any { return new(appsv1.Deployment) }},
	"Service":                 {"v1", func() any { return new(corev1.Service) }},
	"ConfigMap":               {"v1", func() any { return new(corev1.ConfigMap) }},
	"Secret":                  {"v1", func() any { return new(corev1.Secret) }},
	"PodDisruptionBudget":     {"policy/v1", func() any { return new(policyv1.PodDisruptionBudget) }},
	"HorizontalPodAutoscaler": {"autoscaling/v2", func() any { return new(autoscalingv2.HorizontalPodAutoscaler) }},
	"NetworkPolicy":           {"networking.k8s.io/v1", func() any { return new(networkingv1.NetworkPolicy) }},
	"ServiceMonitor":          {"monitoring.coreos.com/v1", func() any { return new(serviceMonitor) }},
}

type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace,omitempty"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images,omitempty"`
}

func load(files tree) *bundle {
	b := &bundle{tree: files, dockerfiles: map[string][]stage{}}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		data := files[name]
		switch {
		case name == "k8s/kustomization.yaml":
			var k kustomization
			if err := strictYAML(data, &k); err != nil {
				b.parseProblems = append(b.parseProblems, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			b.kustomization = &k
		case strings.HasPrefix(name, "k8s/") && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")):
			b.loadK8s(name, data)
		case name == "compose.yaml":
			var c composeFile
			if err := yaml.Unmarshal(data, &c); err != nil {
				b.parseProblems = append(b.parseProblems, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			b.compose = &c
		case path.Base(name) == "Dockerfile":
			b.dockerfiles[name] = parseDockerfile(data)
		}
	}
	return b
}

// loadK8s decodes every document of a manifest file strictly into its API
// type: an unknown (misspelled) field is an error.
func (b *bundle) loadK8s(file string, data []byte) {
	for i, doc := range splitYAML(data) {
		where := fmt.Sprintf("%s (document %d)", file, i+1)
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			b.parseProblems = append(b.parseProblems, fmt.Sprintf("%s: %v", where, err))
			continue
		}
		kind, ok := k8sKinds[head.Kind]
		if !ok {
			b.parseProblems = append(b.parseProblems, fmt.Sprintf("%s: kind %q is not one this test knows (add it to k8sKinds)", where, head.Kind))
			continue
		}
		if head.APIVersion != kind.apiVersion {
			b.parseProblems = append(b.parseProblems, fmt.Sprintf("%s: apiVersion %q, want %q for a %s", where, head.APIVersion, kind.apiVersion, head.Kind))
			continue
		}
		obj := kind.new()
		if err := strictYAML(doc, obj); err != nil {
			b.parseProblems = append(b.parseProblems, fmt.Sprintf("%s: %s %s: %v", where, head.Kind, head.Metadata.Name, err))
			continue
		}
		b.k8s = append(b.k8s, k8sDoc{where: fmt.Sprintf("%s %s %q", file, head.Kind, head.Metadata.Name), file: file, obj: obj})
	}
}

// strictYAML decodes YAML into v the way the API server's strict field
// validation does: keys must match the JSON field names exactly (case
// included: encoding/json alone would accept readOnlyRootFileSystem), no
// unknown and no duplicate keys.
func strictYAML(data []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, v)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// splitYAML splits a multi-document YAML file at its "---" lines and drops
// documents that hold nothing but comments.
func splitYAML(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		if j, err := yaml.YAMLToJSON(cur.Bytes()); err != nil || string(j) != "null" {
			docs = append(docs, bytes.Clone(cur.Bytes()))
		}
		cur.Reset()
	}
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if l := strings.TrimRight(line, " \t\r\n"); l == "---" || strings.HasPrefix(l, "--- #") {
			flush()
			continue
		}
		cur.WriteString(line)
	}
	flush()
	return docs
}

// objects returns the decoded objects of type T.
func objects[T any](b *bundle) []located[T] {
	var out []located[T]
	for _, d := range b.k8s {
		if o, ok := d.obj.(T); ok {
			out = append(out, located[T]{d.where, d.file, o})
		}
	}
	return out
}

type located[T any] struct {
	where, file string
	obj         T
}

// aguardDeployment is the Deployment and its aguard container.
type aguardDeployment struct {
	where string
	d     *appsv1.Deployment
	c     *corev1.Container
	field string // the container's field path, for messages
}

func (b *bundle) deployment() (*aguardDeployment, []string) {
	deps := objects[*appsv1.Deployment](b)
	if len(deps) != 1 {
		return nil, []string{fmt.Sprintf("k8s: want exactly one Deployment, found %d", len(deps))}
	}
	d := deps[0]
	cs := d.obj.Spec.Template.Spec.Containers
	i := slices.IndexFunc(cs, func(c corev1.Container) bool { return c.Name == "aguard" })
	if i < 0 {
		return nil, []string{d.where + ": spec.template.spec.containers: no container named aguard"}
	}
	return &aguardDeployment{where: d.where, d: d.obj, c: &cs[i], field: fmt.Sprintf("spec.template.spec.containers[%d]", i)}, nil
}

// ---- settings -----------------------------------------------------------------

// settingFlag reports whether name is a flag of aguard serve.
func settingFlag(name string) bool {
	_, ok := config.Lookup(name)
	return ok || name == "config"
}

// settingEnv reports whether name is the environment variable of a setting.
func settingEnv(name string) bool {
	return name == "AGUARD_CONFIG" || slices.ContainsFunc(config.Flags, func(f config.Flag) bool { return f.Env() == name })
}

// flagProblems names the flags in args (after "serve") that aguard serve
// does not have. Every flag of aguard serve takes a value.
func flagProblems(where string, args []string) []string {
	var ps []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			ps = append(ps, fmt.Sprintf("%s: argument %q is not a flag (aguard serve takes no arguments)", where, a))
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !settingFlag(name) {
			ps = append(ps, fmt.Sprintf("%s: %s is not a flag of aguard serve (config.Flags)", where, a))
		}
		if !hasValue {
			if i+1 == len(args) {
				ps = append(ps, fmt.Sprintf("%s: %s has no value", where, a))
			}
			i++
		}
	}
	return ps
}

// envProblems names the AGUARD_* variables that set nothing: aguard ignores
// an unknown variable, so a misspelt one would pass unnoticed.
func envProblems(where string, names []string) []string {
	var ps []string
	for _, n := range names {
		if strings.HasPrefix(n, "AGUARD_") && !settingEnv(n) {
			ps = append(ps, fmt.Sprintf("%s: %s is not the variable of any setting (config.Flags)", where, n))
		}
	}
	return ps
}

// launch is how one aguard container is started.
type launch struct {
	args  []string          // after "serve"
	env   map[string]string // image ENV, then the container's own
	files map[string][]byte // files in the container, by absolute path
}

// loadConfig resolves the settings with aguard's own loader. A --config file
// (or AGUARD_CONFIG) must be among files; it is copied to a temporary file.
func (l launch) loadConfig() (*config.Config, error) {
	dir, err := os.MkdirTemp("", "aguard-deploy-test-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	configPath := ""
	materialise := func(p string) (string, error) {
		configPath = p
		data, ok := l.files[path.Clean(p)]
		if !ok {
			return "", fmt.Errorf("--config %s: no such file in the container (nothing is mounted there)", p)
		}
		tmp := filepath.Join(dir, "config.yaml")
		return tmp, os.WriteFile(tmp, data, 0o600)
	}
	args := slices.Clone(l.args)
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !strings.HasPrefix(args[i], "-") || name != "config" {
			continue
		}
		if !hasValue && i+1 < len(args) {
			i++
			value = args[i]
		}
		tmp, err := materialise(value)
		if err != nil {
			return nil, err
		}
		if hasValue {
			args[i] = "--config=" + tmp
		} else {
			args[i] = tmp
		}
	}
	env := maps.Clone(l.env)
	if v := env["AGUARD_CONFIG"]; v != "" {
		if env["AGUARD_CONFIG"], err = materialise(v); err != nil {
			return nil, err
		}
	}
	cfg, err := config.Load(args, func(k string) string { return env[k] }, io.Discard)
	if err != nil && configPath != "" {
		// Name the file as the container sees it, not the temporary copy.
		err = errors.New(strings.ReplaceAll(err.Error(), filepath.Join(dir, "config.yaml"), configPath))
	}
	return cfg, err
}

// listenPort is the port of a listen address, and whether other hosts can
// reach it (not a loopback address).
func listenPort(addr string) (port int, reachable bool, err error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, false, err
	}
	port, err = strconv.Atoi(p)
	if err != nil {
		return 0, false, fmt.Errorf("port %q: %w", p, err)
	}
	ip := net.ParseIP(host)
	return port, host != "localhost" && (ip == nil || !ip.IsLoopback()), nil
}

// ---- admin handler -------------------------------------------------------------

// adminStatus is what aguard's real admin handler answers a GET of p with,
// while its readiness check says ready.
func adminStatus(p string, ready bool) int {
	h := admin.Handler(admin.Options{
		Gatherer: prometheus.NewRegistry(),
		Ready:    []admin.Check{func() (bool, string) { return ready, "draining" }},
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
	return rec.Code
}

// livenessProblem: a liveness path must answer 200 also while aguard is not
// ready (draining), or pods would be restarted mid-drain.
func livenessProblem(p string) string {
	if ready, notReady := adminStatus(p, true), adminStatus(p, false); ready != 200 || notReady != 200 {
		return fmt.Sprintf("path %s answers %d when ready and %d when draining; a liveness path must answer 200 in both (use /healthz)", p, ready, notReady)
	}
	return ""
}

// readinessProblem: a readiness path must answer 200 when ready and fail
// while draining, so that a draining pod leaves the Service.
func readinessProblem(p string) string {
	if ready, notReady := adminStatus(p, true), adminStatus(p, false); ready != 200 || notReady < 500 {
		return fmt.Sprintf("path %s answers %d when ready and %d when draining; a readiness path must answer 200, then 503 (use /readyz)", p, ready, notReady)
	}
	return ""
}

// ---- Dockerfiles ---------------------------------------------------------------

type stage struct {
	from, name string
	instrs     []instr
}

type instr struct {
	cmd  string // upper case
	args string
}

// parseDockerfile reads the stages and instructions of a Dockerfile: comment
// lines dropped, continuation lines joined.
func parseDockerfile(data []byte) []stage {
	var stages []stage
	var logical []string
	cur := ""
	for _, line := range strings.Split(string(data), "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(t, `\`); ok {
			cur += s + " "
			continue
		}
		logical = append(logical, cur+t)
		cur = ""
	}
	for _, l := range logical {
		cmd, args, _ := strings.Cut(l, " ")
		in := instr{strings.ToUpper(cmd), strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			st := stage{}
			f := nonFlags(in.args)
			if len(f) > 0 {
				st.from = f[0]
			}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) > 0 {
			stages[len(stages)-1].instrs = append(stages[len(stages)-1].instrs, in)
		}
	}
	return stages
}

func nonFlags(args string) []string {
	return slices.DeleteFunc(strings.Fields(args), func(s string) bool { return strings.HasPrefix(s, "--") })
}

func (s stage) all(cmd string) []string {
	var out []string
	for _, in := range s.instrs {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

// env is the stage's ENV settings (KEY=VALUE pairs, or the old KEY VALUE form).
func (s stage) env() (map[string]string, []string) {
	env := map[string]string{}
	var order []string
	for _, a := range s.all("ENV") {
		fields := strings.Fields(a)
		if len(fields) > 0 && !strings.Contains(fields[0], "=") {
			env[fields[0]] = strings.Join(fields[1:], " ")
			order = append(order, fields[0])
			continue
		}
		for _, f := range fields {
			k, v, _ := strings.Cut(f, "=")
			env[k] = strings.Trim(v, `"`)
			order = append(order, k)
		}
	}
	return env, order
}

// copies is the destinations of the stage's COPY instructions, by source.
func (s stage) copies() map[string]string {
	out := map[string]string{}
	for _, a := range s.all("COPY") {
		if f := nonFlags(a); len(f) >= 2 {
			for _, src := range f[:len(f)-1] {
				out[src] = f[len(f)-1]
			}
		}
	}
	return out
}

// exec reads an exec-form (JSON array) instruction argument.
func exec(args string) ([]string, error) {
	var v []string
	if err := json.Unmarshal([]byte(args), &v); err != nil || len(v) == 0 {
		return nil, fmt.Errorf("%s: not the exec (JSON array) form", args)
	}
	return v, nil
}

func checkDockerfilesNonRoot(b *bundle) []string {
	var ps []string
	if len(b.dockerfiles) == 0 {
		return []string{"deploy: no Dockerfile"}
	}
	for _, name := range slices.Sorted(maps.Keys(b.dockerfiles)) {
		stages := b.dockerfiles[name]
		if len(stages) == 0 {
			ps = append(ps, name+": no FROM")
			continue
		}
		final := stages[len(stages)-1]
		users := final.all("USER")
		switch {
		case len(users) > 0:
			user, _, _ := strings.Cut(users[len(users)-1], ":")
			if user == "" || user == "root" || user == "0" {
				ps = append(ps, fmt.Sprintf("%s: USER %s: the final stage must run as a non-root user", name, users[len(users)-1]))
			} else if _, err := strconv.Atoi(user); err != nil {
				ps = append(ps, fmt.Sprintf("%s: USER %s: use a numeric user, so that Kubernetes' runAsNonRoot can verify it", name, users[len(users)-1]))
			}
		case !strings.Contains(final.from, ":nonroot"):
			ps = append(ps, fmt.Sprintf("%s: the final stage (FROM %s) sets no USER and its base is not a nonroot image", name, final.from))
		}
		ep := final.all("ENTRYPOINT")
		if len(ep) == 0 {
			ps = append(ps, name+": the final stage has no ENTRYPOINT")
		} else if v, err := exec(ep[len(ep)-1]); err != nil {
			ps = append(ps, fmt.Sprintf("%s: ENTRYPOINT %v", name, err))
		} else if !slices.Contains(slices.Collect(maps.Values(final.copies())), v[0]) {
			ps = append(ps, fmt.Sprintf("%s: ENTRYPOINT runs %s, which no COPY of the final stage puts there", name, v[0]))
		}
		for _, hc := range final.all("HEALTHCHECK") {
			_, cmd, found := strings.Cut(hc, "CMD ")
			if !found {
				continue // HEALTHCHECK NONE
			}
			if v, err := exec(cmd); err != nil {
				ps = append(ps, fmt.Sprintf("%s: HEALTHCHECK %v", name, err))
			} else if !slices.Contains(slices.Collect(maps.Values(final.copies())), v[0]) {
				ps = append(ps, fmt.Sprintf("%s: HEALTHCHECK runs %s, which no COPY of the final stage puts there", name, v[0]))
			}
		}
	}
	return ps
}

var goBuildAguard = regexp.MustCompile(`go build .*-o (\S+) \./cmd/aguard(\s|$)`)

// imageEnv is the environment aguard's image sets (deploy/Dockerfile).
func (b *bundle) imageEnv() map[string]string {
	stages := b.dockerfiles["Dockerfile"]
	if len(stages) == 0 {
		return map[string]string{}
	}
	env, _ := stages[len(stages)-1].env()
	return env
}

func checkAguardDockerfile(b *bundle) []string {
	const name = "Dockerfile"
	stages := b.dockerfiles[name]
	if len(stages) < 2 {
		return []string{name + ": want a multi-stage build (a Go builder, then the runtime image)"}
	}
	var ps []string
	final := stages[len(stages)-1]
	// The builder compiles ./cmd/aguard statically; the final stage copies
	// that output and runs it.
	out, builder := "", ""
	for _, st := range stages[:len(stages)-1] {
		for _, run := range st.all("RUN") {
			if m := goBuildAguard.FindStringSubmatch(run); m != nil {
				out, builder = m[1], st.name
				if !strings.Contains(run, "CGO_ENABLED=0") {
					ps = append(ps, name+": the go build of ./cmd/aguard must set CGO_ENABLED=0 (the runtime image has no libc)")
				}
				// The context holds no .git: Go cannot stamp the revision,
				// so the build takes it as a required argument.
				if !strings.Contains(run, "-X main.revision=$REVISION") || !strings.Contains(run, `"${REVISION:?`) || !slices.Contains(st.all("ARG"), "REVISION") {
					ps = append(ps, name+`: the go build of ./cmd/aguard must set -X main.revision=$REVISION from a required ARG REVISION (: "${REVISION:?…}"), for aguard --version`)
				}
			}
		}
	}
	if out == "" {
		return append(ps, name+": no builder stage runs `go build ... -o <file> ./cmd/aguard`")
	}
	dest := ""
	for _, a := range final.all("COPY") {
		f := strings.Fields(a)
		if slices.Contains(f, "--from="+builder) && slices.Contains(f, out) {
			dest = f[len(f)-1]
		}
	}
	if dest == "" {
		ps = append(ps, fmt.Sprintf("%s: the final stage does not COPY --from=%s %s", name, builder, out))
	} else if ep := final.all("ENTRYPOINT"); len(ep) > 0 {
		if v, err := exec(ep[len(ep)-1]); err == nil && v[0] != dest {
			ps = append(ps, fmt.Sprintf("%s: ENTRYPOINT runs %s, not the aguard binary at %s", name, v[0], dest))
		}
	}
	if cmds := final.all("CMD"); len(cmds) == 0 {
		ps = append(ps, name+`: no CMD; want CMD ["serve"]`)
	} else if v, err := exec(cmds[len(cmds)-1]); err != nil || len(v) == 0 || v[0] != "serve" {
		ps = append(ps, fmt.Sprintf(`%s: CMD %s; want ["serve"]`, name, cmds[len(cmds)-1]))
	}
	env, order := final.env()
	ps = append(ps, envProblems(name+": ENV", order)...)
	// The image's own defaults must listen where other containers reach
	// them, on the ports it EXPOSEs.
	cfg, err := launch{args: []string{"--upstream", "http://agent.invalid"}, env: env}.loadConfig()
	if err != nil {
		return append(ps, fmt.Sprintf("%s: ENV: aguard does not start with it: %v", name, err))
	}
	var exposed []int
	for _, e := range final.all("EXPOSE") {
		for _, p := range strings.Fields(e) {
			n, _ := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
			exposed = append(exposed, n)
		}
	}
	for _, l := range []struct{ setting, addr string }{{"listen", cfg.Listen}, {"admin-listen", cfg.AdminListen}} {
		port, reachable, err := listenPort(l.addr)
		switch {
		case err != nil:
			ps = append(ps, fmt.Sprintf("%s: %s %q: %v", name, l.setting, l.addr, err))
		case !reachable:
			ps = append(ps, fmt.Sprintf("%s: ENV: %s is %s, which nothing outside the container can reach; set AGUARD_%s=0.0.0.0:<port>", name, l.setting, l.addr, strings.ToUpper(strings.ReplaceAll(l.setting, "-", "_"))))
		case !slices.Contains(exposed, port):
			ps = append(ps, fmt.Sprintf("%s: EXPOSE %v does not include port %d of %s (%s)", name, exposed, port, l.setting, l.addr))
		}
	}
	return ps
}

// ---- Kubernetes ------------------------------------------------------------------

// deploymentLaunch is how the Deployment starts aguard: its args, its env on
// top of the image's, and the files its ConfigMap volumes put in place.
func (b *bundle) deploymentLaunch(ad *aguardDeployment) (launch, []string) {
	var ps []string
	c := ad.c
	if len(c.Command) > 0 && !slices.Equal(c.Command, []string{"/aguard"}) {
		ps = append(ps, fmt.Sprintf("%s: %s.command: %q replaces the image's ENTRYPOINT /aguard; leave it unset", ad.where, ad.field, c.Command))
	}
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		ps = append(ps, fmt.Sprintf(`%s: %s.args: want "serve" first, got %q`, ad.where, ad.field, c.Args))
		return launch{}, ps
	}
	l := launch{args: c.Args[1:], env: b.imageEnv(), files: map[string][]byte{}}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			v, ok := b.secretValue(ref.Name, ref.Key)
			switch {
			case ok:
				l.env[e.Name] = v
			case ref.Optional != nil && *ref.Optional:
				// Not set: the kubelet leaves an optional reference out.
			default:
				l.env[e.Name] = "value-from-" + e.Name // checkReferences reports it
			}
		case e.ValueFrom != nil:
			l.env[e.Name] = "value-from-" + e.Name // a field: any non-empty value
		default:
			l.env[e.Name] = e.Value
		}
	}
	cms := map[string]*corev1.ConfigMap{}
	for _, cm := range objects[*corev1.ConfigMap](b) {
		cms[cm.obj.Name] = cm.obj
	}
	for _, m := range c.VolumeMounts {
		if sv := ad.secretVolume(m.Name); sv != nil {
			// A Secret's items (key -> path), or every key.
			items := sv.Items
			if len(items) == 0 {
				for _, s := range objects[*corev1.Secret](b) {
					if s.obj.Name == sv.SecretName {
						for k := range s.obj.Data {
							items = append(items, corev1.KeyToPath{Key: k, Path: k})
						}
					}
				}
			}
			for _, it := range items {
				if v, ok := b.secretValue(sv.SecretName, it.Key); ok {
					l.files[path.Join(m.MountPath, it.Path)] = []byte(v)
				}
			}
			continue
		}
		cm := cms[ad.configMapOf(m.Name)]
		if cm == nil {
			continue
		}
		switch {
		case m.SubPath != "":
			if v, ok := cm.Data[m.SubPath]; ok {
				l.files[path.Clean(m.MountPath)] = []byte(v)
			}
		default:
			for k, v := range cm.Data {
				l.files[path.Join(m.MountPath, k)] = []byte(v)
			}
		}
	}
	return l, ps
}

// secretValue is the value of key in the Secret name among the manifests.
func (b *bundle) secretValue(name, key string) (string, bool) {
	for _, s := range objects[*corev1.Secret](b) {
		if s.obj.Name != name {
			continue
		}
		if v, ok := s.obj.StringData[key]; ok {
			return v, true
		}
		if v, ok := s.obj.Data[key]; ok {
			return string(v), true
		}
	}
	return "", false
}

// secretVolume is the Secret behind the named volume, if it is one.
func (ad *aguardDeployment) secretVolume(volume string) *corev1.SecretVolumeSource {
	for _, v := range ad.d.Spec.Template.Spec.Volumes {
		if v.Name == volume && v.Secret != nil {
			return v.Secret
		}
	}
	return nil
}

// configMapOf is the ConfigMap behind the named volume, if it is one.
func (ad *aguardDeployment) configMapOf(volume string) string {
	for _, v := range ad.d.Spec.Template.Spec.Volumes {
		if v.Name == volume && v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	return ""
}

// deploymentConfig is the Deployment's aguard settings, resolved.
func (b *bundle) deploymentConfig() (*aguardDeployment, *config.Config, []string) {
	ad, ps := b.deployment()
	if ad == nil {
		return nil, nil, ps
	}
	l, ps := b.deploymentLaunch(ad)
	if len(ps) > 0 {
		return ad, nil, ps
	}
	cfg, err := l.loadConfig()
	if err != nil {
		return ad, nil, []string{fmt.Sprintf("%s: %s: aguard serve does not start with these args, env and files: %v", ad.where, ad.field, err)}
	}
	return ad, cfg, nil
}

func checkDeploymentSettingNames(b *bundle) []string {
	ad, ps := b.deployment()
	if ad == nil {
		return ps
	}
	if len(ad.c.Args) > 0 {
		ps = append(ps, flagProblems(fmt.Sprintf("%s: %s.args", ad.where, ad.field), ad.c.Args[1:])...)
	}
	var names []string
	for _, e := range ad.c.Env {
		names = append(names, e.Name)
	}
	if len(ad.c.EnvFrom) > 0 {
		// Names from envFrom are only known at run time.
		ps = append(ps, fmt.Sprintf("%s: %s.envFrom: cannot be checked; list the variables in env", ad.where, ad.field))
	}
	return append(ps, envProblems(fmt.Sprintf("%s: %s.env", ad.where, ad.field), names)...)
}

func checkDeploymentConfigLoads(b *bundle) []string {
	_, _, ps := b.deploymentConfig()
	return ps
}

// containerPort resolves a probe's or Service's target port (a name or a
// number) to a port of the container.
func containerPort(c *corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

func checkDeploymentProbes(b *bundle) []string {
	ad, cfg, ps := b.deploymentConfig()
	if cfg == nil {
		return ps
	}
	adminPort, reachable, err := listenPort(cfg.AdminListen)
	if err != nil {
		return []string{fmt.Sprintf("%s: admin-listen %q: %v", ad.where, cfg.AdminListen, err)}
	}
	if !reachable {
		ps = append(ps, fmt.Sprintf("%s: %s: admin-listen resolves to %s, which the kubelet's probes cannot reach; listen on 0.0.0.0", ad.where, ad.field, cfg.AdminListen))
	}
	dataPort, reachable, err := listenPort(cfg.Listen)
	if err != nil || !reachable {
		ps = append(ps, fmt.Sprintf("%s: %s: listen resolves to %s, which a Service cannot reach; listen on 0.0.0.0", ad.where, ad.field, cfg.Listen))
	}
	for _, want := range []int{dataPort, adminPort} {
		if _, ok := containerPort(ad.c, intstr.FromInt32(int32(want))); !ok {
			ps = append(ps, fmt.Sprintf("%s: %s.ports: no containerPort %d (where aguard listens: listen %s, admin-listen %s)", ad.where, ad.field, want, cfg.Listen, cfg.AdminListen))
		}
	}
	probes := []struct {
		field string
		p     *corev1.Probe
		rule  func(string) string
	}{
		{"livenessProbe", ad.c.LivenessProbe, livenessProblem},
		{"readinessProbe", ad.c.ReadinessProbe, readinessProblem},
		{"startupProbe", ad.c.StartupProbe, livenessProblem},
	}
	for _, pr := range probes {
		field := fmt.Sprintf("%s: %s.%s", ad.where, ad.field, pr.field)
		if pr.p == nil {
			if pr.field != "startupProbe" {
				ps = append(ps, field+": missing")
			}
			continue
		}
		g := pr.p.HTTPGet
		if g == nil {
			ps = append(ps, field+": want an httpGet probe on the admin port")
			continue
		}
		if msg := pr.rule(g.Path); msg != "" {
			ps = append(ps, field+".httpGet: "+msg)
		}
		if port, ok := containerPort(ad.c, g.Port); !ok {
			ps = append(ps, fmt.Sprintf("%s.httpGet.port: %s is not a port of the container", field, g.Port.String()))
		} else if int(port) != adminPort {
			ps = append(ps, fmt.Sprintf("%s.httpGet.port: %s is port %d, but the admin listener is on %d (admin-listen %s)", field, g.Port.String(), port, adminPort, cfg.AdminListen))
		}
	}
	return ps
}

func checkDeploymentPolicyMount(b *bundle) []string {
	ad, cfg, ps := b.deploymentConfig()
	if cfg == nil {
		return ps
	}
	if cfg.Policy == "" {
		return []string{ad.where + ": --policy is not set; the manifests ship a policy ConfigMap for it"}
	}
	for _, m := range ad.c.VolumeMounts {
		if path.Clean(m.MountPath) != path.Clean(cfg.Policy) {
			continue
		}
		if m.SubPath != "" {
			return []string{fmt.Sprintf("%s: %s.volumeMounts[%s].subPath: a subPath mount never sees ConfigMap updates; mount the whole ConfigMap", ad.where, ad.field, m.Name)}
		}
		if ad.configMapOf(m.Name) == "" {
			return []string{fmt.Sprintf("%s: volume %s mounted at --policy %s is not a ConfigMap", ad.where, m.Name, cfg.Policy)}
		}
		return nil
	}
	return []string{fmt.Sprintf("%s: %s.volumeMounts: nothing is mounted at --policy %s", ad.where, ad.field, cfg.Policy)}
}

// policyConfigMap is the ConfigMap mounted at --policy.
func (b *bundle) policyConfigMap() (*located[*corev1.ConfigMap], []string) {
	ad, cfg, ps := b.deploymentConfig()
	if cfg == nil {
		return nil, ps
	}
	for _, m := range ad.c.VolumeMounts {
		if path.Clean(m.MountPath) == path.Clean(cfg.Policy) {
			name := ad.configMapOf(m.Name)
			for _, cm := range objects[*corev1.ConfigMap](b) {
				if cm.obj.Name == name {
					return &cm, nil
				}
			}
		}
	}
	return nil, []string{fmt.Sprintf("%s: no ConfigMap in k8s/ is mounted at --policy %q", ad.where, cfg.Policy)}
}

func checkPolicyCopy(b *bundle) []string {
	cm, ps := b.policyConfigMap()
	if cm == nil {
		return ps
	}
	want := b.tree[defaultRego]
	got, ok := cm.obj.Data["default.rego"]
	if !ok {
		return []string{fmt.Sprintf("%s: data: no default.rego (the copy of %s)", cm.where, defaultRego)}
	}
	if got == string(want) {
		return nil
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
	for i := range max(len(gl), len(wl)) {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			return []string{fmt.Sprintf("%s: data.default.rego differs from %s at line %d: got %q, want %q (copy the file again, indented by four spaces)", cm.where, defaultRego, i+1, g, w)}
		}
	}
	return []string{fmt.Sprintf("%s: data.default.rego differs from %s", cm.where, defaultRego)}
}

func checkGracePeriod(b *bundle) []string {
	ad, cfg, ps := b.deploymentConfig()
	if cfg == nil {
		return ps
	}
	spec := ad.d.Spec.Template.Spec
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if spec.TerminationGracePeriodSeconds != nil {
		grace = *spec.TerminationGracePeriodSeconds
	}
	var preStop int64
	if lc := ad.c.Lifecycle; lc == nil || lc.PreStop == nil || lc.PreStop.Sleep == nil {
		ps = append(ps, fmt.Sprintf("%s: %s.lifecycle.preStop.sleep: missing; without it new runs reach a pod that has started draining", ad.where, ad.field))
	} else {
		preStop = lc.PreStop.Sleep.Seconds
	}
	if need := time.Duration(preStop)*time.Second + cfg.DrainTimeout; time.Duration(grace)*time.Second <= need {
		ps = append(ps, fmt.Sprintf("%s: spec.template.spec.terminationGracePeriodSeconds: %d s does not exceed preStop sleep %d s + drain-timeout %v; SIGKILL would cut the drain short", ad.where, grace, preStop, cfg.DrainTimeout))
	}
	return ps
}

func checkSecurityContext(b *bundle) []string {
	ad, ps := b.deployment()
	if ad == nil {
		return ps
	}
	pod := ad.d.Spec.Template.Spec.SecurityContext
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	sc := ad.c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	field := ad.where + ": " + ad.field + ".securityContext"
	// The container's setting wins over the pod's.
	nonRoot, user := pod.RunAsNonRoot, pod.RunAsUser
	if sc.RunAsNonRoot != nil {
		nonRoot = sc.RunAsNonRoot
	}
	if sc.RunAsUser != nil {
		user = sc.RunAsUser
	}
	if nonRoot == nil || !*nonRoot {
		ps = append(ps, field+".runAsNonRoot: want true (in the pod's or the container's securityContext)")
	}
	if user != nil && *user == 0 {
		ps = append(ps, field+".runAsUser: 0 is root")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		ps = append(ps, field+".readOnlyRootFilesystem: want true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		ps = append(ps, field+".allowPrivilegeEscalation: want false")
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
		ps = append(ps, field+`.capabilities.drop: want ["ALL"] and nothing added`)
	}
	return ps
}

func checkResources(b *bundle) []string {
	ad, ps := b.deployment()
	if ad == nil {
		return ps
	}
	r := ad.c.Resources
	for _, q := range []struct {
		field string
		list  corev1.ResourceList
		name  corev1.ResourceName
	}{
		{"requests.cpu", r.Requests, corev1.ResourceCPU},
		{"requests.memory", r.Requests, corev1.ResourceMemory},
		{"limits.memory", r.Limits, corev1.ResourceMemory},
		{"limits.cpu", r.Limits, corev1.ResourceCPU},
	} {
		if v, ok := q.list[q.name]; !ok || v.IsZero() {
			ps = append(ps, fmt.Sprintf("%s: %s.resources.%s: missing", ad.where, ad.field, q.field))
		}
	}
	return ps
}

// selects reports whether a selector (non-empty) matches the labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func checkReferences(b *bundle) []string {
	ad, ps := b.deployment()
	if ad == nil {
		return ps
	}
	labels := ad.d.Spec.Template.Labels
	if ad.d.Spec.Selector == nil || !selects(ad.d.Spec.Selector.MatchLabels, labels) || len(ad.d.Spec.Selector.MatchExpressions) > 0 {
		ps = append(ps, ad.where+": spec.selector.matchLabels: must match spec.template.metadata.labels")
	}
	_, cfg, _ := b.deploymentConfig()
	dataPort := -1
	if cfg != nil {
		dataPort, _, _ = listenPort(cfg.Listen)
	}
	servesData := false
	for _, svc := range objects[*corev1.Service](b) {
		if !selects(svc.obj.Spec.Selector, labels) {
			ps = append(ps, fmt.Sprintf("%s: spec.selector %v does not select the Deployment's pods (labels %v)", svc.where, svc.obj.Spec.Selector, labels))
		}
		for i, p := range svc.obj.Spec.Ports {
			target := p.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(p.Port)
			}
			port, ok := containerPort(ad.c, target)
			if !ok {
				ps = append(ps, fmt.Sprintf("%s: spec.ports[%d].targetPort: %s is not a port of the aguard container", svc.where, i, target.String()))
			}
			servesData = servesData || int(port) == dataPort
		}
	}
	if cfg != nil && !servesData {
		ps = append(ps, fmt.Sprintf("k8s: no Service targets the data plane's port %d (listen %s)", dataPort, cfg.Listen))
	}
	cms := map[string]bool{}
	for _, cm := range objects[*corev1.ConfigMap](b) {
		cms[cm.obj.Name] = true
	}
	for i, v := range ad.d.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && !cms[v.ConfigMap.Name] && (v.ConfigMap.Optional == nil || !*v.ConfigMap.Optional) {
			ps = append(ps, fmt.Sprintf("%s: spec.template.spec.volumes[%d].configMap.name: no ConfigMap %q in k8s/", ad.where, i, v.ConfigMap.Name))
		}
	}
	secrets := map[string]*corev1.Secret{}
	for _, s := range objects[*corev1.Secret](b) {
		secrets[s.obj.Name] = s.obj
	}
	for _, e := range ad.c.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		field := fmt.Sprintf("%s: %s.env[%s].valueFrom.secretKeyRef", ad.where, ad.field, e.Name)
		s := secrets[ref.Name]
		if s == nil {
			ps = append(ps, fmt.Sprintf("%s: no Secret %q in k8s/ (not even in secret.example.yaml) to document it", field, ref.Name))
			continue
		}
		_, inData := s.Data[ref.Key]
		_, inString := s.StringData[ref.Key]
		if !inData && !inString && (ref.Optional == nil || !*ref.Optional) {
			ps = append(ps, fmt.Sprintf("%s: Secret %q has no key %q", field, ref.Name, ref.Key))
		}
	}
	return ps
}

func checkPDBAndHPA(b *bundle) []string {
	ad, ps := b.deployment()
	if ad == nil {
		return ps
	}
	labels := ad.d.Spec.Template.Labels
	hpas := objects[*autoscalingv2.HorizontalPodAutoscaler](b)
	// Without spec.replicas (which is how an HPA-managed Deployment avoids
	// being reset on every apply) the HPA's minimum is the floor.
	replicas := int32(1)
	switch {
	case ad.d.Spec.Replicas != nil:
		replicas = *ad.d.Spec.Replicas
	case len(hpas) == 1 && hpas[0].obj.Spec.MinReplicas != nil:
		replicas = *hpas[0].obj.Spec.MinReplicas
	}
	if replicas < 2 {
		ps = append(ps, fmt.Sprintf("%s: spec.replicas: %d; want at least 2", ad.where, replicas))
	}
	pdbs := objects[*policyv1.PodDisruptionBudget](b)
	minAvailable := int32(0)
	if len(pdbs) != 1 {
		ps = append(ps, fmt.Sprintf("k8s: want one PodDisruptionBudget, found %d", len(pdbs)))
	}
	for _, p := range pdbs {
		if p.obj.Spec.Selector == nil || !selects(p.obj.Spec.Selector.MatchLabels, labels) {
			ps = append(ps, p.where+": spec.selector: does not select the Deployment's pods")
		}
		switch ma := p.obj.Spec.MinAvailable; {
		case ma == nil:
			ps = append(ps, p.where+": spec.minAvailable: missing")
		case ma.Type == intstr.Int:
			minAvailable = ma.IntVal
			if minAvailable < 1 || minAvailable >= replicas {
				ps = append(ps, fmt.Sprintf("%s: spec.minAvailable: %d with %d replicas; want at least 1 and fewer than the replicas, or no drain can proceed", p.where, minAvailable, replicas))
			}
		}
	}
	if len(hpas) != 1 {
		ps = append(ps, fmt.Sprintf("k8s: want one HorizontalPodAutoscaler, found %d", len(hpas)))
	}
	for _, h := range hpas {
		ref := h.obj.Spec.ScaleTargetRef
		if ref.APIVersion != "apps/v1" || ref.Kind != "Deployment" || ref.Name != ad.d.Name {
			ps = append(ps, fmt.Sprintf("%s: spec.scaleTargetRef: %s %s %s, want apps/v1 Deployment %s", h.where, ref.APIVersion, ref.Kind, ref.Name, ad.d.Name))
		}
		if m := h.obj.Spec.MinReplicas; m == nil || *m < 2 || *m <= minAvailable {
			ps = append(ps, fmt.Sprintf("%s: spec.minReplicas: want at least 2 and more than the PodDisruptionBudget's minAvailable %d", h.where, minAvailable))
		}
		cpu := slices.ContainsFunc(h.obj.Spec.Metrics, func(m autoscalingv2.MetricSpec) bool {
			return m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU
		})
		if !cpu {
			ps = append(ps, h.where+": spec.metrics: no Resource metric on cpu")
		}
	}
	return ps
}

func checkKustomization(b *bundle) []string {
	k := b.kustomization
	if k == nil {
		if _, ok := b.tree["k8s/kustomization.yaml"]; !ok {
			return []string{"k8s/kustomization.yaml: missing"}
		}
		return nil // a parse problem, reported already
	}
	var ps []string
	const where = "k8s/kustomization.yaml"
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		ps = append(ps, fmt.Sprintf("%s: apiVersion/kind %s %s, want kustomize.config.k8s.io/v1beta1 Kustomization", where, k.APIVersion, k.Kind))
	}
	for i, r := range k.Resources {
		if _, ok := b.tree[path.Join("k8s", r)]; !ok {
			ps = append(ps, fmt.Sprintf("%s: resources[%d]: %s does not exist in k8s/", where, i, r))
		}
	}
	// Every manifest but the examples is applied.
	for name := range b.tree {
		base, ok := strings.CutPrefix(name, "k8s/")
		if !ok || !strings.HasSuffix(base, ".yaml") || base == "kustomization.yaml" || strings.HasSuffix(base, ".example.yaml") {
			continue
		}
		if !slices.Contains(k.Resources, base) {
			ps = append(ps, fmt.Sprintf("%s: resources: %s is not listed", where, base))
		}
	}
	if ad, _ := b.deployment(); ad != nil {
		image, _, _ := strings.Cut(ad.c.Image, ":")
		for i, img := range k.Images {
			if img.Name != image {
				ps = append(ps, fmt.Sprintf("%s: images[%d].name: %s matches no container image (the Deployment runs %s)", where, i, img.Name, ad.c.Image))
			}
		}
	}
	return ps
}

// ---- Compose -----------------------------------------------------------------------

type composeFile struct {
	Services map[string]composeService `json:"services"`
}

type composeService struct {
	Image string `json:"image"`
	Build *struct {
		Context    string            `json:"context"`
		Dockerfile string            `json:"dockerfile"`
		Args       map[string]string `json:"args"`
	} `json:"build"`
	Command         []string          `json:"command"`
	Environment     map[string]string `json:"environment"`
	EnvFile         []string          `json:"env_file"`
	Volumes         []string          `json:"volumes"`
	StopGracePeriod string            `json:"stop_grace_period"`
	Healthcheck     *struct {
		Test []string `json:"test"`
	} `json:"healthcheck"`
}

// dockerfile is the tree key of the service's Dockerfile ("" without build).
func (s composeService) dockerfile() string {
	if s.Build == nil {
		return ""
	}
	df := s.Build.Dockerfile
	if df == "" {
		df = "Dockerfile"
	}
	// Paths in compose.yaml are relative to deploy/; the dockerfile is
	// relative to the context.
	p, ok := strings.CutPrefix(path.Join("deploy", s.Build.Context, df), "deploy/")
	if !ok {
		return "../" + path.Join("deploy", s.Build.Context, df)
	}
	return p
}

// aguardServices are the compose services built from deploy/Dockerfile.
func (b *bundle) aguardServices() ([]string, []string) {
	if b.compose == nil {
		if _, ok := b.tree["compose.yaml"]; !ok {
			return nil, []string{"compose.yaml: missing"}
		}
		return nil, nil // a parse problem, reported already
	}
	var names []string
	for _, n := range slices.Sorted(maps.Keys(b.compose.Services)) {
		if b.compose.Services[n].dockerfile() == "Dockerfile" {
			names = append(names, n)
		}
	}
	if len(names) < 2 {
		return names, []string{fmt.Sprintf("compose.yaml: services: want two aguard replicas built from deploy/Dockerfile, found %v", names)}
	}
	return names, nil
}

// envFile reads a compose env file; the checked-in example stands for it.
func (b *bundle) envFile(name string) (map[string]string, []string, error) {
	data, ok := b.tree[name+".example"]
	if !ok {
		return nil, nil, fmt.Errorf("env_file %s: no %s.example next to compose.yaml to check (and to copy it from)", name, name)
	}
	env := map[string]string{}
	var order []string
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
		order = append(order, k)
	}
	return env, order, nil
}

func checkComposeSettingNames(b *bundle) []string {
	names, ps := b.aguardServices()
	for _, n := range names {
		s := b.compose.Services[n]
		where := "compose.yaml: services." + n
		if s.dockerfile() == "Dockerfile" && s.Build.Args["REVISION"] == "" {
			ps = append(ps, where+".build.args: no REVISION; the Dockerfile refuses to build without one")
		}
		if len(s.Command) == 0 || s.Command[0] != "serve" {
			ps = append(ps, fmt.Sprintf(`%s.command: want "serve" first, got %q`, where, s.Command))
		} else {
			ps = append(ps, flagProblems(where+".command", s.Command[1:])...)
		}
		ps = append(ps, envProblems(where+".environment", slices.Sorted(maps.Keys(s.Environment)))...)
		for _, f := range s.EnvFile {
			_, order, err := b.envFile(f)
			if err != nil {
				ps = append(ps, fmt.Sprintf("%s.%v", where, err))
				continue
			}
			ps = append(ps, envProblems(f+".example", order)...)
		}
	}
	return ps
}

// composeConfig resolves a compose aguard service's settings.
func (b *bundle) composeConfig(name string) (*config.Config, error) {
	s := b.compose.Services[name]
	if len(s.Command) == 0 || s.Command[0] != "serve" {
		return nil, errors.New(`command does not start with "serve"`)
	}
	l := launch{args: s.Command[1:], env: b.imageEnv(), files: map[string][]byte{}}
	for _, f := range s.EnvFile {
		env, _, err := b.envFile(f)
		if err != nil {
			return nil, err
		}
		maps.Copy(l.env, env)
	}
	maps.Copy(l.env, s.Environment) // environment beats env_file
	// Bind mounts of files from deploy/ (for a --config file).
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 {
			for key, data := range b.tree {
				if rel, ok := strings.CutPrefix(key, strings.TrimPrefix(path.Clean(parts[0]), "./")); ok && (rel == "" || rel[0] == '/') {
					l.files[path.Clean(parts[1]+rel)] = data
				}
			}
		}
	}
	return l.loadConfig()
}

// mountedAt is the host path (relative to deploy/) mounted at dir, if any.
func (s composeService) mountedAt(dir string) (string, bool) {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && path.Clean(parts[1]) == path.Clean(dir) {
			return parts[0], true
		}
	}
	return "", false
}

func checkComposeServices(b *bundle) []string {
	names, ps := b.aguardServices()
	for _, n := range names {
		s := b.compose.Services[n]
		where := "compose.yaml: services." + n
		if s.dockerfile() == "Dockerfile" && s.Build.Args["REVISION"] == "" {
			ps = append(ps, where+".build.args: no REVISION; the Dockerfile refuses to build without one")
		}
		cfg, err := b.composeConfig(n)
		if err != nil {
			ps = append(ps, fmt.Sprintf("%s: aguard serve does not start with this command and environment: %v", where, err))
			continue
		}
		for _, u := range []struct{ setting, raw string }{{"upstream", cfg.Upstream}, {"redis", cfg.Redis}} {
			if u.raw == "" {
				continue
			}
			pu, err := url.Parse(u.raw)
			if err != nil {
				ps = append(ps, fmt.Sprintf("%s: %s %q: %v", where, u.setting, u.raw, err))
			} else if _, ok := b.compose.Services[pu.Hostname()]; !ok {
				ps = append(ps, fmt.Sprintf("%s: %s %s: host %q is not a service of compose.yaml", where, u.setting, u.raw, pu.Hostname()))
			}
		}
		if cfg.Policy != "" {
			if host, ok := s.mountedAt(cfg.Policy); !ok {
				ps = append(ps, fmt.Sprintf("%s.volumes: nothing is mounted at --policy %s", where, cfg.Policy))
			} else if st, err := os.Stat(filepath.FromSlash(host)); err != nil || !st.IsDir() {
				ps = append(ps, fmt.Sprintf("%s.volumes: %s, mounted at --policy %s, is not a folder", where, host, cfg.Policy))
			}
		}
		grace := 10 * time.Second // compose's default
		if s.StopGracePeriod != "" {
			if grace, err = time.ParseDuration(s.StopGracePeriod); err != nil {
				ps = append(ps, fmt.Sprintf("%s.stop_grace_period: %v", where, err))
			}
		}
		if grace <= cfg.DrainTimeout {
			ps = append(ps, fmt.Sprintf("%s.stop_grace_period: %v does not exceed drain-timeout %v; SIGKILL would cut the drain short", where, grace, cfg.DrainTimeout))
		}
		ps = append(ps, b.composeHealthcheck(where, s, cfg)...)
	}
	// Every service's healthcheck program must be in its image.
	for _, n := range slices.Sorted(maps.Keys(b.compose.Services)) {
		s := b.compose.Services[n]
		df := s.dockerfile()
		if df == "" {
			continue
		}
		stages, ok := b.dockerfiles[df]
		if !ok {
			ps = append(ps, fmt.Sprintf("compose.yaml: services.%s.build: no Dockerfile at deploy/%s", n, df))
			continue
		}
		if s.Healthcheck != nil && len(s.Healthcheck.Test) >= 2 && s.Healthcheck.Test[0] == "CMD" && len(stages) > 0 {
			if !slices.Contains(slices.Collect(maps.Values(stages[len(stages)-1].copies())), s.Healthcheck.Test[1]) {
				ps = append(ps, fmt.Sprintf("compose.yaml: services.%s.healthcheck.test: %s is not in the image (no COPY puts it there in %s)", n, s.Healthcheck.Test[1], df))
			}
		}
	}
	return ps
}

// composeHealthcheck: the healthcheck GETs a liveness path on the admin
// listener, through loopback.
func (b *bundle) composeHealthcheck(where string, s composeService, cfg *config.Config) []string {
	field := where + ".healthcheck.test"
	if s.Healthcheck == nil || len(s.Healthcheck.Test) < 2 || s.Healthcheck.Test[0] != "CMD" {
		return []string{field + `: want ["CMD", "/healthcheck", "http://127.0.0.1:<admin port>/healthz"]`}
	}
	var u *url.URL
	for _, a := range s.Healthcheck.Test[1:] {
		if strings.HasPrefix(a, "http://") {
			u, _ = url.Parse(a)
		}
	}
	if u == nil {
		return []string{field + ": no http:// URL to probe"}
	}
	var ps []string
	if msg := livenessProblem(u.Path); msg != "" {
		ps = append(ps, field+": "+msg)
	}
	adminPort, _, err := listenPort(cfg.AdminListen)
	if err != nil {
		return append(ps, fmt.Sprintf("%s: admin-listen %q: %v", where, cfg.AdminListen, err))
	}
	if u.Port() != strconv.Itoa(adminPort) {
		ps = append(ps, fmt.Sprintf("%s: %s probes port %s, but the admin listener is on %d (admin-listen %s)", field, u, u.Port(), adminPort, cfg.AdminListen))
	}
	if ip := net.ParseIP(u.Hostname()); u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
		ps = append(ps, fmt.Sprintf("%s: %s: probe the container itself through loopback", field, u))
	}
	return ps
}

var nginxServer = regexp.MustCompile(`(?m)^\s*server\s+([^\s:;{]+):(\d+)`)

func checkNginx(b *bundle) []string {
	data, ok := b.tree["nginx.conf"]
	if !ok {
		return nil // no load balancer; the replicas are reached directly
	}
	names, ps := b.aguardServices()
	if b.compose == nil {
		return ps
	}
	seen := map[string]bool{}
	for _, m := range nginxServer.FindAllStringSubmatch(string(data), -1) {
		host, port := m[1], m[2]
		seen[host] = true
		if !slices.Contains(names, host) {
			ps = append(ps, fmt.Sprintf("nginx.conf: server %s:%s: %s is not an aguard service of compose.yaml (%v)", host, port, host, names))
			continue
		}
		cfg, err := b.composeConfig(host)
		if err != nil {
			continue // reported by the compose checks
		}
		if want, _, _ := listenPort(cfg.Listen); port != strconv.Itoa(want) {
			ps = append(ps, fmt.Sprintf("nginx.conf: server %s:%s: the data plane of %s listens on port %d (listen %s)", host, port, host, want, cfg.Listen))
		}
	}
	for _, n := range names {
		if !seen[n] {
			ps = append(ps, fmt.Sprintf("nginx.conf: upstream: aguard service %s is not balanced to", n))
		}
	}
	return ps
}

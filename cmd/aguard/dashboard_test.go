package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/aguard/aguard/internal/await"
)

// dashboardFile is the Grafana dashboard shipped in deploy/.
const dashboardFile = "../../deploy/grafana/aguard-dashboard.json"

var metricName = regexp.MustCompile(`\baguard_[a-z0-9_]+`)

// exportedFamilies reads the metric families /metrics lists, with their
// types, from its "# TYPE" lines.
func exportedFamilies(body string) map[string]string {
	fams := map[string]string{}
	for line := range strings.SplitSeq(body, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			fams[f[2]] = f[3]
		}
	}
	return fams
}

// dashboardProblems lists every query of the dashboard (panel targets and
// template variables) that names no aguard metric, or one that fams does
// not hold (a histogram's series by its _bucket, _count and _sum).
func dashboardProblems(dash []byte, fams map[string]string) []string {
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name  string
				Query any
			}
		}
	}
	if err := json.Unmarshal(dash, &d); err != nil {
		return []string{"the dashboard is not JSON: " + err.Error()}
	}
	var problems []string
	check := func(where, expr string) {
		names := metricName.FindAllString(expr, -1)
		if len(names) == 0 {
			problems = append(problems, where+": names no aguard metric: "+expr)
		}
		for _, n := range names {
			base := n
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if b, ok := strings.CutSuffix(n, suffix); ok && fams[b] == "histogram" {
					base = b
				}
			}
			if _, ok := fams[base]; !ok {
				problems = append(problems, where+": aguard does not export "+n)
			}
		}
	}
	if len(d.Panels) == 0 {
		problems = append(problems, "the dashboard has no panels")
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			problems = append(problems, "panel "+p.Title+" has no query")
		}
		for _, tg := range p.Targets {
			check("panel "+p.Title, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			s, _ := q["query"].(string)
			check("variable "+v.Name, s)
		}
	}
	return problems
}

// TestDashboardQueriesNameExportedMetrics runs the real binary through a
// run (so that metrics labelled as streams end exist) and checks that
// every query of the Grafana dashboard names metrics its /metrics
// exports; then that the check notices a misspelt metric and a query
// without one.
func TestDashboardQueriesNameExportedMetrics(t *testing.T) {
	bin := buildAguard(t)
	agent := newScriptedAgent(t)
	dir := writeTree(t, map[string]string{"policy.rego": tracedPolicy})
	a := startJSONAguard(t, bin, "--upstream", agent.URL, "--policy", dir)
	consumerRun(t, a.listen, "held-d", "", "", false)
	// The consumer may read the run's last event before the proxy counts
	// the stream's end: wait for the count.
	var fams map[string]string
	await.For(t, "aguard_streams_ended_total on /metrics", func() bool {
		_, body := get(t, "http://"+a.admin+"/metrics")
		fams = exportedFamilies(body)
		_, ok := fams["aguard_streams_ended_total"]
		return ok
	})
	dash, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range dashboardProblems(dash, fams) {
		t.Error(p)
	}

	for _, broken := range []string{
		strings.Replace(string(dash), "aguard_policy_decisions_total", "aguard_policy_decision_total", 1),
		strings.Replace(string(dash), "aguard_approval_wait_seconds_bucket", "aguard_approval_wait_seconds_buckets", 1),
		strings.Replace(string(dash), `max(aguard_approvals_pending{job=~\"$job\"})`, "vector(1)", 1),
	} {
		if broken == string(dash) {
			t.Fatal("a breakage did not apply: the dashboard changed; update the test")
		}
		if len(dashboardProblems([]byte(broken), fams)) == 0 {
			t.Error("the check did not notice a broken query")
		}
	}
}

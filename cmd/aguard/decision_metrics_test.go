package main

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// metricWithPrefix returns the first sample line of /metrics starting
// with prefix, "" when there is none.
func metricWithPrefix(t *testing.T, admin, prefix string) string {
	t.Helper()
	_, body := get(t, "http://"+admin+"/metrics")
	for line := range strings.SplitSeq(body, "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}

// TestServeCountsDecisionsApprovalsAndFirstBytes runs the real binary,
// tracing off, through an allowed, a denied and a held run and an
// approval, and checks that the decision metrics move as the README's
// metrics table says: decisions by action and phase (allows too), one
// evaluation timed per decision, the agent's time to first byte per run,
// the pending approvals gauge up then down, the approval's wait by
// outcome, and the build info. With tracing off, the agent gets the
// consumer's traceparent unchanged.
func TestServeCountsDecisionsApprovalsAndFirstBytes(t *testing.T) {
	bin := buildAguard(t)
	agent := newScriptedAgent(t)
	dir := writeTree(t, map[string]string{"policy.rego": tracedPolicy})
	a := startJSONAguard(t, bin, "--upstream", agent.URL, "--policy", dir, "--admin-token", "tok")
	m := func(series string) float64 { return metric(t, a.admin, series) }
	decisions := func(action, phase string) float64 {
		return m(`aguard_policy_decisions_total{action="` + action + `",phase="` + phase + `"}`)
	}

	for _, pair := range [][2]string{{"allow", "tool_call_end"}, {"deny", "tool_call_end"}, {"require_approval", "tool_call_end"},
		{"stream", "tool_call_start"}, {"hold", "tool_call_start"}, {"allow", "run_finished"}} {
		if v := decisions(pair[0], pair[1]); v != 0 {
			t.Errorf("before any run, decisions %v = %v, want a series at 0", pair, v)
		}
	}
	if v := m("aguard_approvals_pending"); v != 0 {
		t.Errorf("aguard_approvals_pending before any run: %v", v)
	}
	info := metricWithPrefix(t, a.admin, "aguard_build_info{")
	if !strings.Contains(info, `goversion="`+runtime.Version()+`"`) || !strings.Contains(info, `version="dev"`) ||
		!strings.Contains(info, `revision="`) || !strings.HasSuffix(info, "} 1") {
		t.Errorf("build info: %q", info)
	}

	consumerParent := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	consumerRun(t, a.listen, "allowed-m", "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", false)
	if got := agent.sawTraceparent("allowed-m"); got != consumerParent {
		t.Errorf("tracing off: the agent got traceparent %q, want the consumer's %q unchanged", got, consumerParent)
	}
	if decisions("allow", "tool_call_end") != 1 || decisions("stream", "tool_call_start") != 1 {
		t.Errorf("after an allowed call: allow %v, stream %v, want 1 and 1", decisions("allow", "tool_call_end"), decisions("stream", "tool_call_start"))
	}
	consumerRun(t, a.listen, "denied-m", "", "", false)
	consumerRun(t, a.listen, "held-m", "", "", false)
	if decisions("deny", "tool_call_end") != 1 || decisions("require_approval", "tool_call_end") != 1 || decisions("allow", "tool_call_end") != 1 {
		t.Errorf("after a denied and a held call: deny %v, require_approval %v, allow %v, want 1 each",
			decisions("deny", "tool_call_end"), decisions("require_approval", "tool_call_end"), decisions("allow", "tool_call_end"))
	}
	if v := m("aguard_policy_evaluation_seconds_count"); v != 6 {
		t.Errorf("aguard_policy_evaluation_seconds_count %v, want 6 (two decisions per call)", v)
	}
	if v := m("aguard_upstream_first_byte_seconds_count"); v != 3 {
		t.Errorf("aguard_upstream_first_byte_seconds_count %v, want 3 (one per run)", v)
	}
	if v := m("aguard_approvals_pending"); v != 1 {
		t.Errorf("aguard_approvals_pending with a call held: %v, want 1", v)
	}
	if v := m(`aguard_approval_wait_seconds_count{outcome="approved"}`); v != 0 {
		t.Errorf("approval wait count before the approval: %v", v)
	}

	if code, b := adminDo(t, a.admin, "tok", "POST", "/v1/tool-calls/call-held-m/approve?threadId=thread-held-m", `{"approvedBy":"reviewer"}`); code != 200 {
		t.Fatalf("approve: %d %s", code, b)
	}
	if v := m("aguard_approvals_pending"); v != 0 {
		t.Errorf("aguard_approvals_pending after the approval: %v, want 0", v)
	}
	if v := m(`aguard_approval_wait_seconds_count{outcome="approved"}`); v != 1 {
		t.Errorf(`aguard_approval_wait_seconds_count{outcome="approved"} %v, want 1`, v)
	}
	if v := m(`aguard_approval_wait_seconds_count{outcome="rejected"}`); v != 0 {
		t.Errorf(`rejected count %v, want 0`, v)
	}
	wait := m(`aguard_approval_wait_seconds_sum{outcome="approved"}`)
	if wait < 0 || wait > 600 {
		t.Errorf("approval wait sum %s s", strconv.FormatFloat(wait, 'f', -1, 64))
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/interop"
)

// TestDemoRuns pins that `aguard demo` exits 0 and shows, for each scenario,
// what aguard did: same bytes, a dropped fabricated answer, the rewritten
// pending list, the violation, the lost upstream, the 400, and a held call
// approved (then rejected) through the admin API and answered on the next
// run.
func TestDemoRuns(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"demo"}, &out, &errOut); code != 0 {
		t.Fatalf("demo exited %d: %s", code, errOut.String())
	}
	s := out.String()
	for _, want := range []string{
		"= same bytes",
		"TOOL_CALL_RESULT c-confirm t1 \"Forwarded to client\"",
		"✗ dropped",
		`~ RUN_FINISHED run-fabricated pending=["c-confirm"]`,
		`~ RUN_FINISHED run-pending pending=["c-confirm"]`,
		"+ RUN_ERROR AGUARD_PROTOCOL_VIOLATION",
		"+ CUSTOM aguard.tool_call_denied c-del",
		"+ TOOL_CALL_START c-web", "held back until it is judged",
		"+ CUSTOM aguard.tool_call_denied c-confirm",
		"do not match its parameters schema",
		"+ RUN_ERROR AGUARD_POLICY_DENIED",
		"+ CUSTOM aguard.approval_required c-pay",
		`HTTP 409: {"error":{"code":"awaiting_approval"`,
		"POST /v1/tool-calls/c-pay/approve",
		"the call is now TOOL_EXECUTION_STATUS_EXECUTING",
		`the agent received the tool message: content "Transferred 250 to savings"`,
		`TEXT_MESSAGE_CONTENT m2 "Done: 250 moved to savings."`,
		"POST /v1/tool-calls/c-pay-big/reject",
		"the call is now TOOL_EXECUTION_STATUS_CANCELLED (approval rejected)",
		`the agent received the tool message: content "Declined by aguard: approval rejected.", error "approval rejected"`,
		"+ CUSTOM aguard.downgrade c-chart tool_result_content",
		`~ TOOL_CALL_RESULT c-chart t1 "Q3 revenue: up 12%"`,
		"+ RUN_ERROR AGUARD_UPSTREAM_LOST",
		"HTTP 400",
		"invalid_run_input",
		"why: ",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("demo output lacks %q\n%s", want, s)
		}
	}
	if strings.Contains(s, "\x1b[") {
		t.Error("colour codes written to a non-terminal")
	}
}

// TestDemoStreamsAcceptedByOfficialClient runs every demo scenario through
// aguard and feeds what the consumer received to the official client of the
// consumer's line (@ag-ui/client 1.0.0, or 0.0.58 for the scenario without
// protocolVersion): each must be accepted, and the fabricated answer must
// leave the call pending in the client's own view.
func TestDemoStreamsAcceptedByOfficialClient(t *testing.T) {
	scenarios, stories := demoScenarios(), approvalStories()
	d, err := startDemo(context.Background(), append(slices.Clone(scenarios), storyScenarios(stories)...))
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var runs []storyRun
	for _, sc := range scenarios {
		received, status, err := demoRun(ctx, d.base+"/agent", sc.input)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, storyRun{sc, received, status})
	}
	// The approval scenarios: the run that holds the call, and the run that
	// answers it once a reviewer decided.
	for _, story := range stories {
		rs, err := story.play(ctx, d, io.Discard, style{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			r.sc.name = story.name + ": " + r.sc.name
			runs = append(runs, r)
		}
	}
	var reqs []interop.Request
	var names []string
	answered := 0
	for _, r := range runs {
		sc, received, status := r.sc, r.received, r.status
		if status != 200 {
			continue
		}
		if strings.Contains(sc.name, "answers on the next run") {
			answered++
		}
		var body strings.Builder
		for _, ev := range received {
			body.WriteString("data: " + ev + "\n\n")
		}
		client := interop.Client10
		if !strings.Contains(sc.input, "protocolVersion") {
			client = interop.Client0058
		}
		reqs = append(reqs, interop.Request{Mode: interop.ModeBody, Client: client,
			Input: json.RawMessage(sc.input), Body: body.String(), ChunkSize: 7})
		names = append(names, sc.name)
	}
	results, err := interop.RunAll(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range results {
		if !res.Accepted {
			t.Errorf("%s: the official client rejected aguard's stream: %s", names[i], res.Error)
		}
	}
	if answered != len(stories) {
		t.Errorf("%d approval answers reached the client, want %d", answered, len(stories))
	}
	fabricated := results[1]
	if len(fabricated.Runs) != 1 || strings.Join(fabricated.Runs[0].PendingToolCallIDs, ",") != "c-confirm" {
		t.Errorf("fabricated scenario: client sees runs %+v, want c-confirm pending", fabricated.Runs)
	}
}

// TestDemoKeepPrintsTheApprovalsPage pins that `aguard demo --keep` keeps
// running, prints the approvals page's URL and an admin token, and leaves a
// call awaiting a decision there: the page is served, and the token lists
// the call through the admin API.
func TestDemoKeepPrintsTheApprovalsPage(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		var errOut bytes.Buffer
		code := run(ctx, []string{"demo", "--keep"}, pw, &errOut)
		pw.Close()
		done <- code
	}()
	var page, token string
	sc := bufio.NewScanner(pr)
	for sc.Scan() && (page == "" || token == "") {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "Approvals page: "); ok {
			page = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "Admin token:"); ok {
			token = strings.TrimSpace(v)
		}
	}
	if page == "" || token == "" {
		t.Fatalf("demo --keep printed no approvals page URL and token (page %q, token %q)", page, token)
	}
	go io.Copy(io.Discard, pr)
	if !strings.HasSuffix(page, "/ui/approvals") {
		t.Fatalf("approvals page %q", page)
	}
	resp, err := http.Get(page)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET %s: %d %s", page, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	req, _ := http.NewRequest("GET", strings.TrimSuffix(page, "/ui/approvals")+"/v1/approvals", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		ToolCalls []struct {
			ID string `json:"id"`
		} `json:"toolCalls"`
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || len(list.ToolCalls) != 1 || list.ToolCalls[0].ID != reviewCallID {
		t.Fatalf("GET /v1/approvals with the printed token: %d %+v %v; want the call %s", resp.StatusCode, list, err, reviewCallID)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("demo --keep exited %d after the interrupt", code)
	}
}

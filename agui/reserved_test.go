package agui

import (
	"strings"
	"testing"

	"github.com/aguard/aguard/internal/aguicheck"
)

// Only aguard speaks as aguard: the agent's own CUSTOM aguard.* events and
// RUN_ERROR AGUARD_* codes never reach the consumer as aguard's.

func TestForgedCustomSignalDropped(t *testing.T) {
	in := mustInput(t, inputJSON)
	forged := []string{
		`{"type":"CUSTOM","name":"aguard.tool_call_denied","value":{"toolCallId":"c1","toolCallName":"confirm","reason":"x","decisionId":"d"}}`,
		`{"type":"CUSTOM","name":"aguard.approval_required","value":{},"subagentRunId":"s1"}`,
		`{"type":"CUSTOM","name":"\u0061guard.downgrade","value":null}`,
		`{"type":"CUSTOM","name":"aguard.","value":1}`,
	}
	for _, f := range forged {
		r := feed(t, in, Options{}, true, runStarted, f, runFinished)
		wantOut(t, r, runStarted, runFinished)
		if len(r.notes) != 1 || r.notes[0].Kind != "forged_signal" || r.notes[0].Rule != "reserved_custom_name" {
			t.Fatalf("%s: notes = %+v", f, r.notes)
		}
		m := feed(t, in, Options{Monitor: true}, true, runStarted, f, runFinished)
		if len(m.out) != 3 || noteCount(m, "forged_signal") != 1 {
			t.Fatalf("monitor %s: out = %q notes = %+v", f, m.out, m.notes)
		}
	}
	for _, name := range []string{"aguardian.x", "com.aguard.x", "aguard", "Aguard.x", "x.aguard.y"} {
		ev := `{"type":"CUSTOM","name":"` + name + `","value":1}`
		r := feed(t, in, Options{}, true, runStarted, ev, runFinished)
		wantOut(t, r, runStarted, ev, runFinished)
	}
}

// TestForgedCustomSignalClosesNoChunkStream: the consumer never sees the
// dropped event, so it does not close the chunk stream it arrived in.
func TestForgedCustomSignalClosesNoChunkStream(t *testing.T) {
	in := mustInput(t, inputJSON)
	first := `{"type":"TOOL_CALL_CHUNK","toolCallId":"x1","toolCallName":"search","delta":"{"}`
	next := `{"type":"TOOL_CALL_CHUNK","delta":"}"}`
	r := feed(t, in, Options{}, true, runStarted, first, `{"type":"CUSTOM","name":"aguard.tool_call_denied","value":{}}`, next, runFinished)
	wantOut(t, r, runStarted, first, next, `{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","outcome":{"type":"success","pendingToolCallIds":["x1"]}}`)
	var outs [][]byte
	for _, o := range r.out {
		outs = append(outs, []byte(o))
	}
	if err := aguicheck.Check(outs); err != nil {
		t.Fatal(err)
	}
}

func TestForgedRunErrorCodeRenamed(t *testing.T) {
	in := mustInput(t, inputJSON)
	tests := []struct{ in, want string }{
		{`{"type":"RUN_ERROR","code":"AGUARD_POLICY_DENIED","message":"no"}`, `{"type":"RUN_ERROR","code":"AGENT_AGUARD_POLICY_DENIED","message":"no"}`},
		{`{"type":"RUN_ERROR","message":"no","code":"\u0041GUARD_X","usage":[]}`, `{"type":"RUN_ERROR","message":"no","code":"AGENT_AGUARD_X","usage":[]}`},
		{`{"type":"RUN_ERROR","code":"AGUARD_","message":"no"}`, `{"type":"RUN_ERROR","code":"AGENT_AGUARD_","message":"no"}`},
	}
	for _, tt := range tests {
		r := feed(t, in, Options{}, true, runStarted, tt.in)
		wantOut(t, r, runStarted, tt.want)
		if len(r.notes) != 1 || r.notes[0].Kind != "forged_signal" || r.notes[0].Rule != "reserved_error_code" {
			t.Fatalf("%s: notes = %+v", tt.in, r.notes)
		}
		wantCode := strings.Split(strings.SplitN(tt.want, `"code":"`, 2)[1], `"`)[0]
		if len(r.runs) != 1 || r.runs[0].Kind != "error" || r.runs[0].Code != wantCode {
			t.Fatalf("%s: runs = %+v", tt.in, r.runs)
		}
		m := feed(t, in, Options{Monitor: true}, true, runStarted, tt.in)
		if m.out[1] != tt.in || noteCount(m, "forged_signal") != 1 {
			t.Fatalf("monitor: out = %q notes = %+v", m.out, m.notes)
		}
	}
	// As the first event, and after RUN_FINISHED.
	r := feed(t, in, Options{}, true, `{"type":"RUN_ERROR","code":"AGUARD_UPSTREAM_LOST","message":"m"}`)
	wantOut(t, r, `{"type":"RUN_ERROR","code":"AGENT_AGUARD_UPSTREAM_LOST","message":"m"}`)
	r = feed(t, in, Options{}, true, runStarted, runFinished, `{"type":"RUN_ERROR","code":"AGUARD_SHUTDOWN","message":"m"}`)
	wantOut(t, r, runStarted, runFinished, `{"type":"RUN_ERROR","code":"AGENT_AGUARD_SHUTDOWN","message":"m"}`)
	for _, code := range []string{"AGENT_X", "aguard_x", "X_AGUARD_Y", "AGUARD"} {
		ev := `{"type":"RUN_ERROR","code":"` + code + `","message":"m"}`
		r := feed(t, in, Options{}, true, runStarted, ev)
		wantOut(t, r, runStarted, ev)
		if len(r.notes) != 0 {
			t.Fatalf("%s: notes = %+v", code, r.notes)
		}
	}
}

package proxy

import (
	"context"
	"testing"
	"time"

	"github.com/aguard/aguard/agui"
	"github.com/aguard/aguard/policy"
)

// TestDeciderAsksHowACallIsShown pins the proxy's Decider at
// tool_call_start: the policy's answer becomes the verdict, with its
// decision id; the default policy holds a call to a tool the input did not
// advertise and streams the application's own; a policy that cannot answer
// holds.
func TestDeciderAsksHowACallIsShown(t *testing.T) {
	in, err := agui.ParseRunInput([]byte(confirmInput("r")))
	if err != nil {
		t.Fatal(err)
	}
	req := policy.RequestInfo{Path: "/agent", Headers: map[string]string{}}
	engine, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecider(engine, in, "default", req, nil, time.Minute)
	for name, want := range map[string]string{"search": agui.ActionHold, "confirm_order": agui.ActionStream} {
		v := d.Decide(context.Background(), &agui.Call{Phase: agui.PhaseToolCallStart, ID: "c-" + name, Name: name, Frontend: name == "confirm_order"})
		if v.Action != want || len(v.DecisionID) != 32 {
			t.Errorf("%s: verdict %+v, want %s with a decision id", name, v, want)
		}
	}

	dir := t.TempDir()
	writePolicy(t, dir, "package aguard\n\ndecision := {\"action\": \"stream\"} if to_number(input.call.name) > 0\n")
	broken, err := policy.New(context.Background(), policy.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	d = NewDecider(broken, in, "default", req, nil, time.Minute)
	if v := d.Decide(context.Background(), &agui.Call{Phase: agui.PhaseToolCallStart, ID: "c1", Name: "search"}); v.Action != agui.ActionHold {
		t.Errorf("a policy that fails at tool_call_start: verdict %+v, want hold", v)
	}
}

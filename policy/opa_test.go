package policy

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/syncbuf"
)

const bundlePath = "/bundles/aguard.tar.gz"

// newBundleEngine starts an engine on an OPA configuration and stops it at
// the end of the test.
func newBundleEngine(t *testing.T, config []byte, logs *syncbuf.Buffer) *Engine {
	t.Helper()
	opt := Options{OPAConfig: config, Timeout: testEvalTimeout}
	if logs != nil {
		opt.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	e, err := New(context.Background(), opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e
}

// signingConfig is the OPA configuration fragment that requires bundles to
// be signed by the key whose public half is pub.
func signingConfig(pub string) string {
	return fmt.Sprintf(`keys:
  release:
    algorithm: RS256
    key: |
%s
`, indentBy(pub, "      "))
}

func indentBy(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}

// withSigning adds the signing block to the aguard bundle of an opaConfig.
func withSigning(config []byte) []byte {
	return []byte(strings.Replace(string(config), "    resource: bundles/aguard.tar.gz\n",
		"    resource: bundles/aguard.tar.gz\n    signing:\n      keyid: release\n", 1))
}

func revisionOf(e *Engine) string { rev, _ := e.Status(); return rev }

func TestSignedBundlesAreServedSwappedAndABadSignatureKeepsTheLastGood(t *testing.T) {
	t.Parallel()
	svc := newOPAService(t)
	private, public := rsaKeyPair(t)
	otherPrivate, _ := rsaKeyPair(t)
	e := newBundleEngine(t, withSigning(opaConfig(svc, signingConfig(public))), nil)

	if ok, reason := e.Ready(); ok || !strings.Contains(reason, "bundle") {
		t.Fatalf("Ready before any bundle = %v, %q; want not ready, waiting for the bundle", ok, reason)
	}
	early := e.Decide(context.Background(), frontendCall())
	if early.Action != ActionDeny || early.Err == nil {
		t.Fatalf("decision before any bundle: %+v, want a fail-closed deny", early)
	}

	svc.setBundle(bundlePath, buildBundle(t, constPolicy(`{"action": "allow", "reason": "r1"}`), "r1", private))
	await.For(t, "the first bundle", func() bool { ok, reason := e.Ready(); return ok && reason == "" })
	d1 := e.Decide(context.Background(), frontendCall())
	if d1.Reason != "r1" || d1.Revision != "r1" || d1.Err != nil {
		t.Fatalf("decision on r1: %+v", d1)
	}
	await.For(t, "r1 in the status report", func() bool { s := svc.lastBundleStatus("aguard"); return s != nil && s["active_revision"] == "r1" })
	await.For(t, "a poll answered 304 Not Modified", func() bool { svc.mu.Lock(); defer svc.mu.Unlock(); return svc.notMod > 0 })

	// A new bundle replaces the old one; the next decision is the new one's.
	svc.setBundle(bundlePath, buildBundle(t, constPolicy(`{"action": "deny", "reason": "r2"}`), "r2", private))
	await.For(t, "r2", func() bool { return revisionOf(e) == "r2" })
	d2 := e.Decide(context.Background(), frontendCall())
	if d2.Action != ActionDeny || d2.Reason != "r2" || d2.Revision != "r2" {
		t.Fatalf("decision on r2: %+v", d2)
	}

	// Signed with another key, and not signed at all: refused, r2 serves.
	for _, bad := range []struct{ name, key string }{{"another key", otherPrivate}, {"no signature", ""}} {
		failures := e.LoadFailures()
		svc.setBundle(bundlePath, buildBundle(t, constPolicy(`{"action": "allow", "reason": "forged"}`), "forged", bad.key))
		await.For(t, "the bundle signed with "+bad.name+" to fail", func() bool { return e.LoadFailures() > failures })
		ok, reason := e.Ready()
		if !ok || !strings.Contains(reason, "bundle aguard") || !strings.Contains(reason, "r2") {
			t.Errorf("%s: Ready = %v, %q; want degraded, naming the bundle and r2 serving", bad.name, ok, reason)
		}
		if d := e.Decide(context.Background(), frontendCall()); d.Reason != "r2" {
			t.Errorf("%s: decision %+v, want r2's", bad.name, d)
		}
		await.For(t, "the failure in the status report", func() bool {
			s := svc.lastBundleStatus("aguard")
			return s != nil && s["code"] != nil && s["active_revision"] == "r2"
		})
	}

	svc.setBundle(bundlePath, buildBundle(t, constPolicy(`{"action": "allow", "reason": "r3"}`), "r3", private))
	await.For(t, "r3", func() bool { ok, reason := e.Ready(); return revisionOf(e) == "r3" && ok && reason == "" })

	// Every decision is in the decision log under aguard's decisionId, with
	// the revision that made it.
	await.For(t, "the decisions in the decision log", func() bool {
		l := svc.logged()
		return l[early.DecisionID] != nil && l[d1.DecisionID] != nil && l[d2.DecisionID] != nil
	})
	logged := svc.logged()
	for _, c := range []struct {
		d   Decision
		rev string
	}{{d1, "r1"}, {d2, "r2"}} {
		ev := logged[c.d.DecisionID]
		rev, _ := ev["bundles"].(map[string]any)["aguard"].(map[string]any)["revision"].(string)
		result, _ := ev["result"].(map[string]any)
		if rev != c.rev || ev["path"] != decisionPath || result["reason"] != c.rev ||
			ev["labels"].(map[string]any)["team"] != "tools" || ev["requested_by"] != "127.0.0.1:4000" {
			t.Errorf("decision log event for %s: %v", c.rev, ev)
		}
	}
	if errObj, _ := logged[early.DecisionID]["error"].(map[string]any); errObj["code"] != "fail_closed" {
		t.Errorf("the fail-closed decision was logged as %v", logged[early.DecisionID])
	}
}

func TestABundleCallingHTTPSendIsRefusedByTheGate(t *testing.T) {
	t.Parallel()
	svc := newOPAService(t)
	url, hits := exfilTarget(t)
	// A first bundle that needs http.send: never active, never ready.
	svc.setBundle(bundlePath, buildBundle(t, sendingPolicy(url), "exfil-1", ""))
	e := newBundleEngine(t, opaConfig(svc, ""), nil)
	await.For(t, "the refusal", func() bool { _, err := e.Status(); return err != nil })
	if ok, reason := e.Ready(); ok || !strings.Contains(reason, "built-in function http.send is not allowed") {
		t.Errorf("Ready = %v, %q; want not ready, naming http.send", ok, reason)
	}
	await.For(t, "the refusal in OPA's status report", func() bool {
		s := svc.lastBundleStatus("aguard")
		return s != nil && strings.Contains(fmt.Sprint(s["message"], s["errors"]), "http.send")
	})

	svc.setBundle(bundlePath, buildBundle(t, constPolicy(`{"action": "allow", "reason": "good"}`), "good", ""))
	await.For(t, "the good bundle", func() bool { return revisionOf(e) == "good" })

	failures := e.LoadFailures()
	svc.setBundle(bundlePath, buildBundle(t, sendingPolicy(url), "exfil-2", ""))
	await.For(t, "the second refusal", func() bool { return e.LoadFailures() > failures })
	for range 3 {
		if d := e.Decide(context.Background(), frontendCall()); d.Reason != "good" || d.Revision != "good" {
			t.Errorf("decision %+v, want the last good bundle's", d)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the listener received %d requests", n)
	}
}

func TestDecisionLogIsMaskedAsOPAMasksIt(t *testing.T) {
	t.Parallel()
	svc := newOPAService(t)
	e := newBundleEngine(t, opaConfig(svc, ""), nil)
	files := constPolicy(`{"action": "allow", "reason": "ok"}`)
	files["system/log/mask.rego"] = `package system.log

mask contains "/input/call/arguments"

mask contains "/input/call/argumentsText"

mask contains {"op": "upsert", "path": "/input/request/headers/x-user", "value": "(masked)"}
`
	svc.setBundle(bundlePath, buildBundle(t, files, "m1", ""))
	await.For(t, "the bundle", func() bool { return revisionOf(e) == "m1" })
	d := e.Decide(context.Background(), frontendCall())
	await.For(t, "the decision in the log", func() bool { return svc.logged()[d.DecisionID] != nil })
	ev := svc.logged()[d.DecisionID]
	call := ev["input"].(map[string]any)["call"].(map[string]any)
	headers := ev["input"].(map[string]any)["request"].(map[string]any)["headers"].(map[string]any)
	if _, has := call["arguments"]; has {
		t.Errorf("masked arguments were logged: %v", call)
	}
	if _, has := call["argumentsText"]; has || call["name"] != "show_chart" {
		t.Errorf("call logged as %v, want the name without the argument text", call)
	}
	if headers["x-user"] != "(masked)" {
		t.Errorf("x-user logged as %v", headers["x-user"])
	}
	erased := fmt.Sprint(ev["erased"])
	if !strings.Contains(erased, "/input/call/arguments") || !strings.Contains(fmt.Sprint(ev["masked"]), "/input/request/headers/x-user") {
		t.Errorf("erased %v, masked %v", ev["erased"], ev["masked"])
	}
}

func TestDecisionsOutliveADecisionLogReceiverThatIsDown(t *testing.T) {
	t.Parallel()
	svc := newOPAService(t)
	receiver := newOPAService(t)
	var logs syncbuf.Buffer
	config := strings.Replace(string(opaConfig(svc, "")), "decision_logs:\n  service: mgmt", "decision_logs:\n  service: receiver", 1)
	config = strings.Replace(config, "services:\n", "services:\n  receiver:\n    url: "+receiver.url()+"\n", 1)
	e := newBundleEngine(t, []byte(config), &logs)
	svc.setBundle(bundlePath, buildBundle(t, constPolicy(`{"action": "allow"}`), "d1", ""))
	await.For(t, "the bundle", func() bool { return revisionOf(e) == "d1" })

	receiver.stop()
	var ids []string
	for range 5 {
		ids = append(ids, e.Decide(context.Background(), frontendCall()).DecisionID)
	}
	await.For(t, "an upload to fail", func() bool { return strings.Contains(logs.String(), "log upload failed") })
	ids = append(ids, e.Decide(context.Background(), frontendCall()).DecisionID)
	receiver.start()
	await.For(t, "every decision to arrive", func() bool {
		l := receiver.logged()
		for _, id := range ids {
			if l[id] == nil {
				return false
			}
		}
		return true
	})
}

// A bundle's policy and data are activated together: a decision made while
// bundles are swapped sees one bundle whole, and names it.
func TestDecisionsDuringSwapsSeeOneBundleWhole(t *testing.T) {
	t.Parallel()
	svc := newOPAService(t)
	bundleOf := func(rev string) []byte {
		files := constPolicy(`{"action": "allow", "reason": sprintf("%s|%s", [data.cfg.rev, "` + rev + `"])}`)
		files["cfg/data.json"] = `{"rev": "` + rev + `"}`
		return buildBundle(t, files, rev, "")
	}
	svc.setBundle(bundlePath, bundleOf("s0"))
	e := newBundleEngine(t, opaConfig(svc, ""), nil)
	await.For(t, "s0", func() bool { return revisionOf(e) == "s0" })

	stop := make(chan struct{})
	errs := make(chan string, 4)
	var seen sync.Map
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				d := e.Decide(context.Background(), frontendCall())
				seen.Store(d.Revision, true)
				if d.Reason != d.Revision+"|"+d.Revision {
					select {
					case errs <- fmt.Sprintf("decision %+v mixes bundles", d):
					default:
					}
					return
				}
			}
		}()
	}
	for _, rev := range []string{"s1", "s2"} {
		svc.setBundle(bundlePath, bundleOf(rev))
		await.For(t, rev, func() bool { _, ok := seen.Load(rev); return ok })
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// OPA's size buffer for decision logs is unlimited by default; aguard bounds
// it unless the configuration does.
func TestDecisionLogBufferIsBounded(t *testing.T) {
	t.Parallel()
	svc := newOPAService(t)
	for _, c := range []struct {
		name, reporting string
		want            int64
	}{
		{"default", "", defaultDecisionLogBuffer},
		{"configured", "    buffer_size_limit_bytes: 1024\n", 1024},
	} {
		config := strings.Replace(string(opaConfig(svc, "")), "  reporting:\n", "  reporting:\n"+c.reporting, 1)
		e := newBundleEngine(t, []byte(config), nil)
		if got := *e.opa.logs.Config().Reporting.BufferSizeLimitBytes; got != c.want {
			t.Errorf("%s: buffer_size_limit_bytes = %d, want %d", c.name, got, c.want)
		}
	}
}

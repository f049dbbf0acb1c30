package webhook

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/interop"
	"github.com/aguard/aguard/state"
)

// TestSignMatchesTheSpecificationsExample checks Sign against the example
// of the Standard Webhooks specification and its reference libraries: that
// secret, message id, timestamp and payload sign to that signature.
func TestSignMatchesTheSpecificationsExample(t *testing.T) {
	key, err := ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := Sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("Sign = %q, want %q", got, want)
	}
}

// TestDeliveriesVerifyWithTheOfficialLibrary sends events through a
// Notifier to a receiver on loopback, the first attempt of each refused so
// that it is retried, and has the official Standard Webhooks library for
// JavaScript (npm standardwebhooks, run by node) verify every attempt: with
// a whsec_ secret and with a plain one, used as the raw key. Every attempt
// of an event carries the same webhook-id; an altered body is refused.
func TestDeliveriesVerifyWithTheOfficialLibrary(t *testing.T) {
	for _, tt := range []struct {
		name, secret string
		raw          bool
	}{
		{"whsec_ secret", testSecret, false},
		{"plain secret", "a plain shared secret, used as the key", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rc := newReceiver(t, func(n int, _ *http.Request) int {
				if n%2 == 1 {
					return http.StatusServiceUnavailable // each event's first attempt
				}
				return http.StatusOK
			})
			opt := testOptions(nil)
			opt.URLs, opt.Secret, opt.Now = []string{rc.srv.URL}, tt.secret, time.Now
			n := startNotifier(t, opt)
			for _, notice := range []state.Notice{state.CallStarted, state.CallApproved, state.CallRejected} {
				n.Notify(notice, testCall("c-"+notice.String()))
			}
			got := rc.waitRequests(t, 6)
			if len(got) != 6 {
				t.Fatalf("%d requests, want 6", len(got))
			}
			var ds []interop.Delivery
			for i, r := range got {
				if i%2 == 1 && r.delivery != got[i-1].delivery {
					t.Errorf("attempt 2 of event %d: webhook-id %q, attempt 1 had %q", i/2+1, r.delivery, got[i-1].delivery)
				}
				if err := Verify(tt.secret, r.header, r.body, time.Now(), time.Minute); err != nil {
					t.Errorf("Verify of request %d: %v", i+1, err)
				}
				ds = append(ds, interop.Delivery{Header: r.header, Body: r.body})
			}
			forged := interop.Delivery{Header: got[0].header, Body: []byte(strings.Replace(string(got[0].body), "c-", "d-", 1))}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			verdicts, err := interop.VerifyWebhooks(ctx, tt.secret, tt.raw, append(ds, forged))
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range verdicts[:len(ds)] {
				if v != "" {
					t.Errorf("the official library refused request %d: %s\nheaders %v\nbody %s", i+1, v, ds[i].Header, ds[i].Body)
				}
			}
			if verdicts[len(ds)] == "" {
				t.Error("the official library accepted an altered body")
			}
		})
	}
}

// TestVerify pins Verify, the receivers' check, case by case.
func TestVerify(t *testing.T) {
	key, _ := ParseSecret(testSecret)
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	body := []byte(`{"type":"llm.tool_call_started","tool_call":{"id":"c1"}}`)
	good := Sign(key, "msg_1", at, body)
	headers := func(id, ts, sig string) http.Header {
		h := http.Header{}
		for k, v := range map[string]string{HeaderID: id, HeaderTimestamp: ts, HeaderSignature: sig} {
			if v != "" {
				h.Set(k, v)
			}
		}
		return h
	}
	unix := strconv.FormatInt(at.Unix(), 10)
	for _, tt := range []struct {
		name, secret string
		h            http.Header
		body         []byte
		now          time.Time
		want         string // "" succeeds
	}{
		{"round trip", testSecret, headers("msg_1", unix, good), body, at, ""},
		{"within the tolerance", testSecret, headers("msg_1", unix, good), body, at.Add(5 * time.Minute), ""},
		{"one of several signatures (a rotation)", testSecret, headers("msg_1", unix, "v1,"+strings.Repeat("A", 44)+" "+good), body, at, ""},
		{"other versions ignored", testSecret, headers("msg_1", unix, "v1a,xyz "+good), body, at, ""},
		{"altered body", testSecret, headers("msg_1", unix, good), []byte(`{}`), at, "none of 1"},
		{"altered id", testSecret, headers("msg_2", unix, good), body, at, "none of 1"},
		{"altered timestamp", testSecret, headers("msg_1", strconv.FormatInt(at.Unix()+1, 10), good), body, at, "none of 1"},
		{"wrong secret", "whsec_" + "c2VjcmV0", headers("msg_1", unix, good), body, at, "none of 1"},
		{"stale", testSecret, headers("msg_1", unix, good), body, at.Add(6 * time.Minute), "beyond the tolerance"},
		{"from the future", testSecret, headers("msg_1", unix, good), body, at.Add(-6 * time.Minute), "beyond the tolerance"},
		{"no id", testSecret, headers("", unix, good), body, at, "no webhook-id"},
		{"no timestamp", testSecret, headers("msg_1", "", good), body, at, "no webhook-timestamp"},
		{"no signature", testSecret, headers("msg_1", unix, ""), body, at, "no webhook-signature"},
		{"no v1", testSecret, headers("msg_1", unix, "v2,abc"), body, at, "no v1 signature"},
		{"timestamp not a number", testSecret, headers("msg_1", "yesterday", good), body, at, "not Unix seconds"},
		{"a whsec_ secret that is not base64", "whsec_not*base64", headers("msg_1", unix, good), body, at, "base64"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := Verify(tt.secret, tt.h, tt.body, tt.now, 5*time.Minute)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Verify: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Verify = %v, want an error naming %q", err, tt.want)
			}
		})
	}
	if _, err := New(Options{URLs: []string{"http://127.0.0.1:1/"}, Secret: "whsec_%%%"}); err == nil {
		t.Error("New took a whsec_ secret that is not base64")
	}
}

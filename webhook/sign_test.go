package webhook

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestSignVerify(t *testing.T) {
	const secret = "whsec_test"
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	body := []byte(`{"type":"llm.tool_call_started","tool_call":{"id":"c1"}}`)
	good := Sign(secret, at, body)
	unix := strconv.FormatInt(at.Unix(), 10)
	v1 := strings.TrimPrefix(good, "t="+unix+",v1=")

	if want := "t=" + unix + ",v1="; !strings.HasPrefix(good, want) || len(v1) != 64 {
		t.Fatalf("Sign = %q, want %q followed by 64 hex digits", good, want)
	}

	tests := []struct {
		name      string
		secret    string
		header    string
		body      []byte
		now       time.Time
		tolerance time.Duration
		wantErr   string // substring; "" = success
	}{
		{"round trip", secret, good, body, at, time.Minute, ""},
		{"within tolerance after", secret, good, body, at.Add(5 * time.Minute), 5 * time.Minute, ""},
		{"within tolerance before", secret, good, body, at.Add(-5 * time.Minute), 5 * time.Minute, ""},
		{"spaces between elements", secret, "t=" + unix + ", v1=" + v1, body, at, time.Minute, ""},
		{"unknown scheme ignored", secret, "t=" + unix + ",v0=abc,v1=" + v1, body, at, time.Minute, ""},
		{"one of several v1 matches (rotation)", secret, "t=" + unix + ",v1=" + strings.Repeat("ab", 32) + ",v1=" + v1, body, at, time.Minute, ""},
		{"tampered body", secret, good, []byte(`{"type":"llm.tool_call_started","tool_call":{"id":"c2"}}`), at, time.Minute, "none of 1 v1 signatures matches"},
		{"wrong secret", "whsec_other", good, body, at, time.Minute, "none of 1 v1 signatures matches"},
		{"tampered timestamp", secret, "t=" + strconv.FormatInt(at.Unix()+1, 10) + ",v1=" + v1, body, at, time.Minute, "matches"},
		{"stale", secret, good, body, at.Add(6 * time.Minute), 5 * time.Minute, "beyond the tolerance of 5m0s"},
		{"from the future", secret, good, body, at.Add(-6 * time.Minute), 5 * time.Minute, "6m0s from now"},
		{"empty header", secret, "", body, at, time.Minute, "empty header"},
		{"no t", secret, "v1=" + v1, body, at, time.Minute, "no t in header"},
		{"no v1", secret, "t=" + unix, body, at, time.Minute, "no v1 in header"},
		{"t twice", secret, "t=" + unix + ",t=" + unix + ",v1=" + v1, body, at, time.Minute, "more than one t"},
		{"empty t", secret, "t=,v1=" + v1, body, at, time.Minute, "empty t"},
		{"t not a number", secret, "t=yesterday,v1=" + v1, body, at, time.Minute, `t "yesterday" is not unix seconds`},
		{"v1 not hex", secret, "t=" + unix + ",v1=zz", body, at, time.Minute, `v1 "zz" is not hex`},
		{"v1 too short", secret, "t=" + unix + ",v1=abcd", body, at, time.Minute, "v1 is 2 bytes, want 32"},
		{"element without =", secret, "t=" + unix + ",v1", body, at, time.Minute, "malformed element"},
		{"header too long", secret, good + strings.Repeat(",x=y", 2000), body, at, time.Minute, "longer than 4096"},
		{"empty secret", "", good, body, at, time.Minute, "empty secret"},
		{"negative tolerance", secret, good, body, at, -time.Second, "negative tolerance"},
		{"extreme timestamp", secret, "t=-9223372036854775808,v1=" + v1, body, at, time.Minute, "matches"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Verify(tc.secret, tc.header, tc.body, tc.now, tc.tolerance)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Verify: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("Verify succeeded, want an error containing %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("Verify: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestVerifyExtremeTimestampIsStale checks that a validly signed but
// absurd timestamp fails on staleness, not by overflowing the comparison.
func TestVerifyExtremeTimestampIsStale(t *testing.T) {
	body := []byte(`{}`)
	for _, at := range []time.Time{time.Unix(-1<<62, 0), time.Unix(1<<62, 0)} {
		err := Verify("k", Sign("k", at, body), body, time.Now(), time.Hour)
		if err == nil || !strings.Contains(err.Error(), "beyond the tolerance") {
			t.Errorf("Verify with t=%d: %v, want a tolerance error", at.Unix(), err)
		}
	}
}

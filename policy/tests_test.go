package policy

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestRunTests(t *testing.T) {
	passing := "package aguard\n\ndefault decision := {\"action\": \"allow\"}\n\ndecision := {\"action\": \"deny\", \"reason\": \"blocked\"} if input.call.name in data.blocked\n"
	tests := []struct {
		name       string
		dir        func(t *testing.T) string
		wantFailed int
		wantErr    []string // substrings of err; nil = no error
		wantLines  []string // regular expressions, each matching a line of the report
	}{
		{
			name:      "embedded set passes",
			dir:       func(*testing.T) string { return "" },
			wantLines: []string{`^PASS  data\.aguard_test\.test_deny_frontend_call_with_invalid_json \(`, `^PASS: \d+/\d+$`},
		},
		{
			name: "failing and erroring tests are counted and shown",
			dir: func(t *testing.T) string {
				return policyDir(t, map[string]string{
					"policy.rego": passing,
					"data.yaml":   "blocked: [rm]\n",
					"policy_test.rego": `package aguard_test

import data.aguard

test_blocked_tool_is_denied if {
	aguard.decision.action == "deny" with input as {"call": {"name": "rm"}}
}

test_wrong_expectation if {
	d := aguard.decision with input as {"call": {"name": "ls"}}
	print("decision was", d)
	d.action == "deny"
}

test_runtime_error if {
	to_number("not a number") == 1
}

todo_test_later if {
	false
}
`,
				})
			},
			wantFailed: 2,
			wantLines: []string{
				`^PASS  data\.aguard_test\.test_blocked_tool_is_denied \(`,
				`^FAIL  data\.aguard_test\.test_wrong_expectation \(.*policy_test\.rego:9$`,
				`^      failed at .*policy_test\.rego:12: d\.action == "deny"$`,
				`decision was \{"action": "allow"\}`,
				`^ERROR data\.aguard_test\.test_runtime_error \(.*policy_test\.rego:15$`,
				`to_number`,
				`^SKIP  data\.aguard_test\.todo_test_later`,
				`^PASS: 1/4  FAIL: 2/4  SKIP: 1/4$`,
			},
		},
		{
			name: "policy that does not parse",
			dir: func(t *testing.T) string {
				return policyDir(t, map[string]string{"policy.rego": passing, "policy_test.rego": "package aguard_test\n\ntest_x {\n  true\n}\n"})
			},
			wantErr: []string{"policy_test.rego:3", "rego_parse_error"},
		},
		{
			name: "test that does not compile",
			dir: func(t *testing.T) string {
				return policyDir(t, map[string]string{"policy.rego": passing, "policy_test.rego": "package aguard_test\n\ntest_x if {\n  y == 1\n}\n"})
			},
			wantErr: []string{"policy_test.rego:4", "unsafe"},
		},
		{
			name: "folder without tests",
			dir: func(t *testing.T) string {
				return policyDir(t, map[string]string{"policy.rego": passing})
			},
			wantErr: []string{"no test_ rules"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			failed, err := RunTests(context.Background(), TestOptions{Dir: tt.dir(t)}, &out)
			if tt.wantErr == nil && err != nil {
				t.Fatalf("RunTests: %v\n%s", err, out.String())
			}
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("RunTests succeeded, want an error\n%s", out.String())
				}
				for _, want := range tt.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not contain %q", err, want)
					}
				}
			}
			if failed != tt.wantFailed {
				t.Errorf("failed = %d, want %d\n%s", failed, tt.wantFailed, out.String())
			}
			for _, want := range tt.wantLines {
				if !regexp.MustCompile(`(?m)` + want).MatchString(out.String()) {
					t.Errorf("report has no line matching %q:\n%s", want, out.String())
				}
			}
		})
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestRunTestsReportsWriteError(t *testing.T) {
	if _, err := RunTests(context.Background(), TestOptions{}, failingWriter{}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("err = %v, want the write error", err)
	}
}

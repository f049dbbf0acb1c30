package aguard_test

import data.aguard

call(name) := {
	"phase": "tool_call_end",
	"call": {
		"id": "c1", "name": name, "arguments": {"to": "ann@example.com"}, "argumentsText": "{\"to\":\"ann@example.com\"}",
		"argumentsError": null, "parentMessageId": "", "subagentRunId": "", "reopened": false,
	},
	"tool": {"advertised": true, "frontend": true, "description": "", "parameters": {"type": "object"}},
	"schema": {"checked": true, "valid": true, "errors": []},
	"run": {"threadId": "t", "runId": "r", "protocolVersion": "1.0", "advertisedTools": [name], "route": ""},
	"request": {"path": "/", "headers": {}, "remoteAddr": ""},
}

test_listed_tool_requires_approval if {
	d := aguard.decision with input as call("send_email")
	d.action == "require_approval"
	d.approvalTimeout == "15m"
	contains(d.reason, "\"send_email\" needs a reviewer's approval")
}

test_unlisted_tool_is_allowed if {
	d := aguard.decision with input as call("show_chart")
	d.action == "allow"
	not d.approvalTimeout
}

test_timeout_comes_from_data if {
	d := aguard.decision with input as call("deploy") with data.approval_timeout as "1h"
	d.approvalTimeout == "1h"
}

test_no_timeout_in_data_means_default if {
	d := aguard.decision with input as call("deploy") with data.approval_timeout as null
	d.action == "require_approval"
	d.approvalTimeout == ""
}

test_deny_wins_over_approval if {
	inp := json.patch(call("transfer_funds"), [{"op": "replace", "path": "/schema", "value": {
		"checked": true, "valid": false, "errors": ["at '/amount': got string, want number"],
	}}])
	d := aguard.decision with input as inp
	d.action == "deny"
}

test_baseline_unadvertised_at_run_finished_is_denied if {
	inp := json.patch(call("send_email"), [
		{"op": "replace", "path": "/phase", "value": "run_finished"},
		{"op": "replace", "path": "/tool/advertised", "value": false},
	])
	aguard.decision.action == "deny" with input as inp
}

test_unadvertised_call_held_at_tool_call_start if {
	inp := {
		"phase": "tool_call_start",
		"call": {"id": "c1", "name": "agent_tool", "parentMessageId": "", "subagentRunId": ""},
		"tool": {"advertised": false, "frontend": false, "description": "", "parameters": null},
		"run": {"threadId": "t", "runId": "r", "protocolVersion": "1.0", "advertisedTools": [], "route": ""},
		"request": {"path": "/", "headers": {}, "remoteAddr": ""},
	}
	aguard.decision.action == "hold" with input as inp
}

# Unit tests of the default policy: one test per branch of default.rego.
# Run them with `aguard policy test` or through policy.RunTests.
package aguard_test

import data.aguard

# A valid, advertised frontend call at TOOL_CALL_END; tests patch what they need.
base := {
	"phase": "tool_call_end",
	"call": {
		"id": "call-1", "name": "show_chart",
		"arguments": {"kind": "bar"}, "argumentsText": "{\"kind\":\"bar\"}", "argumentsError": null,
		"parentMessageId": "msg-1", "subagentRunId": "", "reopened": false,
	},
	"tool": {"advertised": true, "frontend": true, "description": "Render a chart", "parameters": {"type": "object"}},
	"schema": {"checked": true, "valid": true, "errors": []},
	"run": {"threadId": "t-1", "runId": "r-1", "protocolVersion": "1.0", "advertisedTools": ["show_chart"], "route": ""},
	"request": {"path": "/agent", "headers": {}, "remoteAddr": "127.0.0.1:5000"},
}

patched(patches) := json.patch(base, patches)

test_allow_valid_frontend_call if {
	aguard.decision.action == "allow" with input as base
}

test_allow_frontend_call_without_schema if {
	inp := patched([
		{"op": "replace", "path": "/schema", "value": {"checked": false, "valid": false, "errors": []}},
		{"op": "replace", "path": "/tool/parameters", "value": null},
	])
	aguard.decision.action == "allow" with input as inp
}

test_deny_frontend_call_with_invalid_json if {
	inp := patched([
		{"op": "replace", "path": "/call/arguments", "value": null},
		{"op": "replace", "path": "/call/argumentsText", "value": "{\"kind\":"},
		{"op": "replace", "path": "/call/argumentsError", "value": "unexpected end of JSON input"},
		{"op": "replace", "path": "/schema", "value": {"checked": false, "valid": false, "errors": []}},
	])
	d := aguard.decision with input as inp
	d.action == "deny"
	contains(d.reason, "are not valid JSON: unexpected end of JSON input")
}

test_deny_frontend_call_failing_schema if {
	inp := patched([{"op": "replace", "path": "/schema", "value": {
		"checked": true, "valid": false,
		"errors": ["at '/kind': value must be one of 'bar', 'line'"],
	}}])
	d := aguard.decision with input as inp
	d.action == "deny"
	contains(d.reason, "do not match its parameters schema")
	contains(d.reason, "at '/kind': value must be one of 'bar', 'line'")
}

test_allow_agent_side_call_with_invalid_json if {
	inp := patched([
		{"op": "replace", "path": "/tool/frontend", "value": false},
		{"op": "replace", "path": "/call/arguments", "value": null},
		{"op": "replace", "path": "/call/argumentsError", "value": "invalid character 'x'"},
		{"op": "replace", "path": "/schema/valid", "value": false},
	])
	aguard.decision.action == "allow" with input as inp
}

test_allow_unadvertised_call_at_tool_call_end if {
	inp := patched([
		{"op": "replace", "path": "/call/name", "value": "search_web"},
		{"op": "replace", "path": "/tool", "value": {"advertised": false, "frontend": false, "description": "", "parameters": null}},
		{"op": "replace", "path": "/schema", "value": {"checked": false, "valid": false, "errors": []}},
	])
	aguard.decision.action == "allow" with input as inp
}

test_deny_unadvertised_call_at_run_finished if {
	inp := patched([
		{"op": "replace", "path": "/phase", "value": "run_finished"},
		{"op": "replace", "path": "/call/name", "value": "search_web"},
		{"op": "replace", "path": "/tool", "value": {"advertised": false, "frontend": false, "description": "", "parameters": null}},
		{"op": "replace", "path": "/schema", "value": {"checked": false, "valid": false, "errors": []}},
	])
	d := aguard.decision with input as inp
	d.action == "deny"
	contains(d.reason, "\"search_web\" was not advertised")
}

test_allow_advertised_call_at_run_finished if {
	inp := patched([{"op": "replace", "path": "/phase", "value": "run_finished"}])
	aguard.decision.action == "allow" with input as inp
}

test_deny_lists_every_reason if {
	inp := patched([
		{"op": "replace", "path": "/phase", "value": "run_finished"},
		{"op": "replace", "path": "/tool/advertised", "value": false},
		{"op": "replace", "path": "/call/argumentsError", "value": "bad"},
		{"op": "replace", "path": "/schema", "value": {"checked": true, "valid": false, "errors": ["at '': got string, want object"]}},
	])
	d := aguard.decision with input as inp
	d.action == "deny"
	count(split(d.reason, "; ")) == 3
}

test_decision_is_always_a_complete_object if {
	d := aguard.decision with input as {}
	d.action == "allow"
	is_string(d.reason)
}

# tool_call_start: the input has no arguments and no schema.
start(name, advertised) := {
	"phase": "tool_call_start",
	"call": {"id": "call-1", "name": name, "parentMessageId": "msg-1", "subagentRunId": ""},
	"tool": {"advertised": advertised, "frontend": advertised, "description": "", "parameters": null},
	"run": {"threadId": "t-1", "runId": "r-1", "protocolVersion": "1.0", "advertisedTools": ["show_chart"], "route": ""},
	"request": {"path": "/agent", "headers": {}, "remoteAddr": "127.0.0.1:5000"},
}

test_hold_unadvertised_call_at_tool_call_start if {
	d := aguard.decision with input as start("search_web", false)
	d.action == "hold"
	contains(d.reason, "\"search_web\" was not advertised")
}

test_stream_advertised_call_at_tool_call_start if {
	aguard.decision.action == "stream" with input as start("show_chart", true)
}

test_no_deny_at_tool_call_start if {
	# Rules about arguments cannot fire before the arguments exist, even on
	# an input that carries the members they read.
	inp := object.union(start("show_chart", true), {
		"call": {"id": "call-1", "name": "show_chart", "argumentsError": "bad"},
		"schema": {"checked": true, "valid": false, "errors": ["x"]},
	})
	aguard.decision.action == "stream" with input as inp
}

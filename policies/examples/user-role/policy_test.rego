package aguard_test

import data.aguard

call(name, headers) := {
	"phase": "tool_call_end",
	"call": {
		"id": "c1", "name": name, "arguments": {"id": 7}, "argumentsText": "{\"id\":7}",
		"argumentsError": null, "parentMessageId": "", "subagentRunId": "", "reopened": false,
	},
	"tool": {"advertised": true, "frontend": false, "description": "", "parameters": null},
	"schema": {"checked": false, "valid": false, "errors": []},
	"run": {"threadId": "t", "runId": "r", "protocolVersion": "1.0", "advertisedTools": [], "route": ""},
	"request": {"path": "/", "headers": headers, "remoteAddr": ""},
}

test_admin_may_delete if {
	aguard.decision.action == "allow" with input as call("delete_user", {"x-user-role": "admin"})
}

test_admin_among_several_roles_may_delete if {
	aguard.decision.action == "allow" with input as call("delete_user", {"x-user-role": "viewer, Admin"})
}

test_viewer_may_not_delete if {
	d := aguard.decision with input as call("delete_user", {"x-user-role": "viewer"})
	d.action == "deny"
	contains(d.reason, "the request's roles are [\"viewer\"]")
}

test_missing_header_may_not_delete if {
	d := aguard.decision with input as call("drop_table", {})
	d.action == "deny"
	contains(d.reason, "has no x-user-role header")
}

test_empty_header_may_not_delete if {
	aguard.decision.action == "deny" with input as call("purge_cache", {"x-user-role": " , "})
}

test_unguarded_tool_is_allowed_for_anyone if {
	aguard.decision.action == "allow" with input as call("list_users", {})
}

test_guarded_globs_come_from_data if {
	aguard.decision.action == "deny" with input as call("list_users", {"x-user-role": "viewer"})
		with data.user_role.guarded_tools as ["list_*"]
}

test_baseline_frontend_invalid_json_is_denied if {
	inp := json.patch(call("delete_user", {"x-user-role": "admin"}), [
		{"op": "replace", "path": "/tool/frontend", "value": true},
		{"op": "replace", "path": "/call/argumentsError", "value": "invalid character"},
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

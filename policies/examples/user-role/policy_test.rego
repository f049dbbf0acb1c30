package aguard_test

import data.aguard

# call is a tool_call_end input from a caller with the given identity (null:
# not authenticated). The request's headers claim to be an admin: the
# policy must not care.
call(name, identity) := {
	"phase": "tool_call_end",
	"call": {
		"id": "c1", "name": name, "arguments": {"id": 7}, "argumentsText": "{\"id\":7}",
		"argumentsError": null, "parentMessageId": "", "subagentRunId": "", "reopened": false,
	},
	"tool": {"advertised": true, "frontend": false, "description": "", "parameters": null},
	"schema": {"checked": false, "valid": false, "errors": []},
	"run": {"threadId": "t", "runId": "r", "protocolVersion": "1.0", "advertisedTools": [], "route": ""},
	"request": {"path": "/", "headers": {"x-user-role": "admin", "x-user": "admin, alice"}, "remoteAddr": ""},
	"identity": identity,
}

jwt(sub, roles) := {"subject": sub, "issuer": "https://idp.example/", "claims": {"sub": sub, "roles": roles}, "source": "jwt"}

test_admin_may_delete if {
	aguard.decision.action == "allow" with input as call("delete_user", jwt("root", ["admin"]))
}

test_admin_among_several_roles_may_delete if {
	aguard.decision.action == "allow" with input as call("delete_user", jwt("root", ["viewer", " Admin "]))
}

test_a_single_role_string_counts if {
	aguard.decision.action == "allow" with input as call("delete_user", jwt("root", "admin"))
}

test_viewer_may_not_delete if {
	d := aguard.decision with input as call("delete_user", jwt("alice", ["viewer"]))
	d.action == "deny"
	contains(d.reason, "the caller's roles are [\"viewer\"]")
}

test_a_header_claiming_admin_is_not_an_identity if {
	d := aguard.decision with input as call("drop_table", null)
	d.action == "deny"
	contains(d.reason, "the caller (not authenticated) has none")
}

test_an_ingress_identity_has_no_roles if {
	d := aguard.decision with input as call("drop_table", {"subject": "alice", "issuer": "", "claims": {}, "source": "header"})
	d.action == "deny"
	contains(d.reason, "the caller (alice) has none")
}

test_empty_roles_may_not_delete if {
	aguard.decision.action == "deny" with input as call("purge_cache", jwt("alice", [" ", ""]))
}

test_unguarded_tool_is_allowed_for_anyone if {
	aguard.decision.action == "allow" with input as call("list_users", null)
}

test_guarded_globs_come_from_data if {
	aguard.decision.action == "deny" with input as call("list_users", jwt("alice", ["viewer"]))
		with data.user_role.guarded_tools as ["list_*"]
}

test_baseline_frontend_invalid_json_is_denied if {
	inp := json.patch(call("delete_user", jwt("root", ["admin"])), [
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
		"identity": null,
	}
	aguard.decision.action == "hold" with input as inp
}

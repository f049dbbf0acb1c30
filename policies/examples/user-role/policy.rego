# Example: rules on the user behind the request.
#
# Tools whose names match a glob in data.user_role.guarded_tools ("delete_*",
# "drop_*", ...) are denied unless the caller's verified JWT carries one of
# data.user_role.admin_roles in its claim data.user_role.claim ("roles": a
# list of strings, or one string).
#
# Trust: input.identity is who aguard authenticated (--auth-jwks: a token
# it verified; --auth-header: the subject a trusted ingress set, without
# claims, so no roles). Never base such a rule on input.request.headers:
# those are whatever the client sent, and a header sent twice arrives joined
# ("admin, alice"). Without authentication input.identity is null, and
# guarded tools are denied to everyone.
package aguard

default decision := {"action": "allow", "reason": "no policy rule objected to the call"}

decision := {"action": "deny", "reason": concat("; ", deny)} if {
	input.phase != "tool_call_start"
	count(deny) > 0
}

# --- Baseline: the rules of the shipped default policy -----------------------

# As a call starts (no arguments yet): hold a call to a tool the application
# did not advertise until it is judged; stream the application's own.
decision := {"action": "hold", "reason": sprintf("tool %q was not advertised by the application: held until it is judged", [input.call.name])} if {
	input.phase == "tool_call_start"
	input.tool.advertised != true
}

decision := {"action": "stream", "reason": "an advertised tool"} if {
	input.phase == "tool_call_start"
	input.tool.advertised == true
}

deny contains msg if {
	input.tool.frontend == true
	input.call.argumentsError != null
	msg := sprintf("arguments of frontend tool %q are not valid JSON: %s", [input.call.name, input.call.argumentsError])
}

deny contains msg if {
	input.tool.frontend == true
	input.schema.checked == true
	input.schema.valid != true
	msg := sprintf("arguments of frontend tool %q do not match its parameters schema: %s", [input.call.name, concat("; ", input.schema.errors)])
}

deny contains msg if {
	input.phase == "run_finished"
	input.tool.advertised != true
	msg := sprintf("tool %q was not advertised by the application and its call was left unanswered at the end of the run", [input.call.name])
}

# --- Roles -------------------------------------------------------------------

# roles is the set of roles the caller's verified token claims (lower case,
# trimmed): the claim may be a list or a single string.
roles contains lower(trim_space(r)) if {
	some r in input.identity.claims[data.user_role.claim]
	is_string(r)
	trim_space(r) != ""
}

roles contains lower(trim_space(r)) if {
	r := input.identity.claims[data.user_role.claim]
	is_string(r)
	trim_space(r) != ""
}

guarded if {
	some pattern in data.user_role.guarded_tools
	glob.match(pattern, [], input.call.name)
}

admin if {
	some role in data.user_role.admin_roles
	lower(role) in roles
}

deny contains msg if {
	guarded
	not admin
	count(roles) == 0
	msg := sprintf("tool %q is reserved to the roles %v, and the caller (%s) has none", [input.call.name, data.user_role.admin_roles, caller])
}

deny contains msg if {
	guarded
	not admin
	count(roles) > 0
	msg := sprintf("tool %q is reserved to the roles %v, and the caller's roles are %v", [input.call.name, data.user_role.admin_roles, sort(roles)])
}

# caller names who asked, for the reason.
default caller := "not authenticated"

caller := input.identity.subject if input.identity != null

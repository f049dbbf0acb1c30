# Example: rules on the user behind the request.
#
# Tools whose names match a glob in data.user_role.guarded_tools ("delete_*",
# "drop_*", ...) are denied unless the request header named by
# data.user_role.header (x-user-role) holds one of data.user_role.admin_roles.
# The header may list several roles, separated by commas.
#
# Trust: aguard passes request headers as the consumer sent them. Only base a
# rule on a header that something you trust sets — an authenticating gateway in
# front of aguard that strips the header from the client's request and sets
# it from a verified identity. Otherwise any client can claim to be an admin.
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

# roles is the set of roles the request claims (lower case, trimmed).
roles contains lower(trim_space(r)) if {
	some r in split(input.request.headers[lower(data.user_role.header)], ",")
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
	msg := sprintf("tool %q is reserved to the roles %v, and the request has no %s header", [input.call.name, data.user_role.admin_roles, data.user_role.header])
}

deny contains msg if {
	guarded
	not admin
	count(roles) > 0
	msg := sprintf("tool %q is reserved to the roles %v, and the request's roles are %v", [input.call.name, data.user_role.admin_roles, sort(roles)])
}

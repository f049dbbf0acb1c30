# The default policy aguard ships (README, "Policies").
#
# aguard evaluates data.aguard.decision
#   - as a call starts, before any of its arguments exist
#     (input.phase == "tool_call_start"): how the consumer sees the call;
#   - at TOOL_CALL_END, when a call's arguments are complete
#     (input.phase == "tool_call_end"), and
#   - at RUN_FINISHED, for calls that were not advertised and are still
#     unanswered (input.phase == "run_finished").
#
# At tool_call_start the decision is {"action": "stream" | "hold" | "hide"}.
# Otherwise it is an object {"action", "reason"[, "approvalTimeout"]} where
# action is "allow", "deny" or "require_approval". Every rule below adds a
# reason to the `deny` set; the decision allows unless that set is non-empty,
# so a deny always wins and its reason lists every rule that fired.
#
# Tool-call arguments are written by a model: they are untrusted input. A
# frontend call is executed by the application, so aguard refuses to hand it
# arguments that are not JSON or that break the schema the application
# declared for the tool.
package aguard

# Nothing objected: the call goes ahead.
default decision := {"action": "allow", "reason": "no policy rule objected to the call"}

# A deny always wins. Set members are sorted, so the reason is deterministic.
decision := {"action": "deny", "reason": concat("; ", deny)} if {
	input.phase != "tool_call_start"
	count(deny) > 0
}

# As a call starts: a call to a tool the application did not advertise is
# held — the consumer sees nothing of it until it is judged (its result
# arrives, or it is allowed when the run finishes) and, if it is declined,
# only its denial. The application's own tools stream as the agent sends them.
decision := {"action": "hold", "reason": sprintf("tool %q was not advertised by the application: held until it is judged", [input.call.name])} if {
	input.phase == "tool_call_start"
	input.tool.advertised != true
}

decision := {"action": "stream", "reason": "an advertised tool"} if {
	input.phase == "tool_call_start"
	input.tool.advertised == true
}

# A frontend call whose argument text is not a JSON document.
deny contains msg if {
	input.tool.frontend == true
	input.call.argumentsError != null
	msg := sprintf("arguments of frontend tool %q are not valid JSON: %s", [input.call.name, input.call.argumentsError])
}

# A frontend call whose arguments were checked against the tool's parameters
# JSON Schema and failed. The validator's messages are part of the reason.
deny contains msg if {
	input.tool.frontend == true
	input.schema.checked == true
	input.schema.valid != true
	msg := sprintf("arguments of frontend tool %q do not match its parameters schema: %s", [input.call.name, concat("; ", input.schema.errors)])
}

# A call naming a tool the application did not advertise, still unanswered
# when the run finished: aguard declines it on the application's behalf.
# (At tool_call_end such a call is allowed: it may be one of the agent's own
# tools, answered in the stream.)
deny contains msg if {
	input.phase == "run_finished"
	input.tool.advertised != true
	msg := sprintf("tool %q was not advertised by the application and its call was left unanswered at the end of the run", [input.call.name])
}

# The policy `aguard demo` runs with: the rules of aguard's built-in default
# policy, plus two demo rules (a reviewer must approve money transfers; an
# agent-side shell call that would delete files is refused).
package aguard

default decision := {"action": "allow", "reason": "no policy rule objected to the call"}

decision := {"action": "deny", "reason": concat("; ", deny)} if {
	count(deny) > 0
} else := {"action": "require_approval", "reason": "money transfers need a reviewer's approval", "approvalTimeout": "15m"} if {
	input.call.name == "transfer_funds"
	input.phase == "tool_call_end"
}

# The built-in default policy's rules.
decision := {"action": "hold", "reason": sprintf("tool %q was not advertised by the application", [input.call.name])} if {
	input.phase == "tool_call_start"
	input.tool.advertised != true
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

# Demo rule: an agent-side shell call that deletes recursively.
deny contains msg if {
	input.call.name == "shell"
	contains(input.call.argumentsText, "rm -rf")
	msg := "shell commands that delete recursively are not allowed"
}

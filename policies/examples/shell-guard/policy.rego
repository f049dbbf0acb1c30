# Example: deny shell-like tools whose arguments look dangerous.
#
# Tools named in data.shell_guard.tools (shell, exec, bash, ...) run what the
# model wrote on some machine. This policy denies such a call when any string
# in its arguments matches one of the regular expressions in
# data.shell_guard.patterns (rm -rf, curl ... | sh, ...), and when its
# arguments are not JSON at all, since they then cannot be inspected.
#
# Patterns are matched against every string value of the parsed arguments,
# after JSON unescaping, so "rm\u0020-rf" does not slip through. They are RE2
# expressions; an invalid one is an evaluation error, and aguard then denies
# (fail closed). A deny list is a seat belt, not a sandbox: run shell tools in
# one.
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

# --- Shell guard ---------------------------------------------------------------

# shell_tool holds when the called tool is one of the configured shell tools
# (compared without regard to case).
shell_tool if lower(input.call.name) in {lower(t) | some t in data.shell_guard.tools}

deny contains msg if {
	shell_tool
	some pattern in data.shell_guard.patterns
	some text in argument_strings
	regex.match(pattern, text)
	msg := sprintf("shell tool %q called with arguments matching the dangerous pattern %q", [input.call.name, pattern])
}

deny contains msg if {
	shell_tool
	input.call.argumentsError != null
	msg := sprintf("shell tool %q called with arguments that are not JSON and cannot be inspected", [input.call.name])
}

# argument_strings is every string in the parsed arguments, at any depth.
argument_strings contains value if {
	walk(input.call.arguments, [_, value])
	is_string(value)
}

# Example: hold calls to sensitive tools for a reviewer's approval.
#
# A call to a tool named in data.approval_tools gets
#   {"action": "require_approval", "approvalTimeout": data.approval_timeout}
# aguard then announces it (aguard.approval_required), keeps it pending and
# waits for POST /v1/tool-calls/{id}/approve or /reject. approvalTimeout is a
# Go duration ("15m", "1h"); leave it out (or "") to use aguard's
# --approval-timeout. A deny from any rule wins over an approval.
package aguard

default decision := {"action": "allow", "reason": "no policy rule objected to the call"}

decision := {"action": "deny", "reason": concat("; ", deny)} if {
	input.phase != "tool_call_start"
	count(deny) > 0
} else := {
	"action": "require_approval",
	"reason": concat("; ", approval),
	"approvalTimeout": approval_timeout,
} if {
	count(approval) > 0
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

# --- Approvals -----------------------------------------------------------------

approval contains msg if {
	input.phase == "tool_call_end"
	input.call.name in data.approval_tools
	msg := sprintf("tool %q needs a reviewer's approval", [input.call.name])
}

# approval_timeout is "" (aguard's default) unless the data sets one.
default approval_timeout := ""

approval_timeout := t if {
	t := data.approval_timeout
	is_string(t)
}

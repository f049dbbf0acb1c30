package proxy

import (
	"encoding/json"

	"github.com/valyala/fasthttp"
)

// HTTP error codes aguard answers with before a stream starts. They are part
// of aguard's public contract.
const (
	errInvalidRunInput     = "invalid_run_input"
	errTooLarge            = "too_large"
	errUpstreamUnavailable = "upstream_unavailable"
	errShuttingDown        = "shutting_down"     // addition: 503 while draining
	errNoRoute             = "no_route"          // addition: 404 when no route matches
	errHeadersTooLarge     = "headers_too_large" // addition: 431
	errUnansweredToolCalls = "unanswered_tool_calls"
	errAwaitingApproval    = "awaiting_approval"
	errUncoveredInterrupts = "uncovered_interrupts"
)

// writeError answers with status and the JSON body
// {"error":{"code":…,"message":…}}; message is escaped by encoding/json.
func writeError(ctx *fasthttp.RequestCtx, status int, code, message string) {
	writeErrorIDs(ctx, status, code, message, "", nil)
}

// writeErrorIDs is writeError with a list of ids inside error, under key
// (toolCallIds, interruptIds).
func writeErrorIDs(ctx *fasthttp.RequestCtx, status int, code, message, key string, ids []string) {
	e := map[string]any{"code": code, "message": message}
	if key != "" {
		e[key] = ids
	}
	body, _ := json.Marshal(map[string]any{"error": e})
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

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
	errOverloaded          = "overloaded"        // 503 past 90 % of --max-memory
	errNoRoute             = "no_route"          // addition: 404 when no route matches
	errHeadersTooLarge     = "headers_too_large" // addition: 431
	errBadRequest          = "bad_request"       // addition: 400, a request that is not well-formed HTTP/1.1
	errInvalidPath         = "invalid_path"
	errUnansweredToolCalls = "unanswered_tool_calls"
	errAwaitingApproval    = "awaiting_approval"
	errUncoveredInterrupts = "uncovered_interrupts"
	errLedgerUnavailable   = "ledger_unavailable" // addition: 503 when the thread's state cannot be vouched for
	errUnauthenticated     = "unauthenticated"    // 401: no valid credentials (--auth-jwks, --auth-header)
	errAuthUnavailable     = "auth_unavailable"   // addition: 503 while no JWT key set has been fetched
)

// statusConsumerGone labels aguard_requests_total for a request whose
// consumer left before the agent answered: nothing is written (nginx logs
// such a request as 499).
const statusConsumerGone = "499"

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

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
	errShuttingDown        = "shutting_down" // addition: 503 while draining
	errNoRoute             = "no_route"      // addition: 404 when no route matches
)

// writeError answers with status and the JSON body
// {"error":{"code":…,"message":…}}; message is escaped by encoding/json.
func writeError(ctx *fasthttp.RequestCtx, status int, code, message string) {
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": message}})
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

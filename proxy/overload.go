package proxy

import (
	"github.com/valyala/fasthttp"
)

// Admitter decides whether a new stream may start: package membudget's
// Budget, which refuses from when the process passes 90 % of its memory
// budget (--max-memory) until it is back under 80 %. Streams already running
// are not asked.
type Admitter interface {
	Admit() bool
}

// admit answers a run with 503 overloaded, and reports false, when the
// memory budget does not admit a new stream. The consumer may try again
// shortly, here or on another replica.
func (p *Proxy) admit(ctx *fasthttp.RequestCtx) bool {
	if p.opt.Memory == nil || p.opt.Memory.Admit() {
		return true
	}
	p.fail(ctx, fasthttp.StatusServiceUnavailable, errOverloaded,
		"aguard is past 90 % of its memory budget (--max-memory) and takes no new runs until memory is freed; retry shortly")
	ctx.Response.Header.Set("Retry-After", "1")
	return false
}

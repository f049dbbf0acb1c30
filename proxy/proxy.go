// Package proxy is aguard's data plane: a fasthttp server that takes a
// consumer's RunAgentInput, forwards it unchanged to the agent server, and
// streams the agent's events back through an agui.Stream, event by event,
// flushed per event.
//
// Package proxy owns the HTTP edges (request checks, one path for routing,
// policy and agent, the connections to consumers and to agents, framing,
// heartbeats, disconnects, draining) and nothing of the protocol: what an
// event means and what to do about it is package agui's.
package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aguard/aguard/agui"
	"github.com/aguard/aguard/auth"
	"github.com/aguard/aguard/downgrade"
	"github.com/aguard/aguard/policy"
	"github.com/aguard/aguard/state"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Route sends requests whose path starts with Path to the agent server at
// Upstream.
type Route struct {
	Path     string
	Upstream string
	// Protocol is the agent server's AG-UI line: "1.0" (or "") or "0.x".
	// A 0.x agent gets tool-message content parts flattened to text.
	Protocol string
}

// Options configure a Proxy. Zero durations and sizes take the defaults of
// aguard serve.
type Options struct {
	// Upstream is the agent server's base URL for requests no route matches.
	Upstream string
	// UpstreamProtocol is Upstream's AG-UI line: "1.0" (or "") or "0.x".
	UpstreamProtocol string
	// Routes send path prefixes to other agent servers; the longest match wins.
	Routes []Route
	// MaxBody is the largest RunAgentInput accepted (413 too_large above it).
	MaxBody int64
	// MaxEvent is the largest single event accepted from an agent.
	MaxEvent int64
	// MaxHeld bounds the bytes a stream holds back while tool calls are
	// held until judged (agui.Options.MaxHeld); 0 means 8 MiB.
	MaxHeld int64
	// Heartbeat is the silence after which a ": ping" comment is written.
	Heartbeat time.Duration
	// UpstreamTimeout bounds connecting to the agent and receiving its
	// response headers.
	UpstreamTimeout time.Duration
	// UpstreamIdleTimeout ends a stream whose agent has sent nothing for
	// that long (checked at each heartbeat), with AGUARD_UPSTREAM_LOST.
	UpstreamIdleTimeout time.Duration
	// UpstreamKeepalive is the longest an idle connection to an agent is
	// kept for reuse; shortened per agent to 3/4 of the agent's own
	// keep-alive timeout once known (see keepalive).
	UpstreamKeepalive time.Duration
	// Monitor makes the stream checks decide and log everything but change
	// nothing.
	Monitor bool
	// Policy decides tool calls; nil allows every call.
	Policy *policy.Engine
	// ApprovalTimeout is the time a reviewer has when a policy requires
	// approval without setting its own.
	ApprovalTimeout time.Duration
	// State is the tool-call ledger; nil keeps no ledger and checks nothing
	// across runs.
	State *state.Store
	// ClientToolTimeout is the time the application has to answer a
	// pending frontend call (clientToolDeadlineAt).
	ClientToolTimeout time.Duration
	// Notifier, if set, is told when a call starts, needs approval and
	// ends (webhooks). It must not block.
	Notifier state.Notifier
	// Auth, if set, authenticates every request before anything of it
	// reaches the agent (README, "Identity and audit"): a request it does
	// not authenticate gets 401 unauthenticated (503 auth_unavailable when
	// it cannot check). The identity goes to the policy (input.identity)
	// and the ledger (requestedBy). nil authenticates no one.
	Auth auth.Authenticator
	// AdminToken is the admin API's token. A data-plane request header that
	// carries it is removed before the request is forwarded: the token must
	// never reach an agent.
	AdminToken string
	// MaxUpstreamConns bounds the open connections to each agent server, one
	// per running stream, idle ones included.
	MaxUpstreamConns int
	Logger           *slog.Logger
	Metrics          *Metrics
	// Tracer makes the requests' spans (README, "Tracing"); nil turns
	// tracing off: no span is made, and the consumer's traceparent is
	// forwarded to the agent unchanged.
	Tracer trace.TracerProvider
	// Propagator carries trace context from the consumer's request and
	// into the agent's when Tracer is set (default: W3C Trace Context).
	Propagator propagation.TextMapPropagator

	// Memory, if set, is asked before each run whether a new stream may
	// start; if not, the run gets 503 overloaded (overload.go).
	Memory Admitter
}

// maxHeaderBytes bounds a request's line and headers. The buffer this
// sizes stays with a stream's connection for the stream's life.
const maxHeaderBytes = 8 << 10

// stalledConsumer is how long a consumer may accept no bytes at all before
// its stream is ended; a consumer that reads slowly is back-pressured, never
// buffered without bound.
const stalledConsumer = 2 * time.Minute

// Proxy is the data plane. Create it with New, serve with Serve, stop with
// Drain then Close.
type Proxy struct {
	opt       Options
	log       *slog.Logger
	m         *Metrics
	tracer    trace.Tracer // nil: tracing is off
	prop      propagation.TextMapPropagator
	upstreams []*upstream // routes, longest prefix first; the default last
	server    *fasthttp.Server

	draining atomic.Bool

	mu      sync.Mutex
	active  int                  // streams and requests in flight
	streams map[*stream]struct{} // streams running
	// calls are the requests waiting for an agent's answer head, each with
	// the function that abandons it.
	calls   map[*context.CancelCauseFunc]struct{}
	idle    map[net.Conn]struct{} // consumer connections waiting for their next request (serveNext)
	aborted bool                  // the drain timeout has run out, or Close was called
	closing bool                  // Close was called
	// hangups watches consumers and agent connections for the peer's close
	// (see hangup.go); started when first needed.
	hangups      *hangups
	hangupsTried bool
	// shareConns serves streams on fasthttp's connection, inside the hijack
	// handler, as where a descriptor cannot be duplicated (tests set it).
	shareConns atomic.Bool
	wakeups    wakeups
}

// New checks opt and builds a Proxy.
func New(opt Options) (*Proxy, error) {
	if opt.MaxBody <= 0 {
		opt.MaxBody = 8 << 20
	}
	if opt.MaxEvent <= 0 {
		opt.MaxEvent = 16 << 20
	}
	if opt.Heartbeat <= 0 {
		opt.Heartbeat = 15 * time.Second
	}
	if opt.UpstreamTimeout <= 0 {
		opt.UpstreamTimeout = 30 * time.Second
	}
	if opt.UpstreamIdleTimeout <= 0 {
		opt.UpstreamIdleTimeout = 10 * time.Minute
	}
	if opt.ApprovalTimeout <= 0 {
		opt.ApprovalTimeout = 10 * time.Minute
	}
	if opt.ClientToolTimeout <= 0 {
		opt.ClientToolTimeout = 24 * time.Hour
	}
	if opt.MaxUpstreamConns <= 0 {
		opt.MaxUpstreamConns = 10000
	}
	if opt.UpstreamKeepalive <= 0 {
		opt.UpstreamKeepalive = time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Metrics == nil {
		return nil, errors.New("proxy: Options.Metrics is required")
	}
	p := &Proxy{opt: opt, log: opt.Logger, m: opt.Metrics, streams: map[*stream]struct{}{},
		calls: map[*context.CancelCauseFunc]struct{}{}, idle: map[net.Conn]struct{}{}}
	if opt.Tracer != nil {
		p.tracer = opt.Tracer.Tracer(tracerName)
		p.prop = opt.Propagator
		if p.prop == nil {
			p.prop = propagation.TraceContext{}
		}
	}
	// One keep-alive bound per agent server, shared by the routes to it:
	// what one route learns of the agent holds for all.
	keeps := map[string]*keepalive{}
	add := func(rawURL, prefix, protocol string) error {
		keep := keeps[rawURL]
		if keep == nil {
			keep = &keepalive{max: opt.UpstreamKeepalive}
			keeps[rawURL] = keep
		}
		u, err := newUpstream(rawURL, prefix, protocol, opt.MaxUpstreamConns, keep, opt.Metrics)
		if err != nil {
			return err
		}
		u.pool.watch = p.watch
		p.upstreams = append(p.upstreams, u)
		return nil
	}
	for _, r := range opt.Routes {
		if err := add(r.Upstream, r.Path, r.Protocol); err != nil {
			return nil, fmt.Errorf("proxy: route %s: %w", r.Path, err)
		}
	}
	// The most specific route first; the default last.
	sort.SliceStable(p.upstreams, func(i, j int) bool {
		return len(p.upstreams[i].segments) > len(p.upstreams[j].segments)
	})
	if opt.Upstream != "" {
		if err := add(opt.Upstream, "", opt.UpstreamProtocol); err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
	}
	if len(p.upstreams) == 0 {
		return nil, errors.New("proxy: no upstream and no routes")
	}
	p.server = &fasthttp.Server{
		Handler:            p.handle,
		ErrorHandler:       p.handleReadError,
		MaxRequestBodySize: int(opt.MaxBody),
		// Request headers above this are refused (431 headers_too_large).
		ReadBufferSize: maxHeaderBytes,
		// ReadTimeout bounds reading a request (slow-loris); WriteTimeout
		// would be one deadline over the whole response and cut long
		// streams, so it stays off (streams have their own stall limit).
		ReadTimeout: 30 * time.Second,
		IdleTimeout: 120 * time.Second,
		// A stream hands its worker back as soon as its response is
		// hijacked, so a burst of streams leaves a worker per request
		// that was in flight, idle, each with its goroutine and stack.
		// fasthttp keeps idle workers 10 s by default; a burst of idle
		// streams (UIs waiting for a person) would pay for them per
		// stream until then. One second keeps a steady load's workers.
		MaxIdleWorkerDuration: time.Second,
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		CloseOnShutdown:       true,
		Name:                  "aguard",
		Logger:                fasthttpLogger{opt.Logger},
	}
	return p, nil
}

// Serve accepts connections on ln until Close.
func (p *Proxy) Serve(ln net.Listener) error { return p.server.Serve(consumerListener{ln}) }

// Ready reports whether the data plane takes new requests, and why not.
func (p *Proxy) Ready() (bool, string) {
	if p.draining.Load() {
		return false, "draining"
	}
	return true, ""
}

// Drain stops taking new requests (they get 503 shutting_down) and waits for
// running streams to finish. When ctx is done first, running streams end with
// RUN_ERROR AGUARD_SHUTDOWN, and Drain waits a little more for them to write
// it; it returns ctx's error then.
func (p *Proxy) Drain(ctx context.Context) error {
	p.draining.Store(true)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for p.inFlight() > 0 {
		select {
		case <-tick.C:
		case <-ctx.Done():
			p.abortStreams()
			return ctx.Err()
		}
	}
	return nil
}

// abortStreams ends every running stream with RUN_ERROR AGUARD_SHUTDOWN
// (a stream starting from now on ends at once), abandons the requests still
// waiting for an agent's answer (503 shutting_down), and waits up to 5 s for
// them all to be answered.
func (p *Proxy) abortStreams() {
	p.abortCalls()
	p.mu.Lock()
	running := make([]*stream, 0, len(p.streams))
	for s := range p.streams {
		running = append(running, s)
	}
	p.mu.Unlock()
	for _, s := range running {
		go s.interrupt(errShutdown)
	}
	for deadline := time.Now().Add(5 * time.Second); p.inFlight() > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
}

// Close stops the server and closes every connection. Streams still running
// (Drain first to let them finish) end as when the drain timeout runs out,
// with RUN_ERROR AGUARD_SHUTDOWN; Close waits up to 5 s for them to write it.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	// Requests waiting for an agent would hold the server's shutdown until
	// their agents answered: abandon them first.
	p.abortCalls()
	p.closeIdle()
	err := p.server.Shutdown()
	p.abortStreams()
	for _, u := range p.upstreams {
		u.pool.close()
	}
	p.mu.Lock()
	h := p.hangups
	p.hangups = nil
	p.mu.Unlock()
	if h != nil {
		h.close()
	}
	return err
}

func (p *Proxy) inFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.active
}

func (p *Proxy) enter() {
	p.mu.Lock()
	p.active++
	p.mu.Unlock()
}

// track adds (on) or removes a running stream. Adding reports false once the
// drain timeout has run out: the stream must end at once.
func (p *Proxy) track(s *stream, on bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !on {
		delete(p.streams, s)
		return true
	}
	p.streams[s] = struct{}{}
	return !p.aborted
}

func (p *Proxy) leave() {
	p.mu.Lock()
	p.active--
	p.mu.Unlock()
}

// abortCalls abandons every request waiting for an agent's answer head
// (503 shutting_down), and every one that starts from now on.
func (p *Proxy) abortCalls() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.aborted = true
	for cancel := range p.calls {
		(*cancel)(errShutdown)
	}
}

// trackCall adds (on) or removes a request waiting for an agent. Adding
// abandons it at once when the proxy is shutting down.
func (p *Proxy) trackCall(cancel *context.CancelCauseFunc, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !on {
		delete(p.calls, cancel)
		return
	}
	p.calls[cancel] = struct{}{}
	if p.aborted {
		(*cancel)(errShutdown)
	}
}

// route is the upstream for a path's segments (routePath): the most
// specific matching route, or the default.
func (p *Proxy) route(segs []string) *upstream {
	for _, u := range p.upstreams {
		if u.prefix == "" || u.matches(segs) {
			return u
		}
	}
	return nil
}

func (p *Proxy) handleReadError(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		p.fail(ctx, fasthttp.StatusRequestEntityTooLarge, errTooLarge,
			fmt.Sprintf("request body is larger than the limit of %d bytes", p.opt.MaxBody))
		return
	}
	var small *fasthttp.ErrSmallBuffer
	if errors.As(err, &small) || errors.Is(err, fasthttp.ErrSmallReadBuffer) {
		// Nothing of the header was parsed: its method and path are
		// fasthttp's defaults, not the client's.
		ctx.SetUserValue(unreadKey{}, true)
		p.fail(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge, errHeadersTooLarge,
			fmt.Sprintf("request line and headers are larger than the limit of %d bytes", maxHeaderBytes))
		return
	}
	if errors.Is(err, errBareLF) {
		p.fail(ctx, fasthttp.StatusBadRequest, errBadRequest, errBareLF.Error())
		return
	}
	p.fail(ctx, fasthttp.StatusBadRequest, errBadRequest, "cannot read request: "+err.Error())
}

// fail answers ctx with an error of aguard's own, counts it and, for a
// refusal, writes the audit line.
func (p *Proxy) fail(ctx *fasthttp.RequestCtx, status int, code, message string) {
	writeError(ctx, status, code, message)
	p.m.requests.WithLabelValues(strconv.Itoa(status)).Inc()
	p.audit(ctx, status, code, message)
}

// handle serves one request. A POST is a run: its body must be a
// RunAgentInput, and a 2xx text/event-stream answer is streamed through the
// checks. Anything else (other methods, error answers, other content) passes
// through unchanged.
//
// rctx is the request's context, then its stream's (as net/http gives each
// request one): the ledger, the agent's request and the policy run under it.
// It is cancelled when the consumer leaves, when the drain timeout runs out
// and on Close, with the cause (errConsumerGone, errShutdown).
func (p *Proxy) handle(ctx *fasthttp.RequestCtx) {
	p.enter()
	rctx, cancel := context.WithCancelCause(context.Background())
	p.trackCall(&cancel, true)
	defer p.trackCall(&cancel, false)
	rctx, tr := p.startTrace(rctx, ctx)
	streaming := false
	defer func() {
		if !streaming {
			tr.end(ctx.Response.StatusCode(), "")
			cancel(nil)
			p.leave()
		}
	}()
	if p.draining.Load() {
		ctx.SetConnectionClose() // to a replica that is not going away
		p.fail(ctx, fasthttp.StatusServiceUnavailable, errShuttingDown, "aguard is shutting down")
		return
	}
	if err := checkFraming(&ctx.Request.Header); err != nil {
		ctx.SetConnectionClose()
		p.fail(ctx, fasthttp.StatusBadRequest, errBadRequest, err.Error())
		return
	}
	id, ok := p.authenticate(ctx)
	if !ok {
		return
	}
	path, query, err := splitTarget(ctx.Request.Header.RequestURI())
	if err == nil {
		err = checkPath(path)
	}
	if err != nil {
		p.fail(ctx, fasthttp.StatusBadRequest, errInvalidPath, err.Error())
		return
	}
	up := p.route(routePath(path))
	if up == nil {
		p.fail(ctx, fasthttp.StatusNotFound, errNoRoute, "no route for path "+strconv.Quote(string(path)))
		return
	}
	tr.route(up)
	run := ctx.IsPost()
	if run && !p.admit(ctx) {
		return
	}
	var in *agui.RunInput
	if run {
		var err error
		if in, err = agui.ParseRunInput(ctx.PostBody()); err != nil {
			p.fail(ctx, fasthttp.StatusBadRequest, errInvalidRunInput, err.Error())
			return
		}
		tr.run(in)
	}

	var answers map[string]agui.Answer
	if run && p.opt.State != nil {
		var refusal *threadRefusal
		refusal, answers = p.checkThread(rctx, in)
		if refusal != nil {
			writeErrorIDs(ctx, refusal.status, refusal.code, refusal.message, refusal.key, refusal.ids)
			p.m.requests.WithLabelValues(strconv.Itoa(refusal.status)).Inc()
			p.audit(ctx, refusal.status, refusal.code, refusal.message)
			return
		}
	}

	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	if err := p.forwarded(ctx, req, up, up.target(path, query), in, answers); err != nil {
		p.fail(ctx, fasthttp.StatusBadRequest, errInvalidRunInput, err.Error())
		return
	}
	var info policy.RequestInfo
	if run && p.opt.Policy != nil {
		// What the policy reads of the request is what the agent gets.
		info = requestInfo(path, &req.Header, ctx.RemoteAddr())
	}
	tr.callAgent(rctx, up, req)
	ans, err := p.call(rctx, cancel, ctx.Conn(), up, req)
	if err != nil {
		tr.agentAnswered(0, err)
		switch {
		case errors.Is(err, errConsumerGone):
			// Nobody to answer: the consumer left before the agent did.
			p.m.requests.WithLabelValues(statusConsumerGone).Inc()
			p.log.Info("consumer left before the agent answered", "upstream", up.base.Redacted())
		case errors.Is(err, errShutdown):
			ctx.SetConnectionClose()
			p.fail(ctx, fasthttp.StatusServiceUnavailable, errShuttingDown, "aguard is shutting down")
		default:
			status := upstreamStatus(err)
			p.m.upstreamErrors.WithLabelValues(strconv.Itoa(status)).Inc()
			p.log.Warn("agent unreachable", "upstream", up.base.Redacted(), "err", err)
			msg := "agent server unreachable: " + err.Error()
			if status == fasthttp.StatusGatewayTimeout {
				msg = fmt.Sprintf("the agent server sent no response headers within %s", p.opt.UpstreamTimeout)
			}
			p.fail(ctx, status, errUpstreamUnavailable, msg)
		}
		return
	}
	status := ans.resp.StatusCode()
	tr.agentAnswered(status, nil)
	p.m.requests.WithLabelValues(strconv.Itoa(status)).Inc()
	if !run || status < 200 || status > 299 || !isEventStream(ans.resp.Header.ContentType()) {
		passThrough(ctx, ans)
		return
	}
	streaming = true
	p.startStream(ctx, request{ctx: rctx, cancel: cancel, trace: tr}, ans, in, up, info, id)
}

// forwarded builds in req the request the agent gets: the consumer's, to
// target, less hop-by-hop headers and any carrying the admin token, with
// answers to held calls rewritten as declines, flattened for a 0.x agent,
// and asking for SSE when it is a run.
func (p *Proxy) forwarded(ctx *fasthttp.RequestCtx, req *fasthttp.Request, up *upstream, target string, in *agui.RunInput, answers map[string]agui.Answer) error {
	ctx.Request.CopyTo(req)
	if len(answers) > 0 {
		body, err := agui.AnswerToolMessages(req.Body(), answers)
		if err != nil {
			return err
		}
		for id, a := range answers {
			p.log.Info("tool message rewritten to a decline", "toolCallId", id, "reason", a.Error, "threadId", in.ThreadID, "runId", in.RunID)
		}
		req.SetBody(body)
	}
	stripHopHeaders(&req.Header)
	p.stripAdminToken(&req.Header)
	req.Header.ResetConnectionClose()
	// The target is the path as received: the request line is written from
	// it, never from a parsed (and re-encoded) URI.
	req.SetRequestURI(target)
	req.Header.SetHost(up.base.Host)
	appendForwardedFor(&req.Header, ctx.RemoteIP())
	if in != nil && up.legacy {
		// A 0.x agent cannot read content parts in tool messages.
		body, lost, err := downgrade.Input(req.Body())
		if err != nil {
			return err
		}
		for _, n := range lost {
			p.m.notes.WithLabelValues(n.Kind).Inc()
			p.log.Info(msgNote, "kind", n.Kind, "rule", n.Rule, "id", n.ID, "message", n.Message, "threadId", in.ThreadID, "runId", in.RunID)
		}
		req.SetBody(body)
	}
	if in != nil {
		// aguard reads SSE only; an agent that could answer in protobuf or
		// compressed must not.
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Accept-Encoding", "identity")
	}
	return nil
}

// call sends req to up and returns the answer, its body left to read. It is
// abandoned with ctx (cancel is its request's): with errConsumerGone as soon
// as the consumer on conn leaves, with errShutdown when the drain timeout
// runs out or the proxy closes, and with a deadline error after
// --upstream-timeout.
func (p *Proxy) call(ctx context.Context, cancel context.CancelCauseFunc, conn net.Conn, up *upstream, req *fasthttp.Request) (*reply, error) {
	cctx, cancelTimeout := context.WithTimeout(ctx, p.opt.UpstreamTimeout)
	defer cancelTimeout()
	stop := p.watchRequest(conn, cancel)
	defer stop()
	start := time.Now()
	ans, err := up.do(cctx, req)
	if err != nil && cctx.Err() != nil {
		err = context.Cause(cctx)
	}
	if err == nil {
		p.m.upstreamFirstByte.Observe(time.Since(start).Seconds())
	}
	return ans, err
}

// stripAdminToken removes every header whose value carries the admin token.
func (p *Proxy) stripAdminToken(h *fasthttp.RequestHeader) {
	if p.opt.AdminToken == "" {
		return
	}
	var names []string
	for k, v := range h.All() {
		if bytes.Contains(v, []byte(p.opt.AdminToken)) {
			names = append(names, string(k))
		}
	}
	for _, name := range names {
		h.Del(name)
		p.log.Warn("a request carried the admin token in a header; the header was not forwarded", "header", name)
	}
}

// fasthttpLogger sends fasthttp's own messages (connections it could not
// serve) to the structured log at debug level: each has already been answered
// with an HTTP error and counted. Its text is the line's message attribute.
type fasthttpLogger struct{ log *slog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Debug("fasthttp server", "component", "fasthttp", "message", fmt.Sprintf(format, args...))
}

func appendForwardedFor(h *fasthttp.RequestHeader, ip net.IP) {
	if ip == nil || ip.IsUnspecified() {
		return
	}
	if prior := h.Peek("X-Forwarded-For"); len(prior) > 0 {
		h.Set("X-Forwarded-For", string(prior)+", "+ip.String())
		return
	}
	h.Set("X-Forwarded-For", ip.String())
}

func isEventStream(ct []byte) bool {
	mt, _, _ := strings.Cut(string(ct), ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}

// copyResponseHeaders copies the agent's response headers to the consumer's,
// less the hop-by-hop ones and those in skip.
func copyResponseHeaders(dst *fasthttp.ResponseHeader, src *fasthttp.ResponseHeader, skip ...string) {
	var hdr fasthttp.ResponseHeader
	src.CopyTo(&hdr)
	stripHopHeaders(&hdr)
	for _, name := range skip {
		hdr.Del(name)
	}
	for k, v := range hdr.All() {
		dst.AddBytesKV(k, v)
	}
	skipsType := slices.ContainsFunc(skip, func(name string) bool { return strings.EqualFold(name, "Content-Type") })
	if ct := hdr.ContentType(); len(ct) > 0 && !skipsType {
		dst.SetContentTypeBytes(ct)
	}
}

// passThrough sends the agent's answer to the consumer unchanged: status,
// headers (less hop-by-hop) and body, streamed.
func passThrough(ctx *fasthttp.RequestCtx, ans *reply) {
	ctx.SetStatusCode(ans.resp.StatusCode())
	copyResponseHeaders(&ctx.Response.Header, &ans.resp.Header, "Content-Length")
	if ans.body == nil {
		ans.release()
		return
	}
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer ans.release()
		io.Copy(w, ans)
	})
}

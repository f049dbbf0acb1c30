package proxy

import (
	"context"
	"net"
	"strconv"

	"github.com/aguard/aguard/agui"
	"github.com/aguard/aguard/internal/tracing"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// This file makes a request's spans (README, "Tracing"): the consumer's
// request (server), the agent's (client, its traceparent injected so that
// the agent's spans join the trace), and one execute_tool span per tool
// call, named and attributed as the OpenTelemetry GenAI conventions say
// (https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/#execute-tool-span).
// With tracing off (Options.Tracer nil) a request has no reqTrace, and
// every method below is a no-op on a nil one: nothing is allocated.

// tracerName is the instrumentation scope of aguard's spans.
const tracerName = "github.com/aguard/aguard"

// Span attributes aguard sets beyond the HTTP and GenAI conventions.
const (
	attrToolFrontend   = attribute.Key("aguard.tool.frontend")
	attrDecisionAction = attribute.Key("aguard.decision.action")
	attrDecisionID     = attribute.Key("aguard.decision.id")
	attrPolicyRevision = attribute.Key("aguard.policy.revision")
	// Additions (README, "Tracing").
	attrToolVisibility = attribute.Key("aguard.tool.visibility")
	attrToolOutcome    = attribute.Key("aguard.tool.outcome")
	attrRunID          = attribute.Key("aguard.run.id")
	attrStreamEnd      = attribute.Key("aguard.stream.end")
	attrApprovalAt     = attribute.Key("aguard.approval.deadline")
)

// Values of aguard.tool.outcome: how a call's span ended.
const (
	outcomeAnswered  = "answered"  // its result reached the stream
	outcomeDenied    = "denied"    // the policy (or aguard) denied it
	outcomePending   = "pending"   // the run finished with it pending, for the application (or a reviewer)
	outcomeRunEnded  = "run_ended" // the run ended (an error, a cancellation) without an answer
	outcomeInterrupt = "stream_ended"
)

// reqTrace is one request's spans. It is used by the request's goroutine,
// then by its stream's, never by two at once.
type reqTrace struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	method string
	server trace.Span
	client trace.Span // nil until the agent is asked
	status int        // the agent's answer's status, once it answered
	thread string
	// tools are the open execute_tool spans, by call id.
	tools map[string]trace.Span
}

// startTrace starts the server span of the consumer's request in ctx (the
// consumer's traceparent its parent) and returns ctx with it; nil when
// tracing is off.
func (p *Proxy) startTrace(ctx context.Context, rc *fasthttp.RequestCtx) (context.Context, *reqTrace) {
	if p.tracer == nil {
		return ctx, nil
	}
	method := string(rc.Method())
	ctx = tracing.Extract(ctx, p.prop, &rc.Request.Header)
	ctx, span := p.tracer.Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("http.request.method", method),
			attribute.String("url.path", string(rc.Path())),
			attribute.String("url.scheme", "http"),
			attribute.String("client.address", rc.RemoteIP().String()),
			attribute.String("network.protocol.version", protocolVersion(&rc.Request.Header)),
		))
	return ctx, &reqTrace{tracer: p.tracer, prop: p.prop, method: method, server: span}
}

func protocolVersion(h *fasthttp.RequestHeader) string {
	if h.IsHTTP11() {
		return "1.1"
	}
	return "1.0"
}

// route names the server span after the route the request took.
func (t *reqTrace) route(up *upstream) {
	if t == nil || up.prefix == "" {
		return
	}
	t.server.SetName(t.method + " " + up.prefix)
	t.server.SetAttributes(attribute.String("http.route", up.prefix))
}

// run records the run the request carries.
func (t *reqTrace) run(in *agui.RunInput) {
	if t == nil || in == nil {
		return
	}
	t.thread = in.ThreadID
	t.server.SetAttributes(attribute.String("gen_ai.conversation.id", in.ThreadID), attrRunID.String(in.RunID))
}

// callAgent starts the client span of the request to up, child of the
// server span, and writes its traceparent into req (replacing the
// consumer's, which is the server span's parent).
func (t *reqTrace) callAgent(ctx context.Context, up *upstream, req *fasthttp.Request) {
	if t == nil {
		return
	}
	method := string(req.Header.Method())
	host, port, _ := net.SplitHostPort(up.pool.addr)
	attrs := []attribute.KeyValue{
		attribute.String("http.request.method", method),
		attribute.String("server.address", host),
		attribute.String("url.path", string(req.URI().Path())),
	}
	if n, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, attribute.Int("server.port", n))
	}
	ctx, t.client = t.tracer.Start(ctx, method, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	tracing.Inject(ctx, t.prop, &req.Header)
}

// agentAnswered records the agent's answer head, or the failure to get one
// (the client span ends then).
func (t *reqTrace) agentAnswered(status int, err error) {
	if t == nil || t.client == nil {
		return
	}
	if err != nil {
		t.client.RecordError(err)
		t.client.SetStatus(codes.Error, err.Error())
		t.client.End()
		t.client = nil
		return
	}
	t.status = status
	t.client.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 400 {
		t.client.SetStatus(codes.Error, "")
	}
}

// endStream ends every span still open: the stream is over, ended as end
// says (stream.pump).
func (t *reqTrace) endStream(end string) {
	if t == nil {
		return
	}
	t.end(t.status, end)
}

// end ends every span still open: the request is over. status is the
// HTTP status answered; end, for a stream, how it ended ("" otherwise).
func (t *reqTrace) end(status int, end string) {
	if t == nil {
		return
	}
	t.endTools(outcomeInterrupt)
	if t.client != nil {
		if end != "" && end != "completed" {
			t.client.SetAttributes(attrStreamEnd.String(end))
		}
		t.client.End()
		t.client = nil
	}
	t.server.SetAttributes(attribute.Int("http.response.status_code", status))
	if end != "" {
		t.server.SetAttributes(attrStreamEnd.String(end))
	}
	if status >= 500 {
		t.server.SetStatus(codes.Error, "")
	}
	t.server.End()
}

// tool returns the open span of call c, started now (child of the server
// span) if there is none.
func (t *reqTrace) tool(id, name string, frontend bool) trace.Span {
	if sp, ok := t.tools[id]; ok {
		return sp
	}
	if t.tools == nil {
		t.tools = map[string]trace.Span{}
	}
	_, sp := t.tracer.Start(trace.ContextWithSpan(context.Background(), t.server), "execute_tool "+name,
		trace.WithAttributes(
			attribute.String("gen_ai.operation.name", "execute_tool"),
			attribute.String("gen_ai.tool.name", name),
			attribute.String("gen_ai.tool.call.id", id),
			attribute.String("gen_ai.conversation.id", t.thread),
			attrToolFrontend.Bool(frontend),
		))
	t.tools[id] = sp
	return sp
}

// endTool ends call id's span, saying how.
func (t *reqTrace) endTool(id, outcome string) {
	sp, ok := t.tools[id]
	if !ok {
		return
	}
	sp.SetAttributes(attrToolOutcome.String(outcome))
	sp.End()
	delete(t.tools, id)
}

func (t *reqTrace) endTools(outcome string) {
	for id := range t.tools {
		t.endTool(id, outcome)
	}
}

// observe applies one pipeline step's facts to the tool spans: the calls
// it started, decided and answered, and the run it ended.
func (t *reqTrace) observe(o *Output) {
	if t == nil || (len(o.Calls) == 0 && o.Run.Kind == "") {
		return
	}
	for i := range o.Calls {
		ev := &o.Calls[i]
		switch ev.Kind {
		case agui.CallStarted:
			sp := t.tool(ev.ID, ev.Name, ev.Frontend)
			if ev.Visibility != "" {
				sp.SetAttributes(attrToolVisibility.String(ev.Visibility))
			}
		case agui.CallDecided:
			t.decided(ev)
		case agui.CallAnswered:
			t.endTool(ev.ID, outcomeAnswered)
		}
	}
	if o.Run.Kind == "" {
		return
	}
	for _, id := range o.Run.Pending {
		if o.Run.Kind == "finished" && o.Run.Outcome != "cancelled" {
			t.endTool(id, outcomePending)
		}
	}
	t.endTools(outcomeRunEnded)
}

// decided records a verdict on a call's span, as the stream applies it
// (agui.Decider): require_approval holds a frontend call; of an agent-side
// call it denies, as does an action the stream does not know.
func (t *reqTrace) decided(ev *agui.CallEvent) {
	sp := t.tool(ev.ID, ev.Name, ev.Frontend)
	v := ev.Verdict
	action := v.Action
	switch {
	case action == agui.ActionAllow, action == agui.ActionDeny:
	case action == agui.ActionRequireApproval && ev.Frontend:
	default:
		action = agui.ActionDeny
	}
	sp.SetAttributes(attrDecisionAction.String(action), attrDecisionID.String(v.DecisionID),
		attrPolicyRevision.String(v.PolicyRevision))
	switch action {
	case agui.ActionDeny:
		sp.SetStatus(codes.Error, v.Reason)
		t.endTool(ev.ID, outcomeDenied)
	case agui.ActionRequireApproval:
		sp.AddEvent("aguard.approval_required", trace.WithAttributes(attrApprovalAt.String(v.RequiresApprovalAt)))
	}
}

// tracedDecider puts each decision under its call's span, so that the
// policy's evaluation is its child.
type tracedDecider struct {
	agui.Decider
	t *reqTrace
}

// Decide implements agui.Decider.
func (d tracedDecider) Decide(ctx context.Context, c *agui.Call) agui.Verdict {
	sp := d.t.tool(c.ID, c.Name, c.Frontend)
	return d.Decider.Decide(trace.ContextWithSpan(ctx, sp), c)
}

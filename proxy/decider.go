package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"time"

	"github.com/aguard/aguard/agui"
	"github.com/aguard/aguard/policy"
	"github.com/valyala/fasthttp"
)

// decider puts a stream's tool calls to the policy engine: it builds the
// policy input (README, "Policies") from the call, the run input and the
// request, and turns the decision into the Stream's verdict. One per stream.
//
// Arguments the decider cannot read whole (over the 1 MiB the Stream keeps)
// are denied without asking the policy: a call aguard cannot inspect is one it
// cannot vouch for. Large arguments wait for their turn to be inspected
// (policy.Engine.Reserve), so that the memory the inspections of every
// stream take at once stays bounded.
type decider struct {
	engine          *policy.Engine
	in              *agui.RunInput
	run             policy.RunInfo
	req             policy.RequestInfo
	identity        *policy.Identity
	shared          *policy.Shared // run, req and identity, converted once for the run's decisions
	approvalTimeout time.Duration
	now             func() time.Time
}

// NewDecider returns the agui.Decider that puts the tool calls of one run to
// engine. route names the route for the policy input; req is what the policy
// may read of the consumer's request, and id who sent it (input.identity;
// nil when aguard authenticates no one); approvalTimeout is the deadline
// given when the policy requires approval without setting its own.
func NewDecider(engine *policy.Engine, in *agui.RunInput, route string, req policy.RequestInfo, id *policy.Identity, approvalTimeout time.Duration) agui.Decider {
	tools := make([]string, len(in.Tools))
	for i, t := range in.Tools {
		tools[i] = t.Name
	}
	return &decider{
		engine: engine,
		in:     in,
		run: policy.RunInfo{ThreadID: in.ThreadID, RunID: in.RunID, ProtocolVersion: in.ProtocolVersion,
			AdvertisedTools: tools, Route: route},
		req:             req,
		identity:        id,
		shared:          new(policy.Shared),
		approvalTimeout: approvalTimeout,
		now:             time.Now,
	}
}

// requestInfo copies what the policy may read of the request: the path as
// received (and forwarded) and the headers of the request the agent gets;
// the stream outlives the request, so nothing may point into it.
func requestInfo(path []byte, hdr *fasthttp.RequestHeader, remote net.Addr) policy.RequestInfo {
	h := map[string]string{}
	for k, v := range hdr.All() {
		name := strings.ToLower(string(k))
		if prior, ok := h[name]; ok {
			h[name] = prior + ", " + string(v)
		} else {
			h[name] = string(v)
		}
	}
	return policy.RequestInfo{Path: string(path), Headers: h, RemoteAddr: remote.String()}
}

// Decide implements agui.Decider. The policy evaluates under ctx: a
// cancelled ctx denies (holds, at tool_call_start), as policy.Engine.Decide
// does whenever it cannot decide.
func (d *decider) Decide(ctx context.Context, c *agui.Call) agui.Verdict {
	tool, advertised := d.in.Tool(c.Name)
	in := policy.Input{
		Phase: c.Phase,
		Call: policy.CallInput{
			ID: c.ID, Name: c.Name, ArgumentsText: string(c.Arguments),
			ParentMessageID: c.ParentMessageID, SubagentRunID: c.SubagentRunID, Reopened: c.Reopened,
		},
		Tool: policy.ToolInput{Advertised: advertised, Frontend: advertised},
		Run:  d.run, Request: d.req, Identity: d.identity, Shared: d.shared,
	}
	if advertised {
		in.Tool.Description = tool.Description
		in.Tool.Parameters = json.RawMessage(tool.Parameters)
	}
	if c.Phase == agui.PhaseToolCallStart {
		// No arguments yet: the policy says how the consumer sees the call
		// (stream, hold or hide; hold when it cannot say).
		dec := d.engine.Decide(ctx, &in)
		return agui.Verdict{Action: dec.Action, Reason: dec.Reason, DecisionID: dec.DecisionID, PolicyRevision: dec.Revision}
	}
	switch {
	case c.ArgumentsTruncated:
		// aguard keeps the first 1 MiB of a call's arguments; a call it
		// cannot read whole is one it cannot vouch for.
		return agui.Verdict{Action: agui.ActionDeny, DecisionID: "truncated-" + c.ID,
			Reason: "the arguments are longer than the 1 MiB aguard inspects"}
	case len(bytes.TrimSpace(c.Arguments)) == 0:
		// A call without argument text is a call without arguments: the
		// official client reads it as {}, and so does the policy (the
		// schema still applies: required members are missing).
		in.Call.Arguments = json.RawMessage(`{}`)
		if advertised {
			in.Schema = d.engine.ValidateArguments(tool.Parameters, in.Call.Arguments)
		}
	case json.Valid(c.Arguments):
		// Large arguments take turns: what inspecting them costs grows with
		// the JSON values they hold (policy.Engine.Reserve).
		release, err := d.engine.Reserve(ctx, c.Arguments)
		if err != nil {
			return agui.Verdict{Action: agui.ActionDeny, DecisionID: "uninspected-" + c.ID,
				Reason: "the run ended while the arguments waited to be inspected"}
		}
		defer release()
		in.Call.Arguments = json.RawMessage(c.Arguments)
		if advertised {
			in.Schema = d.engine.ValidateArguments(tool.Parameters, c.Arguments)
		}
	default:
		msg := "the arguments are not valid JSON"
		in.Call.ArgumentsError = &msg
	}
	dec := d.engine.Decide(ctx, &in)
	v := agui.Verdict{Action: dec.Action, Reason: dec.Reason, DecisionID: dec.DecisionID, PolicyRevision: dec.Revision}
	if dec.Action == policy.ActionRequireApproval {
		timeout := dec.ApprovalTimeout
		if timeout <= 0 {
			timeout = d.approvalTimeout
		}
		v.RequiresApprovalAt = d.now().Add(timeout).UTC().Format(time.RFC3339)
	}
	return v
}

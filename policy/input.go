package policy

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Input is the document a policy sees as `input`, field for field the shape of
// the README's "Policies" section. Its JSON encoding is what the policy sees,
// with two normalisations: a nil slice or map is seen as an empty array or
// object, and a nil json.RawMessage as null. At PhaseToolCallStart the policy
// sees no arguments: call has only id, name, parentMessageId and
// subagentRunId, and there is no schema.
type Input struct {
	// Phase is PhaseToolCallStart (the call has started), PhaseToolCallEnd
	// (its arguments are complete) or PhaseRunFinished (an unadvertised
	// call is still unanswered as the run finishes).
	Phase string `json:"phase"`
	// Call is the tool call being decided.
	Call CallInput `json:"call"`
	// Tool is what the application advertised about the called tool.
	Tool ToolInput `json:"tool"`
	// Schema is the result of validating Call.Arguments against
	// Tool.Parameters (see ValidateArguments).
	Schema SchemaResult `json:"schema"`
	// Run identifies the run the call belongs to.
	Run RunInfo `json:"run"`
	// Request describes the HTTP request that started the run.
	Request RequestInfo `json:"request"`
	// Identity is who sent that request, as aguard authenticated them; nil
	// (the policy sees null) when aguard authenticates no one. It is in the
	// input at every phase.
	Identity *Identity `json:"identity"`
	// Shared, if set, keeps Run, Request and Identity converted for the
	// evaluation after the first decision that uses it, for the next ones:
	// set the same Shared on the Inputs of one run, whose Run, Request and
	// Identity stay the same. nil converts them at every decision.
	Shared *Shared `json:"-"`
}

// Shared holds the members of the input the calls of one run have in
// common — run, request and identity — converted once for the policy
// (see Input.Shared). The zero value is ready to use; it is safe for
// concurrent use, and the converted terms, like every OPA input, are only
// read by the evaluations.
type Shared struct {
	once                   sync.Once
	run, request, identity *ast.Term
	err                    error
}

// sharedTerms returns input.run, input.request and input.identity,
// converted now or, with in.Shared, at the first decision of the run.
func (in *Input) sharedTerms() (run, request, identity *ast.Term, err error) {
	convert := func() (*ast.Term, *ast.Term, *ast.Term, error) {
		id, err := in.identityTerm()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("identity.claims: %w", err)
		}
		return ast.NewTerm(in.runTerm()), ast.NewTerm(in.requestTerm()), id, nil
	}
	sh := in.Shared
	if sh == nil {
		return convert()
	}
	sh.once.Do(func() { sh.run, sh.request, sh.identity, sh.err = convert() })
	return sh.run, sh.request, sh.identity, sh.err
}

// Identity sources (Identity.Source).
const (
	// SourceJWT: a bearer JWT that aguard verified (--auth-jwks).
	SourceJWT = "jwt"
	// SourceHeader: a header a trusted ingress set (--auth-header).
	SourceHeader = "header"
)

// Identity is the authenticated consumer (input.identity).
type Identity struct {
	// Subject is the JWT's sub, or the trusted header's value.
	Subject string `json:"subject"`
	// Issuer is the JWT's iss; "" for SourceHeader.
	Issuer string `json:"issuer"`
	// Claims are the verified JWT's claims, a JSON object; nil (the policy
	// sees {}) for SourceHeader.
	Claims json.RawMessage `json:"claims"`
	// Source is SourceJWT or SourceHeader.
	Source string `json:"source"`
}

// CallInput is the tool call under decision (input.call).
type CallInput struct {
	// ID is the toolCallId.
	ID string `json:"id"`
	// Name is the toolCallName.
	Name string `json:"name"`
	// Arguments is the parsed argument document, as JSON; nil when the
	// argument text is not JSON (the policy sees null). It must be valid JSON
	// when set: Decide denies a call whose Arguments do not parse, when the
	// policy reads them; a policy that never refers to input.call.arguments
	// gets null and they are not converted at all.
	Arguments json.RawMessage `json:"arguments"`
	// ArgumentsText is the concatenated argument text as streamed.
	ArgumentsText string `json:"argumentsText"`
	// ArgumentsError says why ArgumentsText is not JSON; nil when it is.
	ArgumentsError *string `json:"argumentsError"`
	// ParentMessageID is the parentMessageId of the call, "" if none.
	ParentMessageID string `json:"parentMessageId"`
	// SubagentRunID is the run of the subagent that owns the call, "" if none.
	SubagentRunID string `json:"subagentRunId"`
	// Reopened is true when the call was closed and reopened by a second
	// TOOL_CALL_START with the same id.
	Reopened bool `json:"reopened"`
}

// ToolInput describes the called tool as the application advertised it
// (input.tool).
type ToolInput struct {
	// Advertised is true when the run input's tools list names the tool.
	Advertised bool `json:"advertised"`
	// Frontend is true when the application, not the agent, executes the call.
	Frontend bool `json:"frontend"`
	// Description is the advertised description, "" if none.
	Description string `json:"description"`
	// Parameters is the advertised parameters JSON Schema, as JSON; nil (the
	// policy sees null) when the tool has none.
	Parameters json.RawMessage `json:"parameters"`
}

// SchemaResult is the outcome of validating a call's arguments against its
// tool's parameters schema (input.schema).
type SchemaResult struct {
	// Checked is false when there was no schema to validate against.
	Checked bool `json:"checked"`
	// Valid is true when Checked and the arguments satisfy the schema.
	Valid bool `json:"valid"`
	// Errors lists what failed, one readable message per violation; it also
	// names a schema that does not compile or arguments that are not JSON.
	Errors []string `json:"errors"`
}

// RunInfo identifies the run a call belongs to (input.run).
type RunInfo struct {
	// ThreadID is the threadId of the run input.
	ThreadID string `json:"threadId"`
	// RunID is the runId of the run input.
	RunID string `json:"runId"`
	// ProtocolVersion is the run input's protocolVersion, "" for a legacy
	// (0.x) consumer.
	ProtocolVersion string `json:"protocolVersion"`
	// AdvertisedTools are the names in the run input's tools list.
	AdvertisedTools []string `json:"advertisedTools"`
	// Route names the configured upstream route that served the run.
	Route string `json:"route"`
}

// RequestInfo describes the consumer's HTTP request (input.request).
type RequestInfo struct {
	// Path is the request path.
	Path string `json:"path"`
	// Headers holds the request headers by lower-case name; when a header
	// repeats, the caller decides how its values are joined. Names are
	// lower-cased again when the input is built.
	Headers map[string]string `json:"headers"`
	// RemoteAddr is the consumer's address as the proxy saw it.
	RemoteAddr string `json:"remoteAddr"`
}

// astValue converts in to the OPA value the policy is evaluated against. It
// is called once per decision; the argument and parameter documents are
// decoded straight from their JSON into AST terms, without an intermediate
// map[string]any or a JSON round trip.
//
// Arguments and parameters are converted only when withArgs and withParams
// say the policy may read them; otherwise they are null.
func (in *Input) astValue(withArgs, withParams bool) (ast.Value, error) {
	args, params := ast.NullTerm(), ast.NullTerm()
	var err error
	if withArgs {
		if args, err = rawJSONTerm(in.Call.Arguments); err != nil {
			return nil, fmt.Errorf("call.arguments: %w", err)
		}
	}
	if withParams {
		if params, err = rawJSONTerm(in.Tool.Parameters); err != nil {
			return nil, fmt.Errorf("tool.parameters: %w", err)
		}
	}
	argsErr := ast.NullTerm()
	if in.Call.ArgumentsError != nil {
		argsErr = ast.StringTerm(*in.Call.ArgumentsError)
	}

	run, request, identity, err := in.sharedTerms()
	if err != nil {
		return nil, err
	}

	if in.Phase == PhaseToolCallStart {
		// Nothing of the arguments exists yet.
		call := ast.NewObject(
			item("id", ast.StringTerm(in.Call.ID)),
			item("name", ast.StringTerm(in.Call.Name)),
			item("parentMessageId", ast.StringTerm(in.Call.ParentMessageID)),
			item("subagentRunId", ast.StringTerm(in.Call.SubagentRunID)),
		)
		return ast.NewObject(
			item("phase", ast.StringTerm(in.Phase)),
			item("call", ast.NewTerm(call)),
			item("tool", ast.NewTerm(in.toolTerm(params))),
			item("run", run),
			item("request", request),
			item("identity", identity),
		), nil
	}
	call := ast.NewObject(
		item("id", ast.StringTerm(in.Call.ID)),
		item("name", ast.StringTerm(in.Call.Name)),
		item("arguments", args),
		item("argumentsText", ast.StringTerm(in.Call.ArgumentsText)),
		item("argumentsError", argsErr),
		item("parentMessageId", ast.StringTerm(in.Call.ParentMessageID)),
		item("subagentRunId", ast.StringTerm(in.Call.SubagentRunID)),
		item("reopened", ast.InternedTerm(in.Call.Reopened)),
	)
	schema := ast.NewObject(
		item("checked", ast.InternedTerm(in.Schema.Checked)),
		item("valid", ast.InternedTerm(in.Schema.Valid)),
		item("errors", stringsTerm(in.Schema.Errors)),
	)
	return ast.NewObject(
		item("phase", ast.StringTerm(in.Phase)),
		item("call", ast.NewTerm(call)),
		item("tool", ast.NewTerm(in.toolTerm(params))),
		item("schema", ast.NewTerm(schema)),
		item("run", run),
		item("request", request),
		item("identity", identity),
	), nil
}

// identityTerm is input.identity: null without one.
func (in *Input) identityTerm() (*ast.Term, error) {
	id := in.Identity
	if id == nil {
		return ast.NullTerm(), nil
	}
	claims := ast.NewTerm(ast.NewObject())
	if len(id.Claims) > 0 {
		var err error
		if claims, err = decodeJSONTerm(id.Claims); err != nil {
			return nil, err
		}
		if _, ok := claims.Value.(ast.Object); !ok {
			return nil, fmt.Errorf("the claims are %s, want an object", ast.ValueName(claims.Value))
		}
	}
	return ast.NewTerm(ast.NewObject(
		item("subject", ast.StringTerm(id.Subject)),
		item("issuer", ast.StringTerm(id.Issuer)),
		item("claims", claims),
		item("source", ast.StringTerm(id.Source)),
	)), nil
}

func (in *Input) toolTerm(params *ast.Term) ast.Object {
	return ast.NewObject(
		item("advertised", ast.InternedTerm(in.Tool.Advertised)),
		item("frontend", ast.InternedTerm(in.Tool.Frontend)),
		item("description", ast.StringTerm(in.Tool.Description)),
		item("parameters", params),
	)
}

func (in *Input) runTerm() ast.Object {
	return ast.NewObject(
		item("threadId", ast.StringTerm(in.Run.ThreadID)),
		item("runId", ast.StringTerm(in.Run.RunID)),
		item("protocolVersion", ast.StringTerm(in.Run.ProtocolVersion)),
		item("advertisedTools", stringsTerm(in.Run.AdvertisedTools)),
		item("route", ast.StringTerm(in.Run.Route)),
	)
}

func (in *Input) requestTerm() ast.Object {
	headers := ast.NewObjectWithCapacity(len(in.Request.Headers))
	for k, v := range in.Request.Headers {
		headers.Insert(ast.StringTerm(strings.ToLower(k)), ast.StringTerm(v))
	}
	return ast.NewObject(
		item("path", ast.StringTerm(in.Request.Path)),
		item("headers", ast.NewTerm(headers)),
		item("remoteAddr", ast.StringTerm(in.Request.RemoteAddr)),
	)
}

func item(key string, value *ast.Term) [2]*ast.Term {
	return [2]*ast.Term{ast.StringTerm(key), value}
}

// stringsTerm is an array of strings; nil is the empty array.
func stringsTerm(ss []string) *ast.Term {
	terms := make([]*ast.Term, len(ss))
	for i, s := range ss {
		terms[i] = ast.StringTerm(s)
	}
	return ast.ArrayTerm(terms...)
}

// rawJSONTerm decodes a JSON document into a term; empty input is null.
func rawJSONTerm(raw json.RawMessage) (*ast.Term, error) {
	if len(raw) == 0 {
		return ast.NullTerm(), nil
	}
	return decodeJSONTerm(raw)
}

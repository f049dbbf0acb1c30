package policy

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aguard/aguard/internal/logging"
	"github.com/open-policy-agent/opa/v1/ast"
	opametrics "github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/server"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/topdown/print"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"
)

// Phases: when a call is put to the policy (Input.Phase).
const (
	// PhaseToolCallStart: the call has started; nothing of its arguments
	// is known. The policy says how the consumer sees it: ActionStream,
	// ActionHold or ActionHide.
	PhaseToolCallStart = "tool_call_start"
	// PhaseToolCallEnd: the call's arguments are complete.
	PhaseToolCallEnd = "tool_call_end"
	// PhaseRunFinished: the run finished with the call, to a tool the
	// input did not advertise, unanswered.
	PhaseRunFinished = "run_finished"
)

// Actions a decision can carry at PhaseToolCallEnd and PhaseRunFinished.
const (
	// ActionAllow lets the call go ahead.
	ActionAllow = "allow"
	// ActionDeny refuses the call; Decide also returns it whenever the
	// policy could not decide (fail closed).
	ActionDeny = "deny"
	// ActionRequireApproval holds the call until a reviewer approves it.
	ActionRequireApproval = "require_approval"
)

// Actions a decision can carry at PhaseToolCallStart (README, "Hold and
// hide"). An undefined decision, or one without an action, is ActionStream;
// a policy that answers allow there streams the call, and one that answers
// deny or require_approval holds it (it objects to the call before seeing
// its arguments: the consumer sees nothing of it until it is judged).
const (
	// ActionStream: the consumer sees the call as the agent streams it.
	ActionStream = "stream"
	// ActionHold: the consumer sees nothing of the call until it is
	// judged; a denied call only as its denial. Decide also returns it
	// whenever the policy could not decide at this phase (fail closed).
	ActionHold = "hold"
	// ActionHide: the consumer never sees the call (a call the agent
	// executes itself; for a frontend call aguard holds instead).
	ActionHide = "hide"
)

// defaultTimeout bounds one evaluation when Options.Timeout is zero.
const defaultTimeout = 100 * time.Millisecond

// Options configures an Engine.
type Options struct {
	// Dir is the folder of .rego and data (.json, .yaml, .yml) files, read
	// recursively; data files are placed at the path of their folder, as
	// `opa eval -d Dir` does. *_test.rego files are left out. A path ending
	// in .tar.gz or .tgz is a bundle file, read as OPA reads one. "" selects
	// the default policy set embedded in the binary (package policies).
	Dir string
	// OPAConfig is an OPA configuration (YAML or JSON, OPA's own format:
	// services, bundles, keys, decision_logs, status, labels). When set, the
	// policy comes from the bundles it configures, run by OPA's plugin
	// manager, and Dir must be "". See New.
	OPAConfig []byte
	// Capabilities are the built-in functions policies may call, in OPA's
	// capabilities format; a policy calling another one does not load. nil
	// means DefaultCapabilities: nothing that reaches outside the process.
	Capabilities *ast.Capabilities
	// Timeout bounds each evaluation; 0 means 100ms. An evaluation that runs
	// longer is cancelled and the call denied.
	Timeout time.Duration
	// Logger receives one record per decision (decisionId, phase, call id,
	// tool name, action, reason, revision, duration) and the reload events;
	// nil discards them. The policy's print() output goes to it at debug level.
	Logger *slog.Logger
	// LogArguments adds the call's argument text to the decision records.
	// Arguments are model output and may hold anything the conversation
	// held; they are not logged by default.
	LogArguments bool
	// Registerer, if set, gets the decision metrics:
	// aguard_policy_decisions_total{action,phase} and
	// aguard_policy_evaluation_seconds (README, "Metrics").
	Registerer prometheus.Registerer
}

// Decision is the outcome of evaluating the policy for one tool call.
type Decision struct {
	// Action is ActionAllow, ActionDeny or ActionRequireApproval.
	Action string
	// Reason is the policy's explanation, meant for the consumer and the
	// audit trail. For a fail-closed deny it says what went wrong in general
	// terms; Err has the details.
	Reason string
	// ApprovalTimeout is how long a reviewer has, from the policy's
	// "approvalTimeout" (a Go duration string such as "10m"); 0 means the
	// proxy's default.
	ApprovalTimeout time.Duration
	// DecisionID identifies the decision in logs, events and the ledger. It
	// is always set: 32 hex digits, a millisecond timestamp followed by 80
	// random bits, so that ids sort roughly by time.
	DecisionID string
	// Revision names the policy set that decided (see Engine.Status); ""
	// only when no policy was loaded.
	Revision string
	// Err is set when the decision is a fail-closed deny: the evaluation
	// failed or timed out, the policy's output had the wrong shape, the input
	// could not be converted, or no policy was loaded.
	Err error
}

// Engine evaluates the policy set for tool calls. It is safe for concurrent
// use: Decide runs against an immutable prepared query that Reload replaces
// atomically, so in-flight decisions finish on the policy they started with.
type Engine struct {
	src     source
	dir     string
	caps    *ast.Capabilities
	timeout time.Duration
	log     *slog.Logger
	logArgs bool
	schemas *schemaCache
	met     *metrics
	// inspecting holds the JSON values of the arguments being inspected
	// (Reserve); nil in an Engine not made by New, which does not bound them.
	inspecting *semaphore.Weighted

	current atomic.Pointer[prepared]
	// opa runs OPA's plugin manager when the policy comes from bundles; nil
	// for a folder, a bundle file or the embedded set.
	opa *opaRuntime
	// failures counts failed loads: folder reloads, bundle downloads and
	// activations.
	failures atomic.Uint64
	// looks counts the times Watch compared the folder with the last load,
	// whether or not it changed: tests wait on it to see that a change was
	// looked at and left alone.
	looks atomic.Uint64

	reloadMu sync.Mutex // serialises loads

	mu       sync.Mutex // guards the fields below
	lastErr  error      // the last load failure, nil after a good load
	lastSeen string     // content hash (or read error) of the last load attempt
}

// prepared is a compiled policy set, ready to evaluate.
type prepared struct {
	query    rego.PreparedEvalQuery
	revision string
	// bundles are the bundles the policy came from, with their revisions,
	// for the decision log; nil for a folder.
	bundles map[string]server.BundleInfo
	// readsArgs and readsParams: whether the policy may read
	// input.call.arguments and input.tool.parameters; when it cannot,
	// the input leaves them null and is cheap to build (see reads).
	readsArgs, readsParams bool
	// memo keeps the revision's recent decisions by the input values the
	// policy reads; nil when its output may depend on anything else
	// (memo.go).
	memo *memo
}

// New loads, compiles and prepares the policy set of opt.Dir (or the
// embedded one). A policy that does not parse or compile, that calls a
// built-in function the capabilities leave out, or that does not define
// data.aguard.decision, is an error naming the file and line; no Engine is
// returned then.
//
// With opt.OPAConfig, New starts OPA's plugin manager instead and returns
// without waiting for a bundle: until the first one is active, Ready
// reports false and Decide denies every call. Close stops the plugins.
func New(ctx context.Context, opt Options) (*Engine, error) {
	if opt.Timeout < 0 {
		return nil, fmt.Errorf("policy: negative timeout %v", opt.Timeout)
	}
	if len(opt.OPAConfig) > 0 && opt.Dir != "" {
		return nil, errors.New("policy: a policy folder and an OPA configuration exclude each other: bundles replace the folder")
	}
	e := &Engine{
		src:     newSource(opt.Dir),
		dir:     opt.Dir,
		caps:    opt.Capabilities,
		timeout: opt.Timeout,
		log:     opt.Logger,
		logArgs: opt.LogArguments,
		schemas: newSchemaCache(schemaCacheSize),

		inspecting: semaphore.NewWeighted(MaxInspectedValues),
	}
	if e.timeout == 0 {
		e.timeout = defaultTimeout
	}
	met, err := newMetrics(opt.Registerer)
	if err != nil {
		return nil, err
	}
	e.met = met
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.caps == nil {
		e.caps = DefaultCapabilities()
	}
	if len(opt.OPAConfig) > 0 {
		if err := e.startOPA(ctx, opt.OPAConfig); err != nil {
			return nil, err
		}
		return e, nil
	}
	if err := e.Reload(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// prepare compiles snap into a query ready for evaluation. Built-in errors
// are raised rather than made undefined (rego.StrictBuiltinErrors), so that
// a rule that fails on a bad regular expression or a type error denies
// instead of silently not firing.
func (e *Engine) prepare(ctx context.Context, snap *snapshot) (*prepared, error) {
	p, err := parse(snap)
	if err != nil {
		return nil, err
	}
	c, err := compile(p, e.caps)
	if err != nil {
		return nil, err
	}
	rev := snap.revision()
	if p.revision != "" {
		rev = p.revision
	}
	pq, err := rego.New(
		rego.Query(decisionRef.String()),
		rego.Compiler(c),
		rego.Store(inmem.NewFromObject(p.data)),
		rego.StrictBuiltinErrors(true),
		rego.EnablePrintStatements(true),
		rego.PrintHook(printLogger{log: e.log, revision: rev}),
	).PrepareForEval(ctx)
	if err != nil {
		return nil, err
	}
	return &prepared{query: pq, revision: rev,
		readsArgs: reads(c, "call", "arguments"), readsParams: reads(c, "tool", "parameters"),
		memo: newMemo(c)}, nil
}

// Decide evaluates data.aguard.decision for in. It never fails: when the
// policy cannot decide — no policy loaded, an evaluation error, a timeout, an
// output that is not {"action","reason","approvalTimeout"} with a known
// action — it denies and sets Err (fail closed). Every decision is logged,
// and, with an OPA configuration that enables decision logs, sent to OPA's
// decision log under its DecisionID.
//
// When ctx carries a recording span (the tool call's, README "Tracing"),
// the evaluation is a child span of it.
func (e *Engine) Decide(ctx context.Context, in *Input) Decision {
	start := time.Now()
	ctx, span := startSpan(ctx, in)
	var d Decision
	if e.opa != nil {
		d = e.opa.decide(ctx, e, in)
	} else {
		d = e.decide(ctx, in, nil)
	}
	took := time.Since(start)
	e.met.observe(in, &d, took)
	endSpan(span, &d)
	e.logDecision(ctx, in, &d, took)
	return d
}

// evalRecord carries what a decision made from bundles needs beyond the
// Decision: the storage transaction to evaluate in, and for the decision
// log the input and the policy's output.
type evalRecord struct {
	txn     storage.Transaction // evaluate in it (bundles share OPA's store)
	full    bool                // build the whole input, for the decision log
	input   ast.Value           // out: the input evaluated, nil if none was built
	result  any                 // out: the policy's output, nil if none
	bundles map[string]server.BundleInfo
}

func (e *Engine) decide(ctx context.Context, in *Input, rec *evalRecord) Decision {
	d := e.evaluate(ctx, in, rec)
	if in != nil && in.Phase == PhaseToolCallStart && d.Err != nil {
		// Not knowing how the consumer may see a call, show it nothing
		// until it is judged with its arguments.
		d.Action = ActionHold
	}
	return d
}

func (e *Engine) evaluate(ctx context.Context, in *Input, rec *evalRecord) Decision {
	d := Decision{DecisionID: newDecisionID()}
	p := e.current.Load()
	if p == nil {
		return failClosed(d, "no policy is loaded", errors.New("policy: no policy is loaded"))
	}
	d.Revision = p.revision
	if in == nil {
		return failClosed(d, "policy input is missing", errors.New("policy: nil input"))
	}
	withArgs, withParams := p.readsArgs, p.readsParams
	var txn storage.Transaction
	if rec != nil {
		rec.bundles, txn = p.bundles, rec.txn
		withArgs, withParams = withArgs || rec.full, withParams || rec.full
	}
	v, err := in.astValue(withArgs, withParams)
	if err != nil {
		return failClosed(d, "policy input is invalid",
			fmt.Errorf("policy: build input for call %q (tool %q): %w", in.Call.ID, in.Call.Name, err))
	}
	if rec != nil {
		rec.input = v
	}

	if err := ctx.Err(); err != nil {
		return failClosed(d, "policy evaluation was cancelled",
			fmt.Errorf("policy: call %q (tool %q) not evaluated: %w", in.Call.ID, in.Call.Name, context.Cause(ctx)))
	}
	m := p.memo
	if rec != nil {
		m = nil // decisions from bundles are evaluated every time (memo.go)
	}
	key, kept, hit := m.lookup(in.Phase, v)
	if hit {
		d.Action, d.Reason, d.ApprovalTimeout = kept.action, kept.reason, kept.timeout
		return d
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	rs, err := eval(ctx, &p.query, v, txn)
	ctxErr := ctx.Err()
	if cause := context.Cause(ctx); ctxErr != nil && cause != ctxErr {
		ctxErr = fmt.Errorf("%w: %w", ctxErr, cause) // why the caller cancelled
	}
	cancel()
	if err != nil {
		switch {
		case errors.Is(ctxErr, context.DeadlineExceeded):
			return failClosed(d, "policy evaluation timed out",
				fmt.Errorf("policy: evaluate %v for call %q (tool %q) at revision %s: no decision within %v: %w: %w",
					decisionRef, in.Call.ID, in.Call.Name, p.revision, e.timeout, context.DeadlineExceeded, err))
		case ctxErr != nil:
			return failClosed(d, "policy evaluation was cancelled",
				fmt.Errorf("policy: evaluate %v for call %q (tool %q) at revision %s: %w: %w",
					decisionRef, in.Call.ID, in.Call.Name, p.revision, ctxErr, err))
		}
		return failClosed(d, "policy evaluation failed",
			fmt.Errorf("policy: evaluate %v for call %q (tool %q) at revision %s: %w",
				decisionRef, in.Call.ID, in.Call.Name, p.revision, err))
	}
	if rec != nil && len(rs) == 1 && len(rs[0].Expressions) > 0 {
		rec.result = rs[0].Expressions[0].Value
	}
	if err := d.fromResult(rs, in.Phase); err != nil {
		return failClosed(d, "policy returned an invalid decision",
			fmt.Errorf("policy: %v for call %q (tool %q) at revision %s: %w",
				decisionRef, in.Call.ID, in.Call.Name, p.revision, err))
	}
	m.put(key, memoized{action: d.Action, reason: d.Reason, timeout: d.ApprovalTimeout})
	return d
}

// eval runs the prepared query. A panic inside OPA is turned into an error:
// the input is model output, and OPA has panicked on some of it (a comparison
// with a number such as 1e9999999 does in v1.22).
//
// The evaluation stops when ctx is done, as PreparedEvalQuery.Eval makes
// it; Eval alone would start a goroutine per evaluation to watch ctx, where
// context.AfterFunc registers the cancellation with ctx itself. OPA's
// per-evaluation metrics are not collected: nothing reads them.
func eval(ctx context.Context, q *rego.PreparedEvalQuery, input ast.Value, txn storage.Transaction) (rs rego.ResultSet, err error) {
	defer func() {
		if r := recover(); r != nil {
			rs, err = nil, fmt.Errorf("policy engine panic: %v", r)
		}
	}()
	c := topdown.NewCancel()
	defer context.AfterFunc(ctx, c.Cancel)()
	if txn != nil {
		return q.Eval(ctx, rego.EvalParsedInput(input), rego.EvalExternalCancel(c), rego.EvalMetrics(opametrics.NoOp()), rego.EvalTransaction(txn))
	}
	return q.Eval(ctx, rego.EvalParsedInput(input), rego.EvalExternalCancel(c), rego.EvalMetrics(opametrics.NoOp()))
}

// fromResult reads the policy's output at phase into d.
func (d *Decision) fromResult(rs rego.ResultSet, phase string) error {
	if phase == PhaseToolCallStart {
		return d.fromStartResult(rs)
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return errors.New("the decision is undefined (add a default decision)")
	}
	if len(rs) > 1 {
		return fmt.Errorf("the query has %d results, want one", len(rs))
	}
	out, ok := rs[0].Expressions[0].Value.(map[string]any)
	if !ok {
		return fmt.Errorf("the decision is %s, want an object", typeName(rs[0].Expressions[0].Value))
	}
	action, ok := out["action"].(string)
	switch {
	case !ok:
		return fmt.Errorf("decision.action is %s, want a string", typeName(out["action"]))
	case action != ActionAllow && action != ActionDeny && action != ActionRequireApproval:
		return fmt.Errorf("decision.action is %q, want %q, %q or %q", action, ActionAllow, ActionDeny, ActionRequireApproval)
	}
	reason := ""
	if r, present := out["reason"]; present {
		if reason, ok = r.(string); !ok {
			return fmt.Errorf("decision.reason is %s, want a string", typeName(r))
		}
	}
	var timeout time.Duration
	if t, present := out["approvalTimeout"]; present {
		s, ok := t.(string)
		if !ok {
			return fmt.Errorf("decision.approvalTimeout is %s, want a duration string such as \"10m\"", typeName(t))
		}
		if s != "" {
			var err error
			if timeout, err = time.ParseDuration(s); err != nil {
				return fmt.Errorf("decision.approvalTimeout: %w", err)
			}
			if timeout < 0 {
				return fmt.Errorf("decision.approvalTimeout %q is negative", s)
			}
		}
	}
	d.Action, d.Reason, d.ApprovalTimeout = action, reason, timeout
	return nil
}

// fromStartResult reads the policy's output at PhaseToolCallStart into d:
// undefined, or without an action, is ActionStream; allow streams; deny and
// require_approval hold.
func (d *Decision) fromStartResult(rs rego.ResultSet) error {
	d.Action, d.Reason = ActionStream, ""
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return nil
	}
	if len(rs) > 1 {
		return fmt.Errorf("the query has %d results, want one", len(rs))
	}
	out, ok := rs[0].Expressions[0].Value.(map[string]any)
	if !ok {
		return fmt.Errorf("the decision is %s, want an object", typeName(rs[0].Expressions[0].Value))
	}
	if r, present := out["reason"]; present {
		if d.Reason, ok = r.(string); !ok {
			return fmt.Errorf("decision.reason is %s, want a string", typeName(r))
		}
	}
	a, present := out["action"]
	if !present {
		return nil
	}
	action, ok := a.(string)
	switch {
	case !ok:
		return fmt.Errorf("decision.action is %s, want a string", typeName(a))
	case action == ActionStream || action == ActionHold || action == ActionHide:
		d.Action = action
	case action == ActionAllow:
		d.Action = ActionStream
	case action == ActionDeny || action == ActionRequireApproval:
		d.Action = ActionHold
	default:
		return fmt.Errorf("decision.action at %s is %q, want %q, %q or %q", PhaseToolCallStart, action, ActionStream, ActionHold, ActionHide)
	}
	return nil
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null or missing"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	default:
		return fmt.Sprintf("a %T", v)
	}
}

func failClosed(d Decision, reason string, err error) Decision {
	d.Action, d.Reason, d.ApprovalTimeout, d.Err = ActionDeny, reason, 0, err
	return d
}

// newDecisionID returns 16 bytes in hex: 48 bits of Unix milliseconds, then
// 80 random bits. The bits come from math/rand/v2's generator (ChaCha8,
// seeded by the operating system for each thread): a decision id names a
// decision, it guards nothing, and crypto/rand's system call cost a
// decision several microseconds.
func newDecisionID() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixMilli())<<16|uint64(rand.Uint32()>>16))
	binary.BigEndian.PutUint64(b[8:], rand.Uint64())
	return hex.EncodeToString(b[:])
}

func (e *Engine) logDecision(ctx context.Context, in *Input, d *Decision, took time.Duration) {
	level := slog.LevelInfo
	if d.Err != nil {
		level = slog.LevelError
	}
	if !e.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 14)
	attrs = append(attrs, slog.String("decisionId", d.DecisionID))
	if in != nil {
		attrs = append(attrs,
			slog.String("phase", in.Phase),
			slog.String("toolCallId", in.Call.ID),
			slog.String("toolCallName", in.Call.Name),
			slog.String("threadId", in.Run.ThreadID),
			slog.String("runId", in.Run.RunID),
		)
	}
	attrs = append(attrs,
		slog.String("action", d.Action),
		slog.String("reason", d.Reason),
		slog.String("revision", d.Revision),
		slog.Duration("duration", took),
	)
	if d.ApprovalTimeout > 0 {
		attrs = append(attrs, slog.Duration("approvalTimeout", d.ApprovalTimeout))
	}
	if d.Err != nil {
		attrs = append(attrs, slog.String("error", d.Err.Error()))
	}
	if e.logArgs && in != nil {
		attrs = append(attrs, slog.String("arguments", in.Call.ArgumentsText))
	}
	logging.Log(ctx, e.log, level, "policy decision", attrs...)
}

// printLogger sends the output of print() calls in a policy to the log.
type printLogger struct {
	log      *slog.Logger
	revision string
}

func (p printLogger) Print(ctx print.Context, msg string) error {
	attrs := []slog.Attr{slog.String("revision", p.revision), slog.String("output", msg)}
	if ctx.Location != nil {
		attrs = append(attrs, slog.String("location", ctx.Location.String()))
	}
	p.log.LogAttrs(ctx.Context, slog.LevelDebug, "policy print", attrs...)
	return nil
}

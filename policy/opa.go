package policy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/plugins"
	"github.com/open-policy-agent/opa/v1/plugins/bundle"
	"github.com/open-policy-agent/opa/v1/plugins/discovery"
	"github.com/open-policy-agent/opa/v1/plugins/logs"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/server"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/util"

	bundleapi "github.com/open-policy-agent/opa/v1/bundle"
)

// decisionPath is the decision's path in OPA's decision log, as OPA's REST
// API would name it (POST /v1/data/aguard/decision).
const decisionPath = "aguard/decision"

// opaRuntime runs OPA's plugin manager for an Engine whose policy comes from
// bundles (Options.OPAConfig): the bundle plugin downloads, verifies and
// activates bundles, the decision-log plugin batches, masks and uploads
// decisions, the status plugin reports. aguard adds two things: the gate, a
// storage.Store in front of OPA's that refuses to activate a bundle aguard
// cannot serve (see gate), and the swap of the Engine's prepared query at
// the moment OPA's store commits a bundle.
type opaRuntime struct {
	manager *plugins.Manager
	store   storage.Store // OPA's store, behind the gate
	gate    *gate
	logs    *logs.Plugin // nil when decision_logs is not configured

	mu   sync.Mutex
	errs map[string]error // the last failure of each bundle, nil once it succeeds
}

// defaultDecisionLogBuffer bounds OPA's decision-log buffer when the
// configuration does not: OPA's own default for its (default) size buffer is
// unlimited, and a decision-log service that stays down must not grow
// aguard's memory without bound.
const defaultDecisionLogBuffer = 64 << 20

// boundDecisionLogs returns raw with decision_logs.reporting.
// buffer_size_limit_bytes set to defaultDecisionLogBuffer when decision logs
// use OPA's size buffer without a limit of their own.
func boundDecisionLogs(raw []byte) ([]byte, error) {
	var cfg map[string]any
	if err := util.Unmarshal(raw, &cfg); err != nil {
		return nil, err
	}
	dl, ok := cfg["decision_logs"].(map[string]any)
	if !ok {
		return raw, nil
	}
	rep, _ := dl["reporting"].(map[string]any)
	if rep == nil {
		rep = map[string]any{}
		dl["reporting"] = rep
	}
	if bt, _ := rep["buffer_type"].(string); bt == "event" || rep["buffer_size_limit_bytes"] != nil {
		return raw, nil
	}
	rep["buffer_size_limit_bytes"] = defaultDecisionLogBuffer
	return json.Marshal(cfg)
}

// startOPA starts OPA's plugin manager for raw, an OPA configuration.
func (e *Engine) startOPA(ctx context.Context, raw []byte) error {
	raw, err := boundDecisionLogs(raw)
	if err != nil {
		return fmt.Errorf("policy: OPA configuration: %w", err)
	}
	store := inmem.New()
	o := &opaRuntime{store: store, errs: map[string]error{}}
	o.gate = &gate{Store: store, engine: e, pending: map[storage.Transaction]*storage.Context{}, ready: map[storage.Transaction]*prepared{}}
	olog := opaLogger{log: e.log}
	m, err := plugins.New(raw, newInstanceID(), o.gate,
		plugins.Logger(olog),
		plugins.ConsoleLogger(olog.WithFields(map[string]any{"opa": "console"})),
		plugins.WithParserOptions(ast.ParserOptions{ProcessAnnotation: true, RegoVersion: ast.RegoV1}),
		plugins.EnablePrintStatements(true),
		plugins.PrintHook(printLogger{log: e.log, revision: "bundle"}),
	)
	if err != nil {
		return fmt.Errorf("policy: OPA configuration: %w", err)
	}
	for _, w := range m.Config.Warnings {
		e.log.LogAttrs(ctx, slog.LevelWarn, "OPA configuration warning", slog.String("warning", w))
	}
	if len(m.Config.Bundles) == 0 && len(m.Config.Bundle) == 0 && len(m.Config.Discovery) == 0 {
		return errors.New("policy: the OPA configuration has no bundles: with an OPA configuration, policies come from bundles (or use a policy folder without one)")
	}
	o.manager = m
	e.opa = o
	// Without a discovery service, discovery.New registers the bundle,
	// decision-log and status plugins the configuration enables, as
	// `opa run` and OPA's sdk package do.
	d, err := discovery.New(m)
	if err != nil {
		return fmt.Errorf("policy: OPA configuration: %w", err)
	}
	m.Register(discovery.Name, d)
	m.RegisterCompilerTrigger(o.onCommit)
	if bp := bundle.Lookup(m); bp != nil {
		bp.Register("aguard", func(s bundle.Status) { o.onBundleStatus(e, s) })
	}
	// The plugins outlive ctx (a signal context, cancelled when draining
	// starts): decisions made while draining still reach the decision log;
	// Close stops them.
	if err := m.Start(context.WithoutCancel(ctx)); err != nil {
		m.Stop(ctx)
		return fmt.Errorf("policy: start OPA plugins: %w", err)
	}
	o.logs = logs.Lookup(m)
	e.log.LogAttrs(ctx, slog.LevelInfo, "OPA plugins started", slog.Any("plugins", m.Plugins()),
		slog.Bool("decisionLogs", o.logs != nil))
	return nil
}

// decide evaluates in a read transaction of OPA's store, opened before the
// prepared query is picked: a bundle commits (data and the query swap)
// under the store's write lock, so a decision sees one bundle whole.
func (o *opaRuntime) decide(ctx context.Context, e *Engine, in *Input) Decision {
	txn, err := o.store.NewTransaction(ctx)
	if err != nil {
		d := failClosed(Decision{DecisionID: newDecisionID(), Revision: e.servingRevision()}, "policy evaluation failed",
			fmt.Errorf("policy: open OPA's store: %w", err))
		if in != nil && in.Phase == PhaseToolCallStart {
			d.Action = ActionHold
		}
		o.log(ctx, e, in, &d, &evalRecord{})
		return d
	}
	defer o.store.Abort(ctx, txn)
	rec := evalRecord{txn: txn, full: o.logs != nil}
	d := e.decide(ctx, in, &rec)
	o.log(ctx, e, in, &d, &rec)
	return d
}

// log sends one decision to OPA's decision log, which masks it with
// data.system.log.mask (and drops it with data.system.log.drop) as OPA does,
// and buffers and uploads it under OPA's own limits.
func (o *opaRuntime) log(ctx context.Context, e *Engine, in *Input, d *Decision, rec *evalRecord) {
	if o.logs == nil {
		return
	}
	info := &server.Info{
		DecisionID: d.DecisionID,
		Path:       decisionPath,
		Timestamp:  time.Now().UTC(),
		Bundles:    rec.bundles,
		Txn:        rec.txn,
		InputAST:   rec.input,
	}
	if in != nil {
		info.RemoteAddr = in.Request.RemoteAddr
	}
	if rec.input != nil {
		// Masking works on the Go form of the input; it is made from the
		// value the policy saw, arguments included.
		input, err := ast.JSON(rec.input)
		if err != nil {
			e.log.LogAttrs(ctx, slog.LevelError, "decision log failed",
				slog.String("decisionId", d.DecisionID), slog.String("error", err.Error()))
			return
		}
		info.Input = &input
	}
	if d.Err != nil {
		info.Error = &logError{Code: "fail_closed", Message: d.Reason + ": " + d.Err.Error()}
	} else {
		result := rec.result
		info.Results = &result
	}
	if err := o.logs.Log(ctx, info); err != nil {
		e.log.LogAttrs(ctx, slog.LevelError, "decision log failed",
			slog.String("decisionId", d.DecisionID), slog.String("error", err.Error()))
	}
}

// logError is how a fail-closed decision's error appears in OPA's decision
// log: {"code":"fail_closed","message":…}; the call was denied.
type logError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *logError) Error() string { return e.Message }

// onCommit runs inside OPA's store commit, under its write lock, once the
// manager has taken the new compiler: it swaps in the query the gate
// prepared for this transaction.
func (o *opaRuntime) onCommit(txn storage.Transaction) {
	p := o.gate.take(txn)
	if p == nil {
		return // nothing to serve yet (the manager's start), or not a bundle
	}
	e := o.gate.engine
	previous := e.servingRevision()
	e.current.Store(p)
	e.log.LogAttrs(context.Background(), slog.LevelInfo, "policy loaded",
		slog.String("bundles", bundleNames(p.bundles)), slog.String("revision", p.revision), slog.String("previous", previous))
}

// onBundleStatus follows each download and activation of a bundle: a
// failure is logged, counted and kept for Status until the bundle succeeds.
func (o *opaRuntime) onBundleStatus(e *Engine, s bundle.Status) {
	var err error
	if s.Code != "" {
		msg := s.Message
		for _, se := range s.Errors {
			msg += "; " + se.Error()
		}
		err = fmt.Errorf("policy: bundle %s: %s: %s", s.Name, s.Code, msg)
	}
	o.mu.Lock()
	o.errs[s.Name] = err
	var all []error
	for _, name := range slices.Sorted(maps.Keys(o.errs)) {
		if o.errs[name] != nil {
			all = append(all, o.errs[name])
		}
	}
	o.mu.Unlock()
	e.mu.Lock()
	e.lastErr = errors.Join(all...)
	e.mu.Unlock()
	if err != nil {
		e.failures.Add(1)
		e.log.LogAttrs(context.Background(), slog.LevelError, "policy load failed",
			slog.String("bundle", s.Name), slog.String("serving", e.servingRevision()), slog.String("error", err.Error()))
	}
}

func (o *opaRuntime) stop(ctx context.Context) {
	o.manager.Stop(ctx)
}

// prepareBundles checks and prepares the policy OPA is about to activate:
// compiler c, compiled by OPA from every bundle in txn. It refuses a policy
// that needs a built-in function the capabilities leave out, or that does not
// define data.aguard.decision. The compiler keeps the capabilities, so that
// allow_net applies when it evaluates.
func (e *Engine) prepareBundles(ctx context.Context, c *ast.Compiler, store storage.Store, txn storage.Transaction) (*prepared, error) {
	if err := checkCapabilities(c, e.caps); err != nil {
		return nil, err
	}
	if len(c.GetRulesExact(decisionRef)) == 0 {
		return nil, fmt.Errorf("no rule defines %v (a rule named decision in package aguard)", decisionRef)
	}
	if c.Capabilities() != e.caps {
		c.WithCapabilities(e.caps) // not yet shared: OPA publishes it when the commit goes through
	}
	bundles, err := readBundles(ctx, store, txn)
	if err != nil {
		return nil, err
	}
	rev := bundleRevision(bundles)
	pq, err := rego.New(
		rego.Query(decisionRef.String()),
		rego.Compiler(c),
		rego.Store(store),
		rego.Transaction(txn),
		rego.StrictBuiltinErrors(true),
		rego.EnablePrintStatements(true),
		rego.PrintHook(printLogger{log: e.log, revision: rev}),
	).PrepareForEval(ctx)
	if err != nil {
		return nil, err
	}
	return &prepared{query: pq, revision: rev, bundles: bundles,
		readsArgs: reads(c, "call", "arguments"), readsParams: reads(c, "tool", "parameters")}, nil
}

// readBundles reads the names and manifest revisions of the bundles in store.
func readBundles(ctx context.Context, store storage.Store, txn storage.Transaction) (map[string]server.BundleInfo, error) {
	names, err := bundleapi.ReadBundleNamesFromStore(ctx, store, txn)
	if err != nil && !storage.IsNotFound(err) {
		return nil, fmt.Errorf("read bundle names: %w", err)
	}
	out := make(map[string]server.BundleInfo, len(names))
	for _, name := range names {
		rev, err := bundleapi.ReadBundleRevisionFromStore(ctx, store, txn, name)
		if err != nil && !storage.IsNotFound(err) {
			return nil, fmt.Errorf("read revision of bundle %s: %w", name, err)
		}
		out[name] = server.BundleInfo{Revision: rev}
	}
	return out, nil
}

// bundleRevision names the policy a set of bundles makes: the manifest
// revision of a single bundle, or name:revision of each, sorted by name.
func bundleRevision(bundles map[string]server.BundleInfo) string {
	if len(bundles) == 1 {
		for name, b := range bundles {
			if b.Revision != "" {
				return b.Revision
			}
			return name + ":"
		}
	}
	parts := make([]string, 0, len(bundles))
	for _, name := range slices.Sorted(maps.Keys(bundles)) {
		parts = append(parts, name+":"+bundles[name].Revision)
	}
	return strings.Join(parts, ",")
}

func bundleNames(bundles map[string]server.BundleInfo) string {
	return strings.Join(slices.Sorted(maps.Keys(bundles)), ",")
}

// newInstanceID names this process to OPA's services (labels.id in status
// reports and decision logs), as a random UUID like OPA's own.
func newInstanceID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

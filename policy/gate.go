package policy

import (
	"context"
	"fmt"
	"sync"

	"github.com/open-policy-agent/opa/v1/plugins"
	"github.com/open-policy-agent/opa/v1/storage"

	bundleapi "github.com/open-policy-agent/opa/v1/bundle"
)

// gate is the storage.Store OPA's plugin manager writes bundles to: OPA's
// own in-memory store, with a check before each commit. OPA's bundle plugin
// activates a bundle in one write transaction and puts the compiler it built
// on the transaction's context before committing; the gate prepares aguard's
// query from that compiler and, when the policy cannot be served — it calls
// a built-in function the capabilities leave out, or it has no
// data.aguard.decision — aborts the transaction and fails the commit. OPA
// then handles it as any bundle that fails to activate: the last good bundle
// stays active (its policy, its data, and the compiler decision-log masking
// runs on), the failure is in OPA's status and logs, and the bundle is
// downloaded again at the next poll.
//
// Everything but NewTransaction, Commit and Abort is OPA's store itself.
type gate struct {
	storage.Store
	engine *Engine

	mu      sync.Mutex
	pending map[storage.Transaction]*storage.Context // open write transactions
	ready   map[storage.Transaction]*prepared        // committing, for onCommit
}

// NewTransaction opens a transaction of OPA's store, remembering the context
// of a write transaction: the bundle plugin puts its compiler there.
func (g *gate) NewTransaction(ctx context.Context, params ...storage.TransactionParams) (storage.Transaction, error) {
	txn, err := g.Store.NewTransaction(ctx, params...)
	if err == nil && len(params) > 0 && params[0].Write && params[0].Context != nil {
		g.mu.Lock()
		g.pending[txn] = params[0].Context
		g.mu.Unlock()
	}
	return txn, err
}

// Commit checks the policy a write transaction activates before letting it
// through; see gate.
func (g *gate) Commit(ctx context.Context, txn storage.Transaction) error {
	g.mu.Lock()
	tctx := g.pending[txn]
	delete(g.pending, txn)
	g.mu.Unlock()
	c := plugins.GetCompilerOnContext(tctx)
	if c == nil {
		return g.Store.Commit(ctx, txn)
	}
	names, err := bundleapi.ReadBundleNamesFromStore(ctx, g.Store, txn)
	if err != nil && !storage.IsNotFound(err) {
		g.Store.Abort(ctx, txn)
		return fmt.Errorf("aguard: read bundle names: %w", err)
	}
	if len(names) == 0 && len(c.Modules) == 0 {
		return g.Store.Commit(ctx, txn) // the manager's start: nothing to serve yet
	}
	p, err := g.engine.prepareBundles(ctx, c, g.Store, txn)
	if err != nil {
		g.Store.Abort(ctx, txn)
		return fmt.Errorf("aguard refuses the policy: %w", err)
	}
	g.mu.Lock()
	g.ready[txn] = p
	g.mu.Unlock()
	if err := g.Store.Commit(ctx, txn); err != nil {
		g.take(txn)
		return err
	}
	return nil
}

// Abort aborts a transaction of OPA's store.
func (g *gate) Abort(ctx context.Context, txn storage.Transaction) {
	g.mu.Lock()
	delete(g.pending, txn)
	g.mu.Unlock()
	g.Store.Abort(ctx, txn)
}

// MakeDir lets OPA's store make folders its own way, as it would without
// the gate.
func (g *gate) MakeDir(ctx context.Context, txn storage.Transaction, path storage.Path) error {
	return storage.MakeDir(ctx, g.Store, txn, path)
}

// take returns and forgets the query prepared for txn.
func (g *gate) take(txn storage.Transaction) *prepared {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.ready[txn]
	delete(g.ready, txn)
	return p
}

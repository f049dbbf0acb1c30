// Package policy decides, with Open Policy Agent policies evaluated in
// process, what aguard does with a tool call: as it starts, whether the
// consumer sees it as it streams, only once it is judged, or never; once its
// arguments are complete, allow it, deny it, or hold it for a reviewer's
// approval.
//
// An Engine loads a folder of Rego policies and data files, a bundle file,
// or the default set embedded from package policies, prepares the query
// data.aguard.decision once, and evaluates it for each call with an Input
// shaped as in the README's "Policies" section. It fails closed: whatever
// keeps the policy from deciding — an evaluation error, a timeout, an output
// of the wrong shape, no policy — is a deny that carries the error (a hold,
// as a call starts). A revision whose answers depend only on the input
// values it reads keeps its recent decisions and answers a repeated set of
// values without evaluating again (memo.go). It
// watches a folder (fsnotify, polling as a fallback) and keeps the last good
// policy serving when a new one does not compile (Status, Ready report why).
//
// Policies compile with OPA capabilities: by default none of the built-in
// functions that reach outside the process (http.send, net.lookup_ip_addr),
// so that a policy cannot send a tool call's arguments anywhere; a
// capabilities file can allow them. With an OPA configuration
// (Options.OPAConfig) the policy comes from bundles run by OPA's plugin
// manager, which also sends every decision to OPA's decision log under its
// DecisionID and reports status. ValidateArguments checks a call's arguments
// against its tool's parameters JSON Schema; Reserve makes large arguments
// take turns for that check and the decision, whose memory grows with the
// JSON values they hold. RunTests runs a policy's Rego unit tests as
// `opa test` does.
//
// The package does not read the event stream, emit events, keep the tool-call
// ledger or wait for approvals: the proxy calls Decide as a call starts, at
// TOOL_CALL_END and, for unadvertised calls still pending, at RUN_FINISHED,
// and acts on the Decision.
// It holds no global state; everything belongs to an Engine.
package policy

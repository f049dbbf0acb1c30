// Package interop is test support that runs the official npm AG-UI clients
// (@ag-ui/client 1.0.0 and the legacy 0.0.58) against event streams, so tests
// can prove that real clients accept what aguard delivers. It is not part of
// aguard's runtime.
//
// Each call executes `node <repo>/interop/client.mjs`, which needs the npm
// packages pinned in interop/package-lock.json: run `npm ci --prefix interop`
// from the repository root first.
package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Client versions accepted in Request.Client.
const (
	// Client10 is the current official client, @ag-ui/client 1.0.0.
	Client10 = "1.0.0"
	// Client0058 is the last pre-1.0 official client, @ag-ui/client 0.0.58.
	Client0058 = "0.0.58"
)

// Modes accepted in Request.Mode.
const (
	// ModeLive makes the client's HttpAgent POST to Request.URL with the real fetch.
	ModeLive = "live"
	// ModeBody stubs fetch: the response is Request.Body as text/event-stream.
	ModeBody = "body"
)

// Request is one run of an official client.
type Request struct {
	// Mode is ModeLive or ModeBody.
	Mode string `json:"mode"`
	// Client is Client10 or Client0058.
	Client string `json:"client"`
	// URL is the agent endpoint the client POSTs to (ModeLive).
	URL string `json:"url,omitempty"`
	// Input is a RunAgentInput. Its threadId, messages and state become the
	// agent's state; runId, tools, context, forwardedProps and resume are
	// passed to runAgent. The client builds the POST body from them itself
	// (see Result.RequestBody); fields it has no parameter for are not sent.
	Input json.RawMessage `json:"input,omitempty"`
	// Headers are extra request headers given to the HttpAgent.
	Headers map[string]string `json:"headers,omitempty"`
	// Body is the raw SSE response text (ModeBody).
	Body string `json:"body"`
	// ChunkSize is the number of bytes per read of Body (ModeBody); 0 means
	// the whole body in one read.
	ChunkSize int `json:"chunkSize,omitempty"`
}

// Result is what the official client made of one run.
type Result struct {
	// Accepted is false when the client failed the run: its pipeline threw
	// (schema, chunk or sequence error), the HTTP request failed, or the
	// transport synthesised a RUN_ERROR. A RUN_ERROR carried in the stream
	// leaves Accepted true and is reported in RunError.
	Accepted bool `json:"accepted"`
	// Error is the message of the error that failed the run ("" if accepted).
	Error string `json:"error"`
	// RunError is the first RUN_ERROR event the stream carried, if any.
	RunError *RunError `json:"runError"`
	// Events are the events the client delivered to its subscribers, in
	// order, as the client expanded them (chunks become START/CONTENT/END).
	// When the run failed, they are a prefix of the events before the
	// failure: the client drops events still queued for its asynchronous
	// subscribers when its pipeline errors, so how many arrive depends on
	// how the body was split into reads.
	Events []json.RawMessage `json:"events"`
	// Runs has one entry per RUN_STARTED the client delivered.
	Runs []RunRecord `json:"runs"`
	// Messages is agent.messages after the run.
	Messages json.RawMessage `json:"messages"`
	// Warnings are the console.warn lines the client printed during the run.
	Warnings []string `json:"warnings"`
	// ConsoleErrors are the console.error lines the client printed during the
	// run, apart from its "Agent execution failed" report of Error.
	ConsoleErrors []string `json:"consoleErrors"`
	// RequestBody is the JSON body the client POSTed (null if it sent none).
	RequestBody json.RawMessage `json:"requestBody"`
}

// RunError is the code and message of a RUN_ERROR event.
type RunError struct {
	// Code is the event's code ("" when absent).
	Code string `json:"code"`
	// Message is the event's message.
	Message string `json:"message"`
}

// RunRecord is one run as the client's subscriber callbacks saw it. (It is not
// named Run because that is the function that runs a client.)
type RunRecord struct {
	// RunID is the RUN_STARTED runId.
	RunID string `json:"runId"`
	// Outcome is the outcome the client derived at RUN_FINISHED, as
	// {"type":"success"|"interrupt"|"cancelled"} (with "interrupts" for an
	// interrupt); JSON null when the client delivered no RUN_FINISHED.
	Outcome json.RawMessage `json:"outcome"`
	// PendingToolCallIDs is the list the client derived at a success
	// RUN_FINISHED: the producer's outcome.pendingToolCallIds or, when it
	// named none, the calls started and not answered. Nil for 0.0.58, which
	// derives no such list, and for other outcomes.
	PendingToolCallIDs []string `json:"pendingToolCallIds"`
	// Terminal is "RUN_FINISHED", "RUN_ERROR", or "" when the client
	// delivered neither for this run (truncated or rejected).
	Terminal string `json:"terminal"`
}

// OutcomeType returns the type of the derived outcome ("success",
// "interrupt", "cancelled"), or "" when there is none.
func (r RunRecord) OutcomeType() string {
	var o struct {
		Type string `json:"type"`
	}
	if len(r.Outcome) == 0 || json.Unmarshal(r.Outcome, &o) != nil {
		return ""
	}
	return o.Type
}

// EventTypes returns the type of each delivered event, in order.
func (r *Result) EventTypes() []string {
	types := make([]string, len(r.Events))
	for i, e := range r.Events {
		var ev struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(e, &ev); err != nil {
			types[i] = "<invalid: " + err.Error() + ">"
			continue
		}
		types[i] = ev.Type
	}
	return types
}

// Run runs one request through the official client it names.
func Run(ctx context.Context, req Request) (*Result, error) {
	results, err := RunAll(ctx, []Request{req})
	if err != nil {
		return nil, err
	}
	return results[0], nil
}

// RunAll runs the requests one after another in a single node process (saving
// node's startup per request) and returns their results in order.
func RunAll(ctx context.Context, reqs []Request) ([]*Result, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	for i, r := range reqs {
		if err := r.validate(); err != nil {
			return nil, fmt.Errorf("interop: request %d: %w", i, err)
		}
	}
	script, err := scriptPath()
	if err != nil {
		return nil, err
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("interop: node not found on PATH: %w", err)
	}
	stdin, err := json.Marshal(reqs)
	if err != nil {
		return nil, fmt.Errorf("interop: encode requests: %w", err)
	}

	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Run(); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = fmt.Errorf("%w (%w)", err, ctxErr)
		}
		return nil, fmt.Errorf("interop: node %s (%d requests, first %s): %w; stderr: %s",
			script, len(reqs), reqs[0].describe(), err, tail(stderr.String()))
	}

	var results []*Result
	if err := json.Unmarshal(stdout.Bytes(), &results); err != nil {
		return nil, fmt.Errorf("interop: decode output of %s: %w; stdout: %s; stderr: %s",
			script, err, tail(stdout.String()), tail(stderr.String()))
	}
	if len(results) != len(reqs) {
		return nil, fmt.Errorf("interop: %s returned %d results for %d requests; stderr: %s",
			script, len(results), len(reqs), tail(stderr.String()))
	}
	for i, r := range results {
		if r == nil {
			return nil, fmt.Errorf("interop: %s returned null for request %d (%s)", script, i, reqs[i].describe())
		}
	}
	return results, nil
}

func (r Request) validate() error {
	if r.Client != Client10 && r.Client != Client0058 {
		return fmt.Errorf("unknown client %q (want %q or %q)", r.Client, Client10, Client0058)
	}
	switch r.Mode {
	case ModeLive:
		if r.URL == "" {
			return errors.New("live mode needs a URL")
		}
	case ModeBody:
	default:
		return fmt.Errorf("unknown mode %q (want %q or %q)", r.Mode, ModeLive, ModeBody)
	}
	if len(r.Input) > 0 && !json.Valid(r.Input) {
		return fmt.Errorf("input is not valid JSON: %.80q", r.Input)
	}
	return nil
}

func (r Request) describe() string {
	if r.Mode == ModeLive {
		return fmt.Sprintf("%s client %s %s", r.Mode, r.Client, r.URL)
	}
	return fmt.Sprintf("%s client %s, %d-byte body", r.Mode, r.Client, len(r.Body))
}

// errNotInstalled is returned when interop/node_modules is missing.
var errNotInstalled = errors.New("interop: npm packages not installed; run `npm ci --prefix interop` (the test command does this)")

// scriptPath locates <repo>/interop/client.mjs from this source file's path.
func scriptPath() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return "", fmt.Errorf("interop: cannot locate the repository from source path %q (built with -trimpath?)", file)
	}
	return scriptIn(filepath.Join(filepath.Dir(file), "..", "..", "interop"))
}

// scriptIn returns the client script in dir, checking that the npm packages
// are installed next to it.
func scriptIn(dir string) (string, error) {
	script := filepath.Join(dir, "client.mjs")
	if _, err := os.Stat(script); err != nil {
		return "", fmt.Errorf("interop: client script missing: %w", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil || !fi.IsDir() {
		return "", errNotInstalled
	}
	return script, nil
}

// tail keeps the end of a long process output, where errors are reported.
func tail(s string) string {
	s = strings.TrimSpace(s)
	const limit = 4000
	if len(s) > limit {
		s = "…" + s[len(s)-limit:]
	}
	if s == "" {
		return "(empty)"
	}
	return s
}

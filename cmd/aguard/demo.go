package main

import (
	"bufio"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aguard/aguard/admin"
	"github.com/aguard/aguard/policy"
	"github.com/aguard/aguard/proxy"
	"github.com/aguard/aguard/state"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

// newDemoCmd is aguard demo.
func newDemoCmd() *cobra.Command {
	var keep bool
	cmd := &cobra.Command{
		Use:   "demo [flags]",
		Short: "run a scripted agent behind aguard and show what it does",
		Long: `Start a scripted agent and aguard in front of it on free loopback ports, run a
consumer through every scenario (a fabricated answer, an unadvertised tool, a
policy denial, an approval, the 0.x bridge, a protocol violation) and print,
side by side, what the agent sent, what the consumer received, and why.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return demo(cmd.Context(), keep, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "leave the demo agent and aguard running, with a call waiting on the approvals page, and print commands to try")
	return cmd
}

// demo starts a scripted agent and aguard in front of it on free loopback
// ports, runs a consumer through every scenario and prints, side by side,
// what the agent sent, what the consumer received, and why.
func demo(ctx context.Context, keep bool, stdout, stderr io.Writer) error {
	scenarios, stories := demoScenarios(), approvalStories()
	d, err := startDemo(ctx, append(slices.Clone(scenarios), storyScenarios(stories)...))
	if err != nil {
		return err
	}
	defer d.close()
	base := d.base

	st := newStyle(stdout)
	fmt.Fprintf(stdout, "%s\n", st.bold("aguard demo"))
	fmt.Fprintf(stdout, "A scripted agent listens on %s; aguard sits in front of it on %s (admin listener on %s).\n", d.agentAddr, d.addr, d.adminAddr)
	fmt.Fprintf(stdout, "For each scenario a consumer POSTs a RunAgentInput to aguard. Left: what the agent sent. Right: what the consumer received.\n")
	n := 0
	for _, sc := range scenarios {
		received, status, err := demoRun(ctx, base+"/agent", sc.input)
		if err != nil {
			return fmt.Errorf("scenario %q: %w", sc.name, err)
		}
		n++
		printScenario(stdout, st, n, sc, received, status, d.notes.take(sc.runID()))
	}
	for _, story := range stories {
		n++
		if _, err := story.play(ctx, d, stdout, st, n); err != nil {
			return fmt.Errorf("scenario %q: %w", story.name, err)
		}
	}
	if !keep {
		fmt.Fprintf(stdout, "\n%s\n", st.dim("Run `aguard demo --keep` to leave both running, try them with curl and decide a call on the approvals page."))
		return nil
	}
	waiting := reviewScenario()
	if _, _, err := demoRun(ctx, base+"/agent", waiting.input); err != nil {
		return fmt.Errorf("holding a call for the approvals page: %w", err)
	}
	fmt.Fprintf(stdout, "\nBoth keep running until you press Ctrl-C.\n\n")
	fmt.Fprintf(stdout, "%s %s/ui/approvals\n", st.bold("Approvals page:"), d.adminBase)
	fmt.Fprintf(stdout, "%s %s\n", st.bold("Admin token:   "), d.token)
	fmt.Fprintf(stdout, "A transfer (tool call %s) is waiting there for your decision.\n\n", reviewCallID)
	fmt.Fprintf(stdout, "Try (each command starts a thread of its own: aguard holds a thread's next run to what its last one left pending):\n\n")
	for _, sc := range scenarios {
		// Single-quoted for the shell, with a fresh thread per command.
		input := strings.ReplaceAll(sc.input, `'`, `'\''`)
		input = strings.Replace(input, `"threadId":"`+threadOf(sc.runID())+`"`, `"threadId":"try-'$RANDOM'"`, 1)
		fmt.Fprintf(stdout, "  # %s\n  curl -sN %s/agent -H 'Content-Type: application/json' -d '%s'\n\n", sc.name, base, input)
	}
	fmt.Fprintf(stdout, "  # The calls awaiting a decision, through the admin API\n  curl -s %s/v1/approvals -H 'Authorization: Bearer %s'\n\n", d.adminBase, d.token)
	<-ctx.Done()
	return nil
}

// demoSetup is the demo agent and aguard in front of it, with its ledger and
// admin listener, on free loopback ports.
type demoSetup struct {
	base      string // aguard's URL
	addr      net.Addr
	agentAddr net.Addr
	adminBase string // aguard's admin listener's URL
	adminAddr net.Addr
	token     string // the admin API's bearer token, made up for this run
	notes     *noteLog
	agentSaw  *inputLog // the RunAgentInput the agent received, by run
	close     func()
}

//go:embed demo_policy.rego
var demoPolicyRego []byte

// demoPolicy loads the demo's policy: the built-in default's rules plus an
// approval rule and a shell guard, so that every policy action shows.
func demoPolicy(ctx context.Context) (*policy.Engine, error) {
	dir, err := os.MkdirTemp("", "aguard-demo-policy-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir) // loaded into memory; the demo never reloads it
	if err := os.WriteFile(filepath.Join(dir, "demo.rego"), demoPolicyRego, 0o600); err != nil {
		return nil, err
	}
	return policy.New(ctx, policy.Options{Dir: dir})
}

// demoClientToolTimeout is the time the application has to answer an
// approved call in the demo.
const demoClientToolTimeout = time.Hour

func startDemo(ctx context.Context, scenarios []scenario) (_ *demoSetup, err error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	agentLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo agent: %w", err)
	}
	agentSaw := newInputLog()
	agent := &http.Server{Handler: demoAgent(scenarios, agentSaw), ReadHeaderTimeout: 5 * time.Second}
	go agent.Serve(agentLn)
	closers = append(closers, func() { agent.Close() })
	notes := newNoteLog()
	engine, err := demoPolicy(ctx)
	if err != nil {
		return nil, err
	}
	// The ledger, in memory: what the approval scenarios decide through the
	// admin API, and what holds a thread's next run to the last one.
	store, err := state.Open(ctx, state.Options{CacheSize: 10_000})
	if err != nil {
		return nil, fmt.Errorf("demo ledger: %w", err)
	}
	closers = append(closers, func() { store.Close() })
	token := make([]byte, 16)
	rand.Read(token)
	reg := prometheus.NewRegistry()
	p, err := proxy.New(proxy.Options{
		Upstream:          "http://" + agentLn.Addr().String(),
		Metrics:           proxy.NewMetrics(reg),
		Logger:            slog.New(notes),
		Policy:            engine,
		State:             store,
		ClientToolTimeout: demoClientToolTimeout,
		AdminToken:        hex.EncodeToString(token),
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo proxy: %w", err)
	}
	go p.Serve(ln)
	closers = append(closers, func() { p.Close() })
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo admin listener: %w", err)
	}
	adminSrv := &http.Server{
		Handler: admin.Handler(admin.Options{
			Token:    hex.EncodeToString(token),
			Gatherer: reg,
			Ready:    []admin.Check{p.Ready, store.Ready},
			API:      admin.API(admin.APIOptions{Store: store, ClientToolTimeout: demoClientToolTimeout}),
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go adminSrv.Serve(adminLn)
	closers = append(closers, func() { adminSrv.Close() })
	return &demoSetup{
		base: "http://" + ln.Addr().String(), addr: ln.Addr(), agentAddr: agentLn.Addr(),
		adminBase: "http://" + adminLn.Addr().String(), adminAddr: adminLn.Addr(), token: hex.EncodeToString(token),
		notes: notes, agentSaw: agentSaw, close: closeAll,
	}, nil
}

// demoRun is the consumer: it POSTs input and reads every data frame.
func demoRun(ctx context.Context, url, input string) ([]string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(input))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return []string{strings.TrimSpace(string(b))}, resp.StatusCode, nil
	}
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, data)
		}
	}
	return out, resp.StatusCode, sc.Err()
}

// demoAgent serves each scenario's scripted stream, chosen by the run id,
// and records the RunAgentInput it received.
func demoAgent(scenarios []scenario, saw *inputLog) http.Handler {
	byRun := map[string]scenario{}
	for _, sc := range scenarios {
		byRun[sc.runID()] = sc
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		var in struct {
			RunID string `json:"runId"`
		}
		json.Unmarshal(body, &in)
		saw.put(in.RunID, body)
		sc, ok := byRun[in.RunID]
		if !ok {
			http.Error(w, "the demo agent knows no run "+in.RunID, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range sc.agent {
			fmt.Fprintf(w, "data: %s\n\n", ev)
			w.(http.Flusher).Flush()
		}
		if sc.cutMidEvent {
			io.WriteString(w, `data: {"type":"TEXT_MESS`)
		}
	})
}

// inputLog keeps the RunAgentInput the demo agent received, by run id.
type inputLog struct {
	mu    sync.Mutex
	byRun map[string][]byte
}

func newInputLog() *inputLog { return &inputLog{byRun: map[string][]byte{}} }

func (l *inputLog) put(run string, body []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.byRun[run] = body
}

// get returns what the agent received for run, nil if the run never reached it.
func (l *inputLog) get(run string) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byRun[run]
}

// noteLog is a slog handler that keeps aguard's log lines per run, so the demo
// can say why it changed what it changed.
type noteLog struct {
	store *noteStore
	attrs []slog.Attr
}

type noteStore struct {
	mu    sync.Mutex
	byRun map[string][]string
	ended map[string]bool
}

func newNoteLog() *noteLog {
	return &noteLog{store: &noteStore{byRun: map[string][]string{}, ended: map[string]bool{}}}
}

func (n *noteLog) Enabled(context.Context, slog.Level) bool { return true }

func (n *noteLog) Handle(_ context.Context, r slog.Record) error {
	run := ""
	for _, a := range n.attrs {
		if a.Key == "runId" {
			run = a.Value.String()
		}
	}
	// A note's sentence is its message attribute; the msg only says what
	// kind of line it is. A line may name its run itself.
	text := r.Message
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "message":
			text = a.Value.String()
		case "runId":
			run = a.Value.String()
		}
		return true
	})
	n.store.mu.Lock()
	if r.Message == "stream ended" {
		n.store.ended[run] = true
	} else {
		n.store.byRun[run] = append(n.store.byRun[run], text)
	}
	n.store.mu.Unlock()
	return nil
}

func (n *noteLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &noteLog{store: n.store, attrs: append(append([]slog.Attr(nil), n.attrs...), attrs...)}
}

func (n *noteLog) WithGroup(string) slog.Handler { return n }

// take returns and forgets the lines logged for run. The stream goroutine
// may still be logging when the consumer has read the end of the stream, so
// take waits (a little, at most) for its "stream ended" line.
func (n *noteLog) take(run string) []string {
	for range 200 {
		n.store.mu.Lock()
		ended := n.store.ended[run]
		n.store.mu.Unlock()
		if ended {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	n.store.mu.Lock()
	defer n.store.mu.Unlock()
	out := n.store.byRun[run]
	delete(n.store.byRun, run)
	delete(n.store.ended, run)
	return out
}

// style colours output only when it goes to a terminal.
type style struct{ color bool }

func newStyle(w io.Writer) style {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("NO_COLOR") != "" {
		return style{}
	}
	fi, err := f.Stat()
	return style{color: err == nil && fi.Mode()&os.ModeCharDevice != 0}
}

func (s style) wrap(code, text string) string {
	if !s.color {
		return text
	}
	return "\x1b[" + code + "m" + text + "\x1b[0m"
}
func (s style) bold(t string) string  { return s.wrap("1", t) }
func (s style) dim(t string) string   { return s.wrap("2", t) }
func (s style) red(t string) string   { return s.wrap("31", t) }
func (s style) green(t string) string { return s.wrap("32", t) }

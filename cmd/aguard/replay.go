package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/aguard/aguard/agui"
	"github.com/aguard/aguard/config"
	"github.com/aguard/aguard/policy"
	"github.com/aguard/aguard/proxy"
	"github.com/aguard/aguard/sse"
)

// replayReport is the JSON report of one replay: what aguard decided and why.
type replayReport struct {
	EventsIn  int         `json:"eventsIn"`
	EventsOut int         `json:"eventsOut"`
	Notes     []agui.Note `json:"notes"`
	// End is how the consumer's stream ended: "completed" (the recorded body
	// ended), "ended" (aguard ended it) or "limit_exceeded".
	End string `json:"end"`
}

// replay runs one recorded upstream body through the stream checks, offline,
// and writes the stream the consumer would receive.
func replay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("aguard replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	inputPath := fs.String("input", "", "the RunAgentInput JSON the recorded body answered (required)")
	reportPath := fs.String("report", "", "write the JSON report here instead of stderr")
	mode := fs.String("mode", "enforce", "enforce, or monitor")
	maxEvent := fs.String("max-event", "16MiB", "largest single event accepted")
	policyDir := fs.String("policy", "", "policy folder or bundle file (.tar.gz) deciding tool calls (default: the built-in default policy)")
	capsFile := fs.String("policy-capabilities", "", "OPA capabilities file listing the built-in functions the policy may call (default: none that reach outside the process)")
	approvalTimeout := fs.Duration("approval-timeout", 10*time.Minute, "default approval deadline for calls a policy holds")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: aguard replay --input run-input.json [--policy DIR|BUNDLE.tar.gz] [--policy-capabilities FILE] [--report FILE] upstream.sse")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *inputPath == "" || fs.NArg() != 1 {
		fs.Usage()
		return errors.New("replay: --input and one recorded body are required")
	}
	if *mode != "enforce" && *mode != "monitor" {
		return fmt.Errorf("replay: --mode: want enforce or monitor, got %q", *mode)
	}
	limit, err := config.ParseSize(*maxEvent)
	if err != nil {
		return fmt.Errorf("replay: --max-event: %w", err)
	}
	raw, err := os.ReadFile(*inputPath)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	in, err := agui.ParseRunInput(raw)
	if err != nil {
		return fmt.Errorf("replay: %s: %w", *inputPath, err)
	}
	body, err := os.Open(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	defer body.Close()

	caps, err := loadCapabilities(*capsFile)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	engine, err := policy.New(ctx, policy.Options{Dir: *policyDir, Capabilities: caps})
	if err != nil {
		return fmt.Errorf("replay: policy: %w", err)
	}
	opts := agui.Options{Monitor: *mode == "monitor"}
	opts.Decider = proxy.NewDecider(engine, in, "replay", policy.RequestInfo{Path: "/", Headers: map[string]string{}}, nil, *approvalTimeout)

	out := bufio.NewWriter(stdout)
	report := replayReport{Notes: []agui.Note{}}
	pipe := proxy.NewPipeline(in, opts)
	emit := func(o *proxy.Output) error {
		report.Notes = append(report.Notes, o.Notes...)
		for _, ev := range o.Events {
			report.EventsOut++
			if err := sse.WriteFrame(out, ev.JSON); err != nil {
				return err
			}
		}
		return nil
	}
	report.End = "completed"
	done := false
	for data, rerr := range sse.Events(body, int(limit)) {
		var o *proxy.Output
		switch {
		case errors.Is(rerr, sse.ErrEventTooLarge):
			o = pipe.Abort(agui.CodeLimitExceeded, rerr.Error())
			report.End = "limit_exceeded"
		case rerr != nil:
			o = pipe.End(rerr)
		default:
			report.EventsIn++
			o = pipe.Feed(ctx, data)
			if o.Done {
				report.End = "ended"
			}
		}
		if err := emit(o); err != nil {
			return err
		}
		if done = o.Done; done {
			break
		}
	}
	if !done {
		if err := emit(pipe.End(nil)); err != nil {
			return err
		}
	}
	if err := out.Flush(); err != nil {
		return err
	}
	rep, _ := json.MarshalIndent(report, "", "  ")
	rep = append(rep, '\n')
	if *reportPath != "" {
		return os.WriteFile(*reportPath, rep, 0o644)
	}
	_, err = stderr.Write(rep)
	return err
}

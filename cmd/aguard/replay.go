package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/aguard/aguard/agui"
	"github.com/aguard/aguard/config"
	"github.com/aguard/aguard/policy"
	"github.com/aguard/aguard/proxy"
	"github.com/aguard/aguard/sse"
	"github.com/spf13/cobra"
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

// replayOptions are the flags of aguard replay.
type replayOptions struct {
	input, report, mode, maxEvent, policy, capabilities string
	approvalTimeout                                     time.Duration
}

// newReplayCmd is aguard replay.
func newReplayCmd() *cobra.Command {
	var o replayOptions
	cmd := &cobra.Command{
		Use:   "replay --input RUN-INPUT.json [flags] UPSTREAM.sse",
		Short: "run a recorded agent stream through the checks, offline",
		Long: `Run one recorded agent response body (SSE) through the same pipeline as aguard
serve, offline: the stream the consumer would receive goes to stdout, a JSON
report of what was decided and why to stderr (or --report FILE). For debugging
and for policy CI. Its flags are command-line only.`,
		Example: "  aguard replay --input run-input.json --policy ./my-policy recorded.sse",
		Args: func(cmd *cobra.Command, args []string) error {
			if o.input == "" || len(args) != 1 {
				return usageErrorf(cmd, "replay: --input and one recorded body are required")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return replay(cmd.Context(), o, args[0], cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.SortFlags = false
	f.StringVar(&o.input, "input", "", "the RunAgentInput JSON the recorded body answered (required)")
	f.StringVar(&o.report, "report", "", "write the JSON report to this file instead of stderr")
	f.StringVar(&o.mode, "mode", "enforce", "enforce, or monitor")
	f.StringVar(&o.maxEvent, "max-event", "16MiB", "largest single event accepted")
	f.StringVar(&o.policy, "policy", "", "policy folder or bundle file (.tar.gz) deciding tool calls (none: the built-in default policy)")
	f.StringVar(&o.capabilities, "policy-capabilities", "", "OPA capabilities file listing the built-in functions the policy may call (none: those that do not reach outside the process)")
	f.DurationVar(&o.approvalTimeout, "approval-timeout", 10*time.Minute, "default approval deadline for calls a policy holds")
	return cmd
}

// replay runs one recorded upstream body through the stream checks, offline,
// and writes the stream the consumer would receive.
func replay(ctx context.Context, o replayOptions, bodyPath string, stdout, stderr io.Writer) error {
	if o.mode != "enforce" && o.mode != "monitor" {
		return fmt.Errorf("replay: --mode: want enforce or monitor, got %q", o.mode)
	}
	limit, err := config.ParseSize(o.maxEvent)
	if err != nil {
		return fmt.Errorf("replay: --max-event: %w", err)
	}
	raw, err := os.ReadFile(o.input)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	in, err := agui.ParseRunInput(raw)
	if err != nil {
		return fmt.Errorf("replay: %s: %w", o.input, err)
	}
	body, err := os.Open(bodyPath)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	defer body.Close()

	caps, err := loadCapabilities(o.capabilities)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	engine, err := policy.New(ctx, policy.Options{Dir: o.policy, Capabilities: caps})
	if err != nil {
		return fmt.Errorf("replay: policy: %w", err)
	}
	opts := agui.Options{Monitor: o.mode == "monitor"}
	opts.Decider = proxy.NewDecider(engine, in, "replay", policy.RequestInfo{Path: "/", Headers: map[string]string{}}, nil, o.approvalTimeout)

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
	if o.report != "" {
		return os.WriteFile(o.report, rep, 0o644)
	}
	_, err = stderr.Write(rep)
	return err
}

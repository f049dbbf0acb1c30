package proxy

import (
	"context"

	"github.com/aguard/aguard/agui"
	"github.com/aguard/aguard/downgrade"
)

// Pipeline is what one consumer's stream goes through: the stream checks of
// package agui and, for a legacy (0.x) consumer, the bridge of package
// downgrade. The proxy runs one per stream; aguard replay runs one offline.
// Data flows one way: upstream event in, consumer events out.
type Pipeline struct {
	st     *agui.Stream
	bridge *downgrade.Bridge // nil for a 1.0 consumer
	b      agui.Batch
	out    Output
}

// Output is what one step of a Pipeline produced. It is reused by the next
// step: its slices are valid until then.
type Output struct {
	// InType is the upstream event's type ("" for End and Abort).
	InType string
	// Events are what the consumer receives, in order.
	Events []agui.Event
	// Notes are what was noticed and acted on, for logs and metrics.
	Notes []agui.Note
	// Done reports that the consumer's stream is over.
	Done bool
	// Calls and Run report what happened to tool calls and runs, for the
	// ledger (see agui.Batch).
	Calls []agui.CallEvent
	Run   agui.RunEnd
}

// NewPipeline returns the pipeline for one response to in. A consumer whose
// RunAgentInput has no protocolVersion is on the 0.x line and gets bridged.
func NewPipeline(in *agui.RunInput, opts agui.Options) *Pipeline {
	p := &Pipeline{st: agui.NewStream(in, opts)}
	if in.Legacy() {
		p.bridge = downgrade.New()
	}
	return p
}

// Feed runs the JSON text of one upstream event through the pipeline. ctx
// is the stream's: the policy decides under it (agui.Stream.Feed).
func (p *Pipeline) Feed(ctx context.Context, data []byte) *Output {
	p.st.Feed(ctx, data, &p.b)
	return p.finish()
}

// PassThrough reports whether data is an event the checks let through
// unchanged with nothing to note or record (agui.Stream.PassThrough): the
// event is then taken, and the caller forwards data as it is instead of
// feeding it as an event of type typ. Never for a 0.x consumer, whose
// events the bridge re-frames.
func (p *Pipeline) PassThrough(data []byte) (typ string, ok bool) {
	if p.bridge != nil {
		return "", false
	}
	return p.st.PassThrough(data)
}

// End reports the end of the upstream body (err nil) or its breaking.
func (p *Pipeline) End(err error) *Output {
	p.st.End(err, &p.b)
	return p.finish()
}

// Abort ends the consumer's stream for a reason outside it (see agui.Stream.Abort).
func (p *Pipeline) Abort(code, message string) *Output {
	p.st.Abort(code, message, &p.b)
	return p.finish()
}

func (p *Pipeline) finish() *Output {
	o := &p.out
	o.InType, o.Done = p.b.InType, p.b.Done
	o.Calls = p.b.Calls
	if p.b.Run.Kind != "" || o.Run.Kind != "" {
		o.Run = p.b.Run // most steps end no run: spare the copy
	}
	if p.bridge == nil {
		o.Events, o.Notes = p.b.Out, p.b.Notes
		return o
	}
	o.Events, o.Notes = o.Events[:0], append(o.Notes[:0], p.b.Notes...)
	for _, ev := range p.b.Out {
		o.Events, o.Notes = p.bridge.Event(ev, o.Events, o.Notes)
	}
	return o
}

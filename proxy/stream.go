package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/aguard/aguard/agui"
	"github.com/aguard/aguard/sse"
	"github.com/valyala/fasthttp"
)

// errConsumerGone cancels the upstream read when the consumer has left.
var errConsumerGone = errors.New("aguard: consumer disconnected")

// item is one upstream event, or the end of the upstream body.
type item struct {
	data []byte
	err  error
}

// stream is one consumer's event stream: it owns the upstream response and
// the consumer's writer from start to end.
type stream struct {
	p     *Proxy
	resp  *fasthttp.Response
	conn  net.Conn // the consumer's connection: read to see it leave, deadline to see it stall
	pipe  *Pipeline
	led   *ledger // nil without a state store
	log   *slog.Logger
	start time.Time
}

func (p *Proxy) startStream(ctx *fasthttp.RequestCtx, resp *fasthttp.Response, in *agui.RunInput, up *upstream) {
	ctx.SetStatusCode(resp.StatusCode())
	copyResponseHeaders(&ctx.Response.Header, &resp.Header,
		"Content-Length", "Content-Type", "Cache-Control", "Content-Encoding", "X-Accel-Buffering")
	ctx.Response.Header.Set("Content-Type", "text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	ctx.Response.ImmediateHeaderFlush = true
	// The connection is watched for the consumer leaving, which reads from
	// it; it must not be reused for another request afterwards.
	ctx.SetConnectionClose()

	route := up.prefix
	if route == "" {
		route = "default"
	}
	opts := agui.Options{Monitor: p.opt.Monitor}
	if p.opt.Policy != nil {
		opts.Decider = NewDecider(p.opt.Policy, in, route, requestInfo(ctx), p.opt.ApprovalTimeout)
	}
	s := &stream{
		p:     p,
		resp:  resp,
		conn:  ctx.Conn(),
		pipe:  NewPipeline(in, opts),
		log:   p.log.With("threadId", in.ThreadID, "runId", in.RunID, "route", route),
		start: time.Now(),
	}
	if p.opt.State != nil {
		s.led = newLedger(p.opt.State, p.opt.Notifier, in, p.opt.ClientToolTimeout, s.log)
	}
	p.m.streamsOpen.Inc()
	ctx.SetBodyStreamWriter(s.run)
}

// run pumps events from the agent to the consumer. It runs in its own
// goroutine after the handler has returned; it must not touch the RequestCtx.
//
// One reader goroutine parses the upstream body and hands events over a small
// channel; run is the only owner of the response and of w. A consumer that
// reads slowly blocks w, which stops the channel, which stops the reader,
// which leaves the agent's bytes in TCP buffers: nothing grows without bound.
func (s *stream) run(w *bufio.Writer) {
	p := s.p
	defer p.leave()
	defer p.m.streamsOpen.Dec()

	items := make(chan item, 16)
	stop := make(chan struct{})
	body := s.resp.BodyStream()
	activity := &activityReader{r: body}
	activity.last.Store(time.Now().UnixNano())
	go func() {
		defer close(items)
		if body == nil {
			return
		}
		for data, err := range sse.Events(activity, int(p.opt.MaxEvent)) {
			select {
			case items <- item{data: data, err: err}:
			case <-stop:
				return
			}
		}
	}()

	gone := make(chan struct{})
	go watchConsumer(s.conn, gone)

	end := s.pump(w, items, gone, activity)

	// Stop the reader: closing the body interrupts a blocked Read and closes
	// the upstream connection, which the agent sees as a cancellation.
	close(stop)
	if end != "completed" {
		if rc, ok := body.(fasthttp.ReadCloserWithError); ok {
			rc.CloseWithError(errConsumerGone)
		}
	}
	for range items {
	}
	fasthttp.ReleaseResponse(s.resp)
	p.m.streamEnds.WithLabelValues(end).Inc()
	p.m.duration.Observe(time.Since(s.start).Seconds())
	s.log.Info("stream ended", "end", end, "duration", time.Since(s.start).Round(time.Millisecond))
}

// pump moves events until the stream is over and says how it ended:
// "completed" (the agent's body ended), "ended" (aguard ended it: violation,
// limit), "consumer_gone", or "shutdown".
func (s *stream) pump(w *bufio.Writer, items <-chan item, gone <-chan struct{}, activity *activityReader) string {
	p := s.p
	heartbeat := time.NewTimer(p.opt.Heartbeat)
	defer heartbeat.Stop()
	s.conn.SetWriteDeadline(time.Now().Add(stalledConsumer))
	lastDeadline := time.Now()

	for {
		var out *Output
		end := ""
		select {
		case it, ok := <-items:
			switch {
			case !ok:
				out = s.pipe.End(nil)
				end = "completed"
			case errors.Is(it.err, sse.ErrEventTooLarge):
				out = s.pipe.Abort(agui.CodeLimitExceeded, fmt.Sprintf("an event from the agent exceeded the limit of %d bytes", p.opt.MaxEvent))
				p.m.upstreamErrors.WithLabelValues("event_too_large").Inc()
				end = "ended"
			case it.err != nil:
				out = s.pipe.End(it.err)
				p.m.upstreamErrors.WithLabelValues("stream_broken").Inc()
				s.log.Warn("agent stream broke", "err", it.err)
				end = "completed"
			default:
				p.m.bytesIn.Add(float64(len(it.data)))
				out = s.pipe.Feed(it.data)
				count(p.m.eventsIn, out.InType)
				if out.Done {
					end = "ended"
				}
			}
		case <-heartbeat.C:
			if silent := time.Since(time.Unix(0, activity.last.Load())); silent >= p.opt.UpstreamIdleTimeout {
				out = s.pipe.End(fmt.Errorf("the agent sent nothing for %s", silent.Round(time.Second)))
				p.m.upstreamErrors.WithLabelValues("idle").Inc()
				end = "ended"
				break
			}
			if sse.WritePing(w) != nil || w.Flush() != nil {
				return "consumer_gone"
			}
			p.m.bytesOut.Add(float64(len(sse.Ping)))
			heartbeat.Reset(p.opt.Heartbeat)
			continue
		case <-gone:
			return "consumer_gone"
		case <-p.abort:
			out = s.pipe.Abort(agui.CodeShutdown, "aguard is shutting down and the drain timeout ran out")
			end = "shutdown"
		}

		s.note(out.Notes)
		if s.led != nil {
			// Before the events go out: what RUN_FINISHED says is pending
			// must be recorded before the consumer reads it.
			s.led.record(context.Background(), out)
		}
		if len(out.Events) > 0 {
			if now := time.Now(); now.Sub(lastDeadline) > time.Second {
				s.conn.SetWriteDeadline(now.Add(stalledConsumer))
				lastDeadline = now
			}
			n := 0
			for _, ev := range out.Events {
				if sse.WriteFrame(w, ev.JSON) != nil {
					return "consumer_gone"
				}
				n += len(ev.JSON) + 8
				count(p.m.eventsOut, ev.Type)
			}
			if w.Flush() != nil {
				return "consumer_gone"
			}
			p.m.bytesOut.Add(float64(n))
			heartbeat.Reset(p.opt.Heartbeat)
		}
		if end != "" {
			return end
		}
	}
}

// activityReader records when the agent last sent any bytes, comments
// included (the SSE parser drops those), for the idle limit.
type activityReader struct {
	r    io.Reader
	last atomic.Int64 // unix nanoseconds of the last read that returned data
}

func (a *activityReader) Read(b []byte) (int, error) {
	n, err := a.r.Read(b)
	if n > 0 {
		a.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// note logs and counts what the stream checks noticed.
func (s *stream) note(notes []agui.Note) {
	for _, n := range notes {
		s.p.m.notes.WithLabelValues(n.Kind).Inc()
		level := slog.LevelInfo
		if n.Kind == "violation" || n.Kind == "interrupt_frontend" {
			level = slog.LevelWarn
		}
		s.log.Log(nil, level, n.Message, "kind", n.Kind, "rule", n.Rule, "id", n.ID)
	}
}

// watchConsumer closes gone when the consumer's connection is closed. An SSE
// consumer sends nothing after its request, so a read returns only when the
// peer has gone (or when the server closes the connection after the stream,
// which is harmless). Without it, a consumer leaving a silent stream would be
// noticed only by a later failed write.
func watchConsumer(conn net.Conn, gone chan<- struct{}) {
	defer close(gone)
	conn.SetReadDeadline(time.Time{})
	var buf [1]byte
	for {
		if _, err := conn.Read(buf[:]); err != nil {
			if errors.Is(err, io.EOF) || !isTimeout(err) {
				return
			}
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

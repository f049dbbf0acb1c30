package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aguard/aguard/agui"
	"github.com/aguard/aguard/auth"
	"github.com/aguard/aguard/internal/logging"
	"github.com/aguard/aguard/internal/rawio"
	"github.com/aguard/aguard/policy"
	"github.com/aguard/aguard/sse"
	"github.com/valyala/fasthttp"
)

// Why a stream's upstream read was interrupted.
var (
	errConsumerGone = errors.New("aguard: consumer disconnected")
	errShutdown     = errors.New("aguard: shutting down")
)

// idleError ends a stream whose agent has been silent too long.
type idleError struct{ silent time.Duration }

func (e idleError) Error() string {
	return fmt.Sprintf("the agent sent nothing for %s", e.silent.Round(time.Second))
}

// stream is one consumer's event stream. Its pump goroutine owns the
// agent's answer and reads its body inline: an event goes from the agent's
// socket through the checks to the consumer's socket without changing
// goroutine. What can end a stream from outside — the consumer leaving
// (watchConsumer, hangup.go), the drain timeout (Proxy.Drain) or Close, the
// agent going silent (tick) — shuts the agent's connection down, which
// ends the pump's wait for the agent.
//
// Output is written to the hijacked connection as HTTP/1.1 chunks, flushed
// just before the pump waits for the agent: no event waits for the agent's
// next bytes, and events that arrived together go out in one write. When
// the stream ends, an HTTP/1.1 consumer's connection is kept for its next
// request (serveNext) unless it asked for Connection: close.
type stream struct {
	p *Proxy
	// ctx is the request's context (Proxy.handle), cancelled (cancel) with
	// the cause when the stream is interrupted, and when it is over. The
	// policy decides under it; the ledger records under recordCtx, its
	// values without its cancellation: what happened is recorded however
	// the stream ended (each write has its own bound).
	ctx       context.Context
	cancel    context.CancelCauseFunc
	recordCtx context.Context
	trace     *reqTrace // nil: tracing is off
	ans       *reply
	pipe      *Pipeline
	led       *ledger // nil without a state store
	log       *slog.Logger
	start     time.Time
	head      []byte // the response head, written first
	chunk     bool   // HTTP/1.1: chunked framing; HTTP/1.0: the body runs to close
	// keep: the consumer's connection is kept after the stream (HTTP/1.1,
	// and no Connection: close).
	keep bool
	fed  bool // the pump has fed the stream's first event (step)

	// Upstream side, guarded by umu: once the pump releases the answer,
	// nothing may touch it.
	umu      sync.Mutex
	released bool
	cause    error // why the read was interrupted
	// reads counts the upstream reads that returned bytes; tick compares
	// it with what it saw last (seenReads, at quietSince) to find silence,
	// so reading keeps no clock.
	reads      atomic.Uint64
	seenReads  uint64    // tick only
	quietSince time.Time // tick only

	// Consumer side, guarded by wmu: the pump and the heartbeat both write.
	wmu          sync.Mutex
	conn         net.Conn
	w            io.Writer // writes conn (rawio.Conn)
	out          []byte    // pending frames, after chunkHead reserved bytes
	own          []byte    // the stream's own out while a batch is in a pooled one (outbuf.go)
	pooled       *[]byte   // that pooled buffer, to give back
	finished     bool
	lastWrite    time.Time
	lastDeadline time.Time
	timer        *time.Timer

	c counts
}

// counts batches the metrics every event touches. Shared counters updated
// for each event cost more than the event's own checks under load (their
// cache lines move between cores), so bytes, and events of the commonest
// type, are added to them at most once a second while events flow, at each
// heartbeat tick, and before the consumer can see the stream's end. Guarded
// by wmu.
type counts struct {
	bytesIn, textIn   float64
	bytesOut, textOut float64
	at                int64 // unix ns of the last flush
}

// flushCountsLocked adds the batched counts to the shared counters; wmu is
// held.
func (s *stream) flushCountsLocked(now int64) {
	m, c := s.p.m, &s.c
	if c.bytesIn > 0 {
		m.bytesIn.Add(c.bytesIn)
	}
	if c.textIn > 0 {
		m.eventsIn[agui.EventTextContent].Add(c.textIn)
	}
	if c.bytesOut > 0 {
		m.bytesOut.Add(c.bytesOut)
	}
	if c.textOut > 0 {
		m.eventsOut[agui.EventTextContent].Add(c.textOut)
	}
	*c = counts{at: now}
}

// lastChunk ends a chunked body (RFC 9112 §7.1), with no trailer.
var lastChunk = []byte("0\r\n\r\n")

// chunkHead is the room reserved before pending output for a chunk's size
// line ("ffffffff\r\n").
const chunkHead = 10

// request is what a stream takes over from its request: its context and
// the function that cancels it.
type request struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	trace  *reqTrace // nil: tracing is off
}

// startStream streams the agent's answer ans to the consumer of ctx through
// the checks; info is what the policy may read of the request, id who sent
// it (nil when aguard authenticates no one). The stream owns rq from here
// on: it cancels its context when it is over.
func (p *Proxy) startStream(ctx *fasthttp.RequestCtx, rq request, ans *reply, in *agui.RunInput, up *upstream, info policy.RequestInfo, id *auth.Identity) {
	h := &ctx.Response.Header
	h.SetStatusCode(ans.resp.StatusCode())
	copyResponseHeaders(h, &ans.resp.Header,
		"Content-Length", "Content-Type", "Cache-Control", "Content-Encoding", "X-Accel-Buffering")
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	ans.dropHead() // copied: the stream needs no more of it
	chunk := ctx.Request.Header.IsHTTP11()
	keep := chunk && !ctx.Request.Header.ConnectionClose()
	if chunk {
		h.SetContentLength(-1) // Transfer-Encoding: chunked
	} else {
		h.SetContentLength(-2) // identity body, ended by closing
	}
	if !keep {
		h.SetConnectionClose()
	}

	route := up.prefix
	if route == "" {
		route = "default"
	}
	opts := agui.Options{Monitor: p.opt.Monitor, MaxHeld: int(p.opt.MaxHeld)}
	if p.opt.Policy != nil {
		opts.Decider = NewDecider(p.opt.Policy, in, route, info, policyIdentity(id), p.opt.ApprovalTimeout)
		if p.opt.State != nil {
			opts.Decider = holdGate{Decider: opts.Decider, store: p.opt.State, thread: in.ThreadID, log: p.log}
		}
		if rq.trace != nil {
			opts.Decider = tracedDecider{Decider: opts.Decider, t: rq.trace}
		}
	}
	s := &stream{
		p:         p,
		ctx:       rq.ctx,
		cancel:    rq.cancel,
		recordCtx: context.WithoutCancel(rq.ctx),
		trace:     rq.trace,
		ans:       ans,
		pipe:      NewPipeline(in, opts),
		log:       p.log.With("threadId", in.ThreadID, "runId", in.RunID, "route", route),
		start:     time.Now(),
		head:      append([]byte(nil), h.Header()...),
		chunk:     chunk,
		keep:      keep,
		out:       make([]byte, chunkHead, 512),
	}
	if p.opt.State != nil {
		s.led = newLedger(p.opt.State, p.opt.Notifier, in, p.opt.ClientToolTimeout, s.log)
		s.led.requestedBy = subject(id)
	}
	p.m.streamsOpen.Inc()
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(hc net.Conn) {
		c := hc
		if u, ok := c.(interface{ UnsafeConn() net.Conn }); ok {
			c = u.UnsafeConn()
		}
		// fasthttp holds its request buffer (8 KiB) and the RequestCtx
		// until this function returns, then closes c. The stream runs on a
		// connection of its own instead, a duplicate of c's descriptor, so
		// the server has both back at once. The duplicate is handed back to
		// the server for the consumer's next request when the stream ends
		// (serveNext). Nothing buffered is lost: a consumer sends its next
		// request after this stream's end, unless it pipelined one, and
		// then the stream ends with Connection: close.
		if s.keep && pipelined(hc, c) {
			s.keep = false
			s.head = withConnectionClose(s.head)
		}
		if !p.shareConns.Load() {
			if own, err := ownConn(c); err == nil {
				go func() {
					if s.run(own) {
						p.serveNext(own)
					}
				}()
				return
			}
		}
		// No descriptor to duplicate (no platform support): the server
		// closes c when the stream is over.
		if s.keep {
			s.keep = false
			s.head = withConnectionClose(s.head)
		}
		s.run(c)
	})
}

// withConnectionClose adds Connection: close to a response head.
func withConnectionClose(head []byte) []byte {
	end := bytes.LastIndex(head, []byte("\r\n\r\n"))
	if end < 0 {
		return head
	}
	out := append([]byte(nil), head[:end+2]...)
	out = append(out, "Connection: close\r\n\r\n"...)
	return out
}

// ownConn returns a connection on a duplicate of c's descriptor: the same
// socket, which stays open when c is closed.
func ownConn(c net.Conn) (net.Conn, error) {
	fc, ok := c.(interface{ File() (*os.File, error) })
	if !ok {
		return nil, errors.New("the connection has no descriptor")
	}
	f, err := fc.File()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return net.FileConn(f)
}

// run serves the stream on the hijacked connection (usually its own
// duplicate, in its own goroutine, after the hijack handler has returned);
// it must not touch the RequestCtx. When the stream is over it closes the
// connection, or reports true: the connection is the caller's, open and
// ready for the consumer's next request.
func (s *stream) run(c net.Conn) (keep bool) {
	p := s.p
	defer p.leave()
	defer p.m.streamsOpen.Dec()
	if !p.track(s, true) {
		s.interrupt(errShutdown) // the drain timeout ran out as it started
	}
	defer p.track(s, false)

	s.conn = c
	s.w = rawio.Conn(c)
	now := time.Now()
	s.lastWrite, s.lastDeadline = now, now
	s.quietSince = now
	c.SetWriteDeadline(now.Add(stalledConsumer))
	end := "consumer_gone"
	stopWatch := func() {}
	if _, err := s.w.Write(s.head); err == nil {
		s.timer = time.AfterFunc(p.opt.Heartbeat, s.tick)
		stopWatch = p.watchConsumer(c, s)
		end = s.pump()
	}

	// Nothing may interrupt the stream from here on, and nothing watches
	// the consumer's connection: it may carry the next request at once.
	s.umu.Lock()
	s.released = true
	s.umu.Unlock()
	stopWatch()

	s.wmu.Lock()
	s.flushCountsLocked(0)
	wrote := false
	if end != "consumer_gone" && s.chunk {
		_, err := s.w.Write(lastChunk)
		wrote = err == nil
	}
	s.finished = true
	if s.timer != nil {
		s.timer.Stop()
	}
	s.wmu.Unlock()

	if end != "completed" {
		// Closing the agent's connection: the agent sees its request
		// cancelled.
		s.ans.abort()
	}
	s.ans.release()
	if s.led != nil {
		s.led.close(s.recordCtx, end)
	}
	p.m.streamEnds.WithLabelValues(end).Inc()
	p.m.duration.Observe(time.Since(s.start).Seconds())
	logging.Log(s.ctx, s.log, slog.LevelInfo, "stream ended", slog.String("end", end),
		slog.Duration("duration", time.Since(s.start).Round(time.Millisecond)))
	s.trace.endStream(end)
	s.cancel(nil)

	keep = s.keep && wrote && (end == "completed" || end == "ended") && !p.draining.Load()
	if keep && c.SetWriteDeadline(time.Time{}) == nil {
		return true
	}
	c.Close()
	return false
}

// pump moves events until the stream is over and says how it ended:
// "completed" (the agent's body ended), "ended" (aguard ended it: violation,
// limit, silence), "consumer_gone", or "shutdown".
func (s *stream) pump() string {
	if s.ans.body == nil {
		return s.emit(s.pipe.End(nil), 0, "completed")
	}
	// Flush before every read of the agent's socket: those are the reads
	// that may block, or (pumpRaw) that come before a wait. (The body
	// reader above it may hand back an event it already holds without
	// touching the socket; flushing there would write a backlog one event
	// at a time.)
	c := s.ans.conn
	c.beforeRead = s.flushForRead
	defer func() { c.beforeRead = nil }()
	rd := sse.NewReader(upstreamReader{s}, int(s.p.opt.MaxEvent))
	if raw, w := s.ans.rawRead(); raw != nil {
		return s.pumpRaw(raw, w, rd)
	}
	for {
		if end := s.step(rd.Next()); end != "" {
			return end
		}
	}
}

// pumpRaw is pump for a chunked answer on a plain TCP connection: the
// events are moved inside the connection's RawConn.Read, whose function
// reads the socket without blocking (wire.readFD) and returns false, to
// wait for the agent's next bytes, only once a short read has drained the
// socket and the pending output is flushed (as before every read of the
// socket). A wait costs no read that finds nothing, as nginx's
// edge-triggered event loop waits: Go's netpoller reads until EAGAIN
// before it parks a reader, a system call per event when events come one
// at a time. Interruptions shut the connection down (reply.abort) instead
// of closing it, which would wait for this read; the shutdown and the
// agent's close wake the wait (upConn.poke).
func (s *stream) pumpRaw(raw syscall.RawConn, w *wire, rd *sse.Reader) string {
	c := s.ans.conn
	c.pumping.Store(true)
	defer c.pumping.Store(false)
	end := ""
	pump := func(fd uintptr) bool {
		w.fd, w.drained = int(fd), false
		events := 0
		for end == "" {
			data, err := rd.Next()
			if errors.Is(err, syscall.EAGAIN) {
				s.p.wakeups.add(events)
				if s.flushForRead() != nil {
					return true // end is set below
				}
				return false
			}
			if err == nil {
				events++
			}
			end = s.step(data, err)
		}
		return true
	}
	err := raw.Read(pump)
	for end == "" && errors.Is(err, os.ErrDeadlineExceeded) {
		// Poked (upConn.poke): the agent closed the connection, or it was
		// shut down. Read on to the end.
		c.tcp.SetReadDeadline(time.Time{})
		err = raw.Read(pump)
	}
	w.fd = -1
	if end == "" {
		if err == nil {
			err = errConsumerGone // flushForRead failed: the consumer is gone
		}
		end = s.step(nil, err)
	}
	return end
}

// step handles what the agent's stream gave: an event's data, its end
// (io.EOF) or the error that broke it. It returns how the stream ended, or
// "" while it goes on.
func (s *stream) step(data []byte, err error) string {
	p := s.p
	if err != nil {
		cause := s.interruption()
		var idle idleError
		switch {
		case errors.Is(cause, errConsumerGone):
			return "consumer_gone"
		case errors.Is(cause, errShutdown):
			return s.emit(s.pipe.Abort(agui.CodeShutdown, "aguard is shutting down and the drain timeout ran out"), 0, "shutdown")
		case errors.As(cause, &idle):
			p.m.upstreamErrors.WithLabelValues("idle").Inc()
			return s.emit(s.pipe.End(idle), 0, "ended")
		case err == io.EOF:
			return s.emit(s.pipe.End(nil), 0, "completed")
		case errors.Is(err, sse.ErrEventTooLarge):
			p.m.upstreamErrors.WithLabelValues("event_too_large").Inc()
			return s.emit(s.pipe.Abort(agui.CodeLimitExceeded, fmt.Sprintf("an event from the agent exceeded the limit of %d bytes", p.opt.MaxEvent)), 0, "ended")
		default:
			p.m.upstreamErrors.WithLabelValues("stream_broken").Inc()
			s.log.WarnContext(s.ctx, "agent stream broke", "err", err)
			return s.emit(s.pipe.End(err), 0, "completed")
		}
	}
	var out *Output
	if !s.fed {
		s.fed = true
		out = s.feedAside(data)
	} else if typ, ok := s.pipe.PassThrough(data); ok {
		return s.passOn(typ, data)
	} else {
		out = s.pipe.Feed(s.ctx, data)
	}
	end := ""
	if out.Done {
		end = "ended"
	}
	return s.emit(out, len(data), end)
}

// feedAside feeds the stream's first event (RUN_STARTED, or what the
// checks refuse in its place) on a goroutine of its own and waits for it.
// Checking an event off the fast path takes more than 4 KiB of stack
// (agui's feed and screen frames alone are about 3 KiB): on the pump's
// goroutine it would grow the stack to 8 KiB, which Go's GC does not halve
// while the pump waits in a read (it shrinks a stack only when less than a
// quarter of it is in use). A run whose agent starts it and then thinks for
// a long time, the commonest idle stream, keeps a 4 KiB stack instead; the
// goroutine costs a microsecond once per stream.
func (s *stream) feedAside(data []byte) *Output {
	done := make(chan *Output, 1)
	go func() { done <- s.pipe.Feed(s.ctx, data) }()
	return <-done
}

// emit records a step's facts (in: the bytes of the event fed, 0 for End
// and Abort), queues its events and, when the stream ends (end != ""),
// flushes them. It returns end, or "consumer_gone" when writing failed.
//
// The ledger records the facts before the events go out, never waiting for
// Redis, except for a RUN_FINISHED: what it says is pending is recorded
// before the consumer reads it, waiting for Redis at most --redis-timeout
// (ledger.runEnded). The events the step produced before it go out first,
// so that none waits with it.
func (s *stream) emit(out *Output, in int, end string) string {
	s.note(out.Notes)
	events := out.Events
	if s.led != nil {
		s.led.recordCalls(s.recordCtx, out)
		if out.Run.Kind != "" {
			if out.Run.Kind == "finished" {
				// Out before the wait: what earlier steps left pending
				// (flushed only before the agent's socket is read), and
				// this step's events before RUN_FINISHED.
				i := max(0, slices.IndexFunc(events, func(ev agui.Event) bool { return ev.Type == "RUN_FINISHED" }))
				if s.writeEvents(events[:i]) != nil || s.flush() != nil {
					return "consumer_gone"
				}
				events = events[i:]
			}
			s.led.runEnded(s.recordCtx, &out.Run)
		}
	}
	s.trace.observe(out)
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if out.InType != "" {
		s.countInLocked(out.InType, in)
	}
	if s.writeEventsLocked(events) != nil {
		return "consumer_gone"
	}
	clear(out.Events) // written: a large event's bytes are not kept while the stream waits
	if end != "" {
		s.flushCountsLocked(0) // before the consumer can see the end
		if s.flushLocked() != nil {
			return "consumer_gone"
		}
		return end
	}
	s.countsDueLocked()
	return end
}

// passOn queues an event of type typ the checks let through unchanged
// (Pipeline.PassThrough): what emit does for a step whose only output is
// its input, the commonest step, without a step's other results to read.
func (s *stream) passOn(typ string, data []byte) string {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.countInLocked(typ, len(data))
	if s.writeEventLocked(agui.Event{Type: typ, JSON: data}) != nil {
		return "consumer_gone"
	}
	s.countsDueLocked()
	return ""
}

// countInLocked counts an event of type typ, n bytes, from the agent; wmu
// is held.
func (s *stream) countInLocked(typ string, n int) {
	s.c.bytesIn += float64(n)
	countEvent(s.p.m.eventsIn, &s.c.textIn, typ)
}

// countsDueLocked adds the batched counts to the shared counters once a
// second while events flow (counts); wmu is held.
func (s *stream) countsDueLocked() {
	if now := s.lastWrite.UnixNano(); now-s.c.at >= int64(time.Second) {
		s.flushCountsLocked(now)
	}
}

// writeEvents queues events as frames (a large one is written at once).
func (s *stream) writeEvents(events []agui.Event) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.writeEventsLocked(events)
}

func (s *stream) writeEventsLocked(events []agui.Event) error {
	for _, ev := range events {
		if err := s.writeEventLocked(ev); err != nil {
			return err
		}
	}
	return nil
}

// writeEventLocked queues one event as a frame (a large one is written at
// once); wmu is held.
func (s *stream) writeEventLocked(ev agui.Event) error {
	countEvent(s.p.m.eventsOut, &s.c.textOut, ev.Type)
	if len(ev.JSON) > bigFrame {
		if ok, err := s.writeBigFrameLocked(ev.JSON); ok {
			return err
		}
	}
	s.roomLocked(len(ev.JSON) + frameExtra)
	s.out = sse.AppendFrame(s.out, ev.JSON)
	return nil
}

// flush writes the pending output as one chunk.
func (s *stream) flush() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.flushLocked()
}

func (s *stream) flushLocked() error {
	n := len(s.out) - chunkHead
	if n == 0 || s.finished {
		return nil
	}
	b := s.out[chunkHead:]
	if s.chunk {
		// The size line goes in the room reserved before the data.
		start := chunkHead - 2
		for v := n; ; v >>= 4 {
			start--
			s.out[start] = "0123456789abcdef"[v&15]
			if v < 16 {
				break
			}
		}
		s.out[chunkHead-2], s.out[chunkHead-1] = '\r', '\n'
		b = append(s.out[start:], '\r', '\n')
	}
	now := time.Now()
	if now.Sub(s.lastDeadline) > time.Second {
		s.conn.SetWriteDeadline(now.Add(stalledConsumer))
		s.lastDeadline = now
	}
	_, err := s.w.Write(b)
	s.c.bytesOut += float64(n)
	s.out = s.out[:chunkHead]
	s.releaseOutLocked()
	s.lastWrite = now
	return err
}

// tick runs on the heartbeat timer: it ends a stream whose agent has been
// silent for the idle limit (as seen from one tick to the next), and writes
// ": ping" after a heartbeat of silence towards the consumer.
func (s *stream) tick() {
	p := s.p
	now := time.Now()
	if r := s.reads.Load(); r != s.seenReads {
		s.seenReads, s.quietSince = r, now
	} else if silent := now.Sub(s.quietSince); silent >= p.opt.UpstreamIdleTimeout {
		s.interrupt(idleError{silent})
		return
	}
	s.wmu.Lock()
	if s.finished {
		s.wmu.Unlock()
		return
	}
	s.flushCountsLocked(now.UnixNano())
	next := p.opt.Heartbeat - time.Since(s.lastWrite)
	if next <= 0 {
		s.out = append(s.out, sse.Ping...)
		if err := s.flushLocked(); err != nil {
			s.wmu.Unlock()
			s.interrupt(errConsumerGone)
			return
		}
		next = p.opt.Heartbeat
	}
	if q := p.opt.UpstreamIdleTimeout - now.Sub(s.quietSince); q > 0 && q < next {
		next = q // an idle limit shorter than the heartbeat
	}
	s.timer.Reset(next)
	s.wmu.Unlock()
}

// interrupt ends the pump's upstream read for cause, unless the stream is
// already over.
func (s *stream) interrupt(cause error) {
	s.umu.Lock()
	defer s.umu.Unlock()
	if s.released || s.cause != nil {
		return
	}
	s.cause = cause
	s.cancel(cause) // a decision under way denies
	s.ans.abort()   // a blocked read returns
}

// interruption is why the upstream read was interrupted, if it was.
func (s *stream) interruption() error {
	s.umu.Lock()
	defer s.umu.Unlock()
	return s.cause
}

// flushForRead flushes pending output before the agent's socket is read. A
// failed write means the consumer is gone: the read fails, and the pump ends.
func (s *stream) flushForRead() error {
	if err := s.flush(); err != nil {
		s.umu.Lock()
		if s.cause == nil {
			s.cause = errConsumerGone
			s.cancel(errConsumerGone)
		}
		s.umu.Unlock()
		return errConsumerGone
	}
	return nil
}

// upstreamReader is the pump's view of the upstream body. It counts the
// reads that brought bytes, comments included (see tick).
type upstreamReader struct{ s *stream }

func (u upstreamReader) Read(b []byte) (int, error) {
	s := u.s
	n, err := s.ans.Read(b)
	if n > 0 {
		s.reads.Add(1)
	}
	return n, err
}

// msgNote is the msg of the line logged for each thing the checks noticed;
// the sentence saying what, which names ids the agent chose, is its
// message attribute.
const msgNote = "stream note"

// note logs and counts what the stream checks noticed.
func (s *stream) note(notes []agui.Note) {
	for _, n := range notes {
		s.p.m.notes.WithLabelValues(n.Kind).Inc()
		level := slog.LevelInfo
		if n.Kind == "violation" || n.Kind == "interrupt_frontend" || n.Kind == "limit_exceeded" {
			level = slog.LevelWarn
		}
		s.log.Log(s.ctx, level, msgNote, "kind", n.Kind, "rule", n.Rule, "id", n.ID, "message", n.Message)
	}
}

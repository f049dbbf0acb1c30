package proxy

import (
	"context"
	"net"
	"time"
)

// aguard must notice a peer hanging up even while nothing is being written:
// a consumer that leaves a silent stream, or leaves while the agent still
// holds its response headers, must not keep the agent working (and billing)
// for nobody; an agent that closes an idle connection must not be sent the
// next request on it. An SSE consumer sends nothing after its request, and an
// agent sends nothing on an idle connection, so any sign of life on the read
// side is the peer closing it.
//
// On Linux one epoll set (hangups, in hangup_linux.go) watches all of these
// connections for the peer's close, with no goroutine per connection;
// elsewhere, or for a connection without a file descriptor, a goroutine per
// stream blocks in a read (watchByReading), and requests and agent
// connections are not watched (an agent connection is still checked before
// it is reused: see upconn.go).

// watcher is told that the peer of a watched connection hung up. hungUp runs
// on the goroutine that serves every watched connection: it must not block.
type watcher interface{ hungUp() }

// hungUp implements watcher: the stream's consumer left.
func (s *stream) hungUp() {
	// interrupt may wait for the stream's upstream read: not here.
	go s.interrupt(errConsumerGone)
}

// cancelOnHangup cancels a request's call to the agent when its consumer
// leaves.
type cancelOnHangup context.CancelCauseFunc

func (c cancelOnHangup) hungUp() { c(errConsumerGone) }

// watch registers c with the proxy's shared watcher for w; ok is false where
// there is none, or c has no descriptor.
func (p *Proxy) watch(c net.Conn, w watcher) (stop func(), ok bool) {
	if h := p.hangupSet(); h != nil {
		return h.add(c, w)
	}
	return nil, false
}

// watchConsumer makes s interrupted (errConsumerGone) when the consumer on c
// hangs up. The returned function stops the watch; run calls it before it
// writes the stream's end.
func (p *Proxy) watchConsumer(c net.Conn, s *stream) (stop func()) {
	if stop, ok := p.watch(c, s); ok {
		return stop
	}
	return watchByReading(c, s)
}

// watchRequest calls cancel(errConsumerGone) when the consumer on c hangs up
// while its request waits for the agent. Without a shared watcher it watches
// nothing: the request waits for the agent or --upstream-timeout (reading c
// here would take bytes from the server).
func (p *Proxy) watchRequest(c net.Conn, cancel context.CancelCauseFunc) (stop func()) {
	if stop, ok := p.watch(c, cancelOnHangup(cancel)); ok {
		return stop
	}
	return func() {}
}

// hangupSet is the proxy's shared watcher, started when first needed; nil
// where there is none. None is started once the proxy is closing (Close
// would not see it).
func (p *Proxy) hangupSet() *hangups {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hangups == nil && !p.hangupsTried && !p.aborted {
		p.hangupsTried = true
		h, err := newHangups()
		if err != nil {
			p.log.Warn("consumers are watched by a goroutine each; agent connections are checked only before reuse", "err", err)
			return nil
		}
		p.hangups = h
	}
	return p.hangups
}

// watchByReading watches c with a goroutine blocked in a read: it returns
// only when the peer has gone, or when stop sets a past read deadline (then s
// is released and interrupt is a no-op). stop clears the deadline again.
func watchByReading(c net.Conn, s *stream) (stop func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		var buf [1]byte
		for {
			if _, err := c.Read(buf[:]); err != nil {
				s.interrupt(errConsumerGone)
				return
			}
		}
	}()
	return func() {
		c.SetReadDeadline(time.Now())
		<-done
		c.SetReadDeadline(time.Time{})
	}
}

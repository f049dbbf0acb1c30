package proxy

import (
	"net"
	"time"
)

// A stream must notice its consumer hanging up even while the agent is
// silent: otherwise the agent keeps working (and billing) for nobody until a
// heartbeat write fails. An SSE consumer sends nothing after its request, so
// any sign of life on the connection's read side is the peer closing it.
//
// On Linux one epoll set (hangups, in hangup_linux.go) watches every
// stream's connection for the peer's close, with no goroutine per stream;
// elsewhere, or for a connection without a file descriptor, a goroutine per
// stream blocks in a read (watchByReading).

// watchConsumer makes s interrupted (errConsumerGone) when the consumer on c
// hangs up. The returned function stops the watch; run calls it before it
// closes c.
func (p *Proxy) watchConsumer(c net.Conn, s *stream) (stop func()) {
	if h := p.hangupSet(); h != nil {
		if stop, ok := h.add(c, s); ok {
			return stop
		}
	}
	return watchByReading(c, s)
}

// hangupSet is the proxy's shared watcher, started with the first stream;
// nil where there is none. None is started once streams are being aborted
// (Close would not see it).
func (p *Proxy) hangupSet() *hangups {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hangups == nil && !p.hangupsTried && !p.aborted {
		p.hangupsTried = true
		h, err := newHangups()
		if err != nil {
			p.log.Warn("consumers are watched by a goroutine each", "err", err)
			return nil
		}
		p.hangups = h
	}
	return p.hangups
}

// watchByReading watches c with a goroutine blocked in a read: it returns
// only when the peer has gone, or when stop sets a past read deadline (then s
// is released and interrupt is a no-op).
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
	}
}

package proxy

import (
	"bytes"
	"errors"
	"net"
	"time"

	"github.com/aguard/aguard/internal/rawio"
	"github.com/valyala/fasthttp"
)

// The consumer's side of the data plane: the connections consumers open,
// how each request head is read, and what becomes of a connection after a
// stream.

// errBareLF fails the read of a request head with a line ended by a bare LF.
var errBareLF = errors.New("a line of the request head ends in a bare LF; HTTP/1.1 lines end in CRLF (RFC 9112 §2.2)")

// consumerListener hands the server consumerConns.
type consumerListener struct{ net.Listener }

func (l consumerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok && err == nil {
		return newConsumerConn(tc), nil
	}
	return c, err
}

// consumerConn is a consumer's connection as the server reads it. fasthttp
// accepts a bare LF inside a request head but waits for CRLF CRLF to end one,
// so a head whose lines end in bare LF would wait for the read timeout.
// consumerConn watches each head as it is read and fails the read at the
// first bare LF; the server answers 400 bad_request at once. (RFC 9112 §2.2
// lets a server refuse bare LF: aguard does, so that every line it parses is
// one the agent parses the same way.) Bodies are not looked at.
//
// A head starts when the connection opens and after each response (any
// write but an interim 1xx one); it ends at its empty line. It embeds the
// *net.TCPConn so that its descriptor stays reachable (File, SyscallConn).
type consumerConn struct {
	*net.TCPConn
	raw     net.Conn // the TCPConn's Read and Write as raw system calls (rawio.Conn)
	inHead  bool
	prev    byte // the last byte of the head read so far
	lineLen int  // bytes of the current line, CR excluded
	sawLine bool // the request line has been read (empty lines before it are ignored)
	err     error
}

func newConsumerConn(c *net.TCPConn) *consumerConn {
	return &consumerConn{TCPConn: c, raw: rawio.Conn(c), inHead: true}
}

func (c *consumerConn) Read(b []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.raw.Read(b)
	if c.inHead && n > 0 {
		if bad := c.scanHead(b[:n]); bad >= 0 {
			// Hand over what precedes the bare LF: fasthttp must not see a
			// head it would take; the next read fails.
			c.err = errBareLF
			if bad == 0 {
				return 0, c.err
			}
			return bad, nil
		}
	}
	return n, err
}

// scanHead follows the head through b and returns the index of the first
// bare LF in it, or -1.
func (c *consumerConn) scanHead(b []byte) int {
	for i, ch := range b {
		switch ch {
		case '\n':
			if c.prev != '\r' {
				return i
			}
			if c.lineLen == 0 && c.sawLine {
				c.inHead = false // the empty line: the body follows
				return -1
			}
			c.sawLine = c.sawLine || c.lineLen > 0
			c.lineLen = 0
		case '\r':
		default:
			c.lineLen++
		}
		c.prev = ch
	}
	return -1
}

func (c *consumerConn) Write(b []byte) (int, error) {
	if !isInterim(b) {
		c.inHead, c.prev, c.lineLen, c.sawLine = true, 0, 0, false
	}
	return c.raw.Write(b)
}

// isInterim reports a write starting with an interim (1xx) status line, as
// "100 Continue": the request's body, not a new head, comes next.
func isInterim(b []byte) bool {
	return len(b) > 9 && bytes.HasPrefix(b, []byte("HTTP/1.")) && b[9] == '1'
}

// serveNext keeps c, the connection of a stream that just ended, for the
// consumer's next request: it waits for it as long as the server keeps an
// idle connection (IdleTimeout), then serves it and those that follow
// (Server.ServeConn). The connection is closed when the wait runs out, when
// the consumer closes it, or when aguard closes.
func (p *Proxy) serveNext(c net.Conn) {
	if !p.trackIdle(c, true) {
		c.Close()
		return
	}
	c.SetReadDeadline(time.Now().Add(p.server.IdleTimeout))
	err := awaitReadable(c)
	if !p.trackIdle(c, false) || err != nil {
		c.Close()
		return
	}
	if tc, ok := c.(*net.TCPConn); ok {
		c = newConsumerConn(tc)
	}
	p.server.ServeConn(c) // closes c, or hands it to a stream
}

// trackIdle adds (on) or removes a consumer connection waiting for its next
// request. Adding reports false once the proxy is closing; so does removing,
// when Close has taken the connection.
func (p *Proxy) trackIdle(c net.Conn, on bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		if p.closing {
			return false
		}
		p.idle[c] = struct{}{}
		return true
	}
	_, ok := p.idle[c]
	delete(p.idle, c)
	return ok && !p.closing
}

// closeIdle closes the consumer connections waiting for a next request.
func (p *Proxy) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range idle {
		c.Close()
	}
}

// pipelined reports whether the consumer sent anything after its request
// before the stream started (a pipelined request, RFC 9112 §9.3.2): the
// server's read buffer would hold it, and it is lost with that buffer. c is
// the hijacked connection (it reads the server's buffer first), raw the
// socket under it. What is read is dropped: the stream then ends with
// Connection: close, and the consumer sends it again.
func pipelined(c, raw net.Conn) bool {
	raw.SetReadDeadline(aLongTimeAgo)
	defer raw.SetReadDeadline(time.Time{})
	var b [1]byte
	n, _ := c.Read(b[:])
	return n > 0
}

// checkFraming refuses a request head that a proxy and an agent could read
// differently (RFC 9112 §11.2, request smuggling): a folded header line
// (obs-fold, §5.2), which fasthttp would join into the value the policy
// reads; or a body framed both by Content-Length and by Transfer-Encoding
// (§6.3), which fasthttp would read by one and the policy never see the
// other.
func checkFraming(h *fasthttp.RequestHeader) error {
	var cl, te bool
	for line := range bytes.SplitSeq(h.RawHeaders(), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			return errors.New("a header line is folded onto the one before (obs-fold, RFC 9112 §5.2); send it on one line")
		}
		name, _, _ := bytes.Cut(line, []byte(":"))
		name = bytes.TrimSpace(name)
		cl = cl || bytes.EqualFold(name, []byte("Content-Length"))
		te = te || bytes.EqualFold(name, []byte("Transfer-Encoding"))
	}
	if cl && te {
		return errors.New("the body is framed both by Content-Length and by Transfer-Encoding (RFC 9112 §6.3); send one")
	}
	return nil
}

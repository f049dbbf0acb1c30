package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aguard/aguard/internal/chunked"
	"github.com/aguard/aguard/internal/rawio"
	"github.com/valyala/fasthttp"
)

// The connections to one agent server are aguard's own (pool), not
// fasthttp.HostClient's: aguard must see a pooled connection close while it
// is idle, check it before it is reused, know which connection a request is
// on (to cancel it when the consumer leaves before the agent answers) and
// whether the agent can have read a request that failed. fasthttp still
// writes each request and reads each answer (Request.Write,
// Response.ReadLimitBody with a streamed body).

var (
	errNoFreeConns = errors.New("every connection to the agent server is in use")
	errPeerClosed  = errors.New("the peer closed the connection")
)

// maxConnWait is how long a request waits for a connection when every one
// the agent server may have is in use.
const maxConnWait = 5 * time.Second

// readBufferSize is the buffer an answer is read through.
const readBufferSize = 4096

var (
	readers sync.Pool // *bufio.Reader
	writers sync.Pool // *bufio.Writer
)

// pool holds the connections to one agent server: those carrying a request
// or its answer, and the idle ones, reused most recently used first.
type pool struct {
	addr   string
	tls    *tls.Config // nil for http://
	dialer net.Dialer
	keep   *keepalive
	// watch registers a connection with the proxy's hangup watcher; nil
	// or ok false where there is none.
	watch func(net.Conn, watcher) (stop func(), ok bool)
	m     *Metrics

	slots chan struct{} // one per open connection: the limit on them
	ready chan struct{} // signalled when a connection is put back

	mu         sync.Mutex
	head, tail *upConn // idle connections, the most recently used last
	closed     bool
}

func newPool(addr string, tlsConf *tls.Config, maxConns int, keep *keepalive, m *Metrics) *pool {
	return &pool{
		addr:   addr,
		tls:    tlsConf,
		dialer: net.Dialer{KeepAlive: 30 * time.Second},
		keep:   keep,
		m:      m,
		slots:  make(chan struct{}, maxConns),
		ready:  make(chan struct{}, 1),
	}
}

// get returns a connection for one request: the most recently used idle one
// that is still fit to carry it, or a new one.
func (p *pool) get(ctx context.Context) (*upConn, error) {
	var wait <-chan time.Time
	for {
		if c := p.pop(); c != nil {
			if reason := c.unfit(p.keep.bound(time.Now())); reason != "" {
				p.m.upstreamConns[reason].Inc()
				c.close()
				continue
			}
			p.m.upstreamConns[connReused].Inc()
			return c, nil
		}
		select {
		case p.slots <- struct{}{}:
			return p.dial(ctx)
		default:
		}
		if wait == nil {
			t := time.NewTimer(maxConnWait)
			defer t.Stop()
			wait = t.C
		}
		select {
		case p.slots <- struct{}{}:
			return p.dial(ctx)
		case <-p.ready:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-wait:
			return nil, errNoFreeConns
		}
	}
}

// dial opens a connection; the caller holds a slot for it.
func (p *pool) dial(ctx context.Context) (*upConn, error) {
	tcp, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		<-p.slots
		return nil, err
	}
	c := &upConn{pool: p, tcp: tcp}
	// The request and the answer's head go through raw system calls too
	// (package rawio); the body, once streaming, through wire.readFD.
	c.conn = &wire{Conn: rawio.Conn(tcp), c: c, fd: -1}
	if p.tls != nil {
		tc := tls.Client(c.conn, p.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", p.addr, err)
		}
		c.conn = tc
	}
	if p.watch != nil {
		if stop, ok := p.watch(tcp, c); ok {
			c.stopWatch = stop
		}
	}
	p.m.upstreamConns[connDialed].Inc()
	return c, nil
}

// pop takes the most recently used idle connection, or nil.
func (p *pool) pop() *upConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.tail
	if c == nil {
		return nil
	}
	p.unlinkLocked(c)
	return c
}

// put makes c idle, ready for the next request; or closes it when it cannot
// be (the agent closed it meanwhile, or the pool is closed). Its idle time
// counts from the end of its last answer.
func (p *pool) put(c *upConn) {
	now := time.Now()
	p.mu.Lock()
	if p.closed || c.peerGone.Load() || c.closed.Load() || c.shut.Load() {
		p.mu.Unlock()
		c.close()
		return
	}
	c.idleSince = now
	if c.answered.Before(now) {
		c.idleSince = c.answered
	}
	c.pooled = true
	c.prev, c.next = p.tail, nil
	if p.tail != nil {
		p.tail.next = c
	} else {
		p.head = c
	}
	p.tail = c
	left := p.keep.bound(now) - now.Sub(c.idleSince)
	if c.timer == nil {
		c.timer = time.AfterFunc(left, func() { p.expire(c) })
	} else {
		c.timer.Reset(left)
	}
	p.mu.Unlock()
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

func (p *pool) unlinkLocked(c *upConn) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		p.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		p.tail = c.prev
	}
	c.prev, c.next, c.pooled = nil, nil, false
	if c.timer != nil {
		c.timer.Stop()
	}
}

// expire closes c if it is still idle and has been for the keep-alive bound
// (which may have grown since c was put back: then it waits again).
func (p *pool) expire(c *upConn) {
	now := time.Now()
	p.mu.Lock()
	if !c.pooled {
		p.mu.Unlock()
		return
	}
	if left := p.keep.bound(now) - now.Sub(c.idleSince); left > 0 {
		c.timer.Reset(left)
		p.mu.Unlock()
		return
	}
	p.unlinkLocked(c)
	p.mu.Unlock()
	p.m.upstreamConns[connExpired].Inc()
	c.close()
}

// agentClosed handles the agent closing c (seen by the hangup watcher): an
// idle connection leaves the pool at once, and how long it had been idle
// teaches the pool the agent's own keep-alive timeout. A connection carrying
// an answer is left to finish; it is not reused.
func (p *pool) agentClosed(c *upConn) {
	c.peerGone.Store(true)
	now := time.Now()
	p.mu.Lock()
	if !c.pooled {
		p.mu.Unlock()
		return
	}
	idle := now.Sub(c.idleSince)
	p.unlinkLocked(c)
	p.mu.Unlock()
	p.keep.observe(idle, now)
	p.m.upstreamConns[connAgentClosed].Inc()
	go c.close()
}

// close closes every idle connection; connections in use are closed when
// their answers are released.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	var idle []*upConn
	for c := p.head; c != nil; {
		next := c.next
		p.unlinkLocked(c)
		idle = append(idle, c)
		c = next
	}
	p.mu.Unlock()
	for _, c := range idle {
		c.close()
	}
}

// idleConns counts the idle connections.
func (p *pool) idleConns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := p.head; c != nil; c = c.next {
		n++
	}
	return n
}

// Why a connection was opened, reused or closed
// (aguard_upstream_connections_total{event}).
const (
	connDialed      = "dialed"       // opened for a request
	connReused      = "reused"       // an idle connection carried another request
	connAgentClosed = "agent_closed" // the agent closed it while idle
	connExpired     = "expired"      // idle for the keep-alive bound
)

var connEvents = []string{connDialed, connReused, connAgentClosed, connExpired}

// upConn is one connection to an agent server.
type upConn struct {
	pool *pool
	tcp  net.Conn // the TCP connection: what the kernel is asked about
	conn net.Conn // what HTTP is written on and read from: the wire, or TLS over it
	// beforeRead, while a stream reads this connection, is called before
	// each socket read, on the stream's goroutine: the stream flushes its
	// pending output there, since the read may block.
	beforeRead func() error
	// read counts the bytes read from the socket; requests, the requests
	// started; socketReads, the system calls reading the socket directly
	// (wire.readFD). All belong to the goroutine using the connection.
	read        int64
	requests    int
	socketReads int
	stopWatch   func()
	// answered is when the last answer ended (its last byte read): the
	// agent's idle clock started about then.
	answered  time.Time
	closeOnce sync.Once
	closed    atomic.Bool
	shut      atomic.Bool // shutdown ended its use: it is never reused
	peerGone  atomic.Bool // the agent closed or reset it
	// pumping: a stream pumps the answer inside RawConn.Read
	// (stream.pumpRaw); the agent's close and shutdown wake it (poke).
	pumping atomic.Bool

	// Guarded by pool.mu.
	pooled     bool
	idleSince  time.Time
	prev, next *upConn
	timer      *time.Timer
}

// hungUp implements watcher: the agent closed the connection.
func (c *upConn) hungUp() {
	c.pool.agentClosed(c)
	c.poke()
}

// poke wakes a stream pumping the answer (stream.pumpRaw) once the agent
// has closed the connection or aguard has shut it down: the close may have
// come in the same readiness as the bytes before it, which a read returned
// without it, so no readiness is left to wait for. A read deadline in the
// past ends the wait; the pump then reads on, trusting no short read
// (wire.readFD), until it reads the end.
func (c *upConn) poke() {
	if c.pumping.Load() {
		c.tcp.SetReadDeadline(aLongTimeAgo)
	}
}

// aLongTimeAgo is a deadline that has passed.
var aLongTimeAgo = time.Unix(1, 0)

// unfit says why an idle connection, just taken from the pool, must not
// carry a request: the agent closed it (agent_closed), or it has been idle
// for the keep-alive bound (expired); "" when it may.
func (c *upConn) unfit(bound time.Duration) string {
	if c.peerGone.Load() || peerClosed(c.tcp) {
		return connAgentClosed
	}
	if time.Since(c.idleSince) >= bound {
		return connExpired
	}
	return ""
}

// close closes the connection (once) and frees its slot.
func (c *upConn) close() {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		if c.stopWatch != nil {
			c.stopWatch()
		}
		c.tcp.Close()
		<-c.pool.slots
	})
}

// shutdown ends the connection's use at once without closing its
// descriptor: the agent sees its request cancelled, and a read of it
// returns, whether blocked in Go's netpoller or made by a stream pumping
// the answer inside the connection's RawConn.Read (stream.pumpRaw), which
// Close would wait for. It never blocks, and may be called from any
// goroutine; the connection is closed when its answer is released.
func (c *upConn) shutdown() {
	c.shut.Store(true)
	tc, ok := c.tcp.(interface {
		CloseRead() error
		CloseWrite() error
	})
	if !ok {
		c.close()
		return
	}
	tc.CloseRead()
	tc.CloseWrite()
	c.poke()
}

// wire is the TCP side of an upConn: it counts what it reads and runs the
// stream's flush before each read.
type wire struct {
	net.Conn
	c *upConn
	// fd is the socket while a stream pumps the answer inside the
	// connection's RawConn.Read (stream.pumpRaw), -1 otherwise: Read then
	// reads it directly and never blocks. drained: the last such read was
	// short, so the socket held nothing more; the next Read reports EAGAIN
	// without a system call, until the socket is readable again.
	fd      int
	drained bool
}

// flushFirst runs the stream's flush (upConn.beforeRead), if one is set,
// before a read of the socket.
func (w *wire) flushFirst() error {
	if f := w.c.beforeRead; f != nil {
		return f()
	}
	return nil
}

func (w *wire) Read(b []byte) (int, error) {
	if w.fd >= 0 {
		return w.readFD(b)
	}
	if err := w.flushFirst(); err != nil {
		return 0, err
	}
	n, err := w.Conn.Read(b)
	w.c.read += int64(n)
	return n, err
}

// exchangeError is a failed round trip, with what is known about whether
// the agent can have read the request.
type exchangeError struct {
	err error
	// unanswered: not one byte of an answer came back.
	unanswered bool
	// unreceived: the agent's TCP stack acknowledged no byte of the
	// request, so the agent cannot have read any of it (it closed the
	// connection before the request arrived).
	unreceived bool
}

func (e *exchangeError) Error() string { return e.err.Error() }
func (e *exchangeError) Unwrap() error { return e.err }

// roundTrip sends req on c and reads the head of the agent's answer into
// resp; the body is left to read (reply). ctx bounds the exchange: its
// deadline is the upstream timeout, and cancelling it closes the connection.
// On failure the connection is closed, and the error is an *exchangeError
// unless ctx ended it (then it is ctx's cause).
func (c *upConn) roundTrip(ctx context.Context, req *fasthttp.Request, resp *fasthttp.Response) (br *bufio.Reader, err error) {
	c.requests++
	acked0, ackOK := ackedBytes(c.tcp)
	read0 := c.read
	stop := context.AfterFunc(ctx, func() { c.tcp.Close() })
	deadline, _ := ctx.Deadline()
	c.conn.SetDeadline(deadline)

	bw, _ := writers.Get().(*bufio.Writer)
	if bw == nil {
		bw = bufio.NewWriterSize(c.conn, 4096)
	} else {
		bw.Reset(c.conn)
	}
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	writers.Put(bw)

	br, _ = readers.Get().(*bufio.Reader)
	if br == nil {
		br = bufio.NewReaderSize(c.conn, readBufferSize)
	} else {
		br.Reset(c.conn)
	}
	if err == nil {
		resp.Header.DisableNormalizing()
		resp.SkipBody = req.Header.IsHead()
		resp.StreamBody = true
		err = resp.ReadLimitBody(br, 0)
	}
	if !stop() { // ctx ended the exchange and closed the connection
		releaseReader(br)
		c.close()
		return nil, context.Cause(ctx)
	}
	if err != nil {
		releaseReader(br)
		e := &exchangeError{err: err, unanswered: c.read == read0}
		if acked, ok := ackedBytes(c.tcp); e.unanswered && ok && ackOK && acked0 > 0 && acked == acked0 {
			// acked0 > 0: the kernel counts acknowledged bytes (the
			// request before this one was acknowledged).
			e.unreceived = true
		}
		c.close()
		return nil, e
	}
	// The body is read as long as the run lasts: no deadline on it.
	c.conn.SetDeadline(time.Time{})
	c.answered = time.Now() // for an answer without a body; see reply.Read
	return br, nil
}

func releaseReader(br *bufio.Reader) {
	br.Reset(nil)
	readers.Put(br)
}

// reply is the agent's answer to one request: its head in resp, its body
// read through Read from the connection that carried it, until release.
type reply struct {
	resp *fasthttp.Response
	conn *upConn
	br   *bufio.Reader   // the head was read through it; nil once a chunked body drained it
	body io.Reader       // the body; nil when the answer has none
	ch   *chunked.Reader // body, when it is chunked
	done bool            // the body was read to its end
	// reusableHead is headAllowsReuse, kept when dropHead let resp go.
	reusableHead bool
}

// newReply is the answer whose head resp was read from c through br. A
// chunked body (what a stream of events usually is) is read by a
// chunked.Reader, which gives br back as soon as it is empty; any other body through
// fasthttp's body stream.
func newReply(resp *fasthttp.Response, c *upConn, br *bufio.Reader) *reply {
	a := &reply{resp: resp, conn: c, br: br, body: resp.BodyStream()}
	if a.body != nil && resp.Header.ContentLength() == -1 {
		resp.CloseBodyStream() // never read: fasthttp takes it back
		a.ch = chunked.NewReader(br, c.conn, func() {
			releaseReader(a.br)
			a.br = nil
		})
		a.body = a.ch
	}
	return a
}

// Read reads the body.
func (a *reply) Read(b []byte) (int, error) {
	if a.body == nil {
		a.done = true
		return 0, io.EOF
	}
	n, err := a.body.Read(b)
	if err == io.EOF && !a.done {
		a.done = true
		a.conn.answered = time.Now()
	}
	return n, err
}

// abort ends the connection's use (upConn.shutdown): a Read of it returns,
// and the agent sees its request cancelled. It never blocks, and may be
// called from any goroutine until release, which closes the connection.
func (a *reply) abort() { a.conn.shutdown() }

// rawRead returns the connection's RawConn and its wire when the answer's
// body may be pumped inside RawConn.Read (stream.pumpRaw): a chunked body,
// read by aguard's own decoder, on a plain TCP connection the hangup
// watcher watches, where the platform lets the wire read the socket
// directly (wireReadsFD).
func (a *reply) rawRead() (syscall.RawConn, *wire) {
	if !wireReadsFD || a.ch == nil || a.conn.stopWatch == nil {
		// Without the hangup watcher, nothing would wake the pump when
		// the agent's close comes with its last bytes (upConn.poke).
		return nil, nil
	}
	w, ok := a.conn.conn.(*wire)
	if !ok { // TLS: its records are read through crypto/tls
		return nil, nil
	}
	raw, ok := rawConn(w.Conn)
	if !ok {
		return nil, nil
	}
	return raw, w
}

// rawConn is c's RawConn, when it has one.
func rawConn(c net.Conn) (syscall.RawConn, bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, false
	}
	raw, err := sc.SyscallConn()
	return raw, err == nil
}

// dropHead lets the answer's head go once it has been copied, when the
// body no longer needs it (a chunked body, read by a chunked.Reader): a
// stream that lasts holds what release needs of it, not fasthttp's
// Response.
func (a *reply) dropHead() {
	if a.ch == nil || a.resp == nil {
		return
	}
	a.reusableHead = a.headAllowsReuse()
	fasthttp.ReleaseResponse(a.resp)
	a.resp = nil
}

// headAllowsReuse reports whether the answer's head lets its connection
// carry another request once the body has been read to its end.
func (a *reply) headAllowsReuse() bool {
	h := &a.resp.Header
	return h.IsHTTP11() && !h.ConnectionClose() && h.ContentLength() != -2 // -2: the body ran to the close
}

// release is the end of the answer: the connection goes back to the pool
// when the body was read to its end and the connection may carry another
// request, and is closed otherwise; then resp is released.
func (a *reply) release() {
	head := a.reusableHead
	if a.resp != nil {
		head = a.headAllowsReuse()
	}
	reusable := (a.done || a.body == nil) && head &&
		(a.br == nil || a.br.Buffered() == 0) && (a.ch == nil || !a.ch.Extra())
	if a.br != nil {
		releaseReader(a.br)
	}
	if reusable {
		a.conn.pool.put(a.conn)
	} else {
		a.conn.close()
	}
	if a.resp != nil {
		fasthttp.ReleaseResponse(a.resp)
	}
}

package proxy

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// upstream is one agent server: its base URL and a streaming client for it.
type upstream struct {
	base   *url.URL
	prefix string // route path prefix; "" for the default upstream
	legacy bool   // the agent server is on the 0.x line
	client *fasthttp.HostClient
}

func newUpstream(rawURL, prefix, protocol string, maxConns int) (*upstream, error) {
	if protocol != "" && protocol != "1.0" && protocol != "0.x" {
		return nil, fmt.Errorf("upstream %q: protocol: want 1.0 or 0.x, got %q", rawURL, protocol)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("upstream %q: %w", rawURL, err)
	}
	addr := u.Host
	if u.Port() == "" {
		if u.Scheme == "https" {
			addr = net.JoinHostPort(u.Hostname(), "443")
		} else {
			addr = net.JoinHostPort(u.Hostname(), "80")
		}
	}
	d := &net.Dialer{KeepAlive: 30 * time.Second}
	hc := &fasthttp.HostClient{
		Addr:  addr,
		IsTLS: u.Scheme == "https",
		// Streams are read as they arrive; fasthttp's ReadTimeout and
		// MaxResponseBodySize would stay armed over the whole body and cut
		// long runs, so both stay off. The header deadline is set per request
		// (DoTimeout) and lifted once the headers are in (see trackedConn).
		StreamResponseBody:            true,
		MaxConns:                      maxConns,
		MaxConnWaitTimeout:            5 * time.Second,
		DisableHeaderNamesNormalizing: true,
		DisablePathNormalizing:        true,
		NoDefaultUserAgentHeader:      true,
		Dial: func(addr string) (net.Conn, error) {
			c, err := d.Dial("tcp", addr)
			if err != nil {
				return nil, err
			}
			return newTrackedConn(c), nil
		},
	}
	return &upstream{base: u, prefix: prefix, legacy: protocol == "0.x", client: hc}, nil
}

// target builds the upstream URL: the base URL with the request URI's path
// appended, and its query kept.
func (u *upstream) target(requestURI []byte) string {
	base := *u.base
	path, query, _ := strings.Cut(string(requestURI), "?")
	base.Path = strings.TrimSuffix(base.Path, "/") + path
	base.RawPath = ""
	base.RawQuery = query
	return base.String()
}

// trackedConn is the connection the upstream client dials. fasthttp arms the
// connection's read deadline for DoTimeout and, with a streamed body, leaves
// it armed while the body is read, which would cut a long run. The response
// reports the connection's LocalAddr, so the address carries a way back to the
// connection: once the headers are in, the proxy lifts the deadline.
type trackedConn struct {
	net.Conn
	addr trackedAddr
	// beforeRead, while a stream reads this connection, is called before
	// each socket read, on the stream's goroutine: the stream flushes its
	// pending output there, since the read may block.
	beforeRead func() error
}

// Read implements net.Conn.
func (c *trackedConn) Read(b []byte) (int, error) {
	if c.beforeRead != nil {
		if err := c.beforeRead(); err != nil {
			return 0, err
		}
	}
	return c.Conn.Read(b)
}

type trackedAddr struct {
	net.Addr
	conn *trackedConn
}

func newTrackedConn(c net.Conn) *trackedConn {
	tc := &trackedConn{Conn: c}
	tc.addr = trackedAddr{Addr: c.LocalAddr(), conn: tc}
	return tc
}

func (c *trackedConn) LocalAddr() net.Addr { return &c.addr }

// liftReadDeadline removes the header deadline from the connection that
// carried resp.
func liftReadDeadline(resp *fasthttp.Response) {
	if c := connOf(resp); c != nil {
		c.Conn.SetReadDeadline(time.Time{})
	}
}

// connOf is the connection that carried resp, or nil.
func connOf(resp *fasthttp.Response) *trackedConn {
	if a, ok := resp.LocalAddr().(*trackedAddr); ok {
		return a.conn
	}
	return nil
}

// upstreamStatus maps an error of the upstream request to the HTTP status the
// consumer gets: 504 when the agent did not answer in time, 502 otherwise.
func upstreamStatus(err error) int {
	var ne net.Error
	if errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, fasthttp.ErrDialTimeout) ||
		errors.Is(err, fasthttp.ErrTLSHandshakeTimeout) || (errors.As(err, &ne) && ne.Timeout()) {
		return fasthttp.StatusGatewayTimeout
	}
	return fasthttp.StatusBadGateway
}

// hopHeaders are the hop-by-hop headers (RFC 9110 §7.6.1) a proxy must not
// forward, plus those named in Connection.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func stripHopHeaders(h interface {
	Peek(string) []byte
	Del(string)
}) {
	if c := h.Peek("Connection"); len(c) > 0 {
		for name := range strings.SplitSeq(string(c), ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

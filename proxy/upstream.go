package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/valyala/fasthttp"
)

// upstream is one agent server: its base URL, the route that leads to it,
// and the pool of connections to it.
type upstream struct {
	base     *url.URL
	basePath string   // base's path as written (escaped), without a trailing slash
	prefix   string   // route path prefix; "" for the default upstream
	segments []string // prefix's segments, percent-decoded
	legacy   bool     // the agent server is on the 0.x line
	keep     *keepalive
	pool     *pool
}

func newUpstream(rawURL, prefix, protocol string, maxConns int, keep *keepalive, m *Metrics) (*upstream, error) {
	if protocol != "" && protocol != "1.0" && protocol != "0.x" {
		return nil, fmt.Errorf("upstream %q: protocol: want 1.0 or 0.x, got %q", rawURL, protocol)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("upstream %q: %w", rawURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("upstream %q: want an http:// or https:// URL", rawURL)
	}
	segments, err := routeSegments(prefix)
	if err != nil {
		return nil, err
	}
	addr := u.Host
	if u.Port() == "" {
		if u.Scheme == "https" {
			addr = net.JoinHostPort(u.Hostname(), "443")
		} else {
			addr = net.JoinHostPort(u.Hostname(), "80")
		}
	}
	var tlsConf *tls.Config
	if u.Scheme == "https" {
		tlsConf = &tls.Config{ServerName: u.Hostname(), NextProtos: []string{"http/1.1"}}
	}
	return &upstream{
		base:     u,
		basePath: strings.TrimSuffix(u.EscapedPath(), "/"),
		prefix:   prefix,
		segments: segments,
		legacy:   protocol == "0.x",
		keep:     keep,
		pool:     newPool(addr, tlsConf, maxConns, keep, m),
	}, nil
}

// target is the request-target the agent receives: the base URL's path with
// the consumer's path and query appended exactly as received (RFC 3986
// percent-encoding is neither added nor removed).
func (u *upstream) target(path, query []byte) string {
	var b strings.Builder
	b.Grow(len(u.basePath) + len(path) + 1 + len(query))
	b.WriteString(u.basePath)
	b.Write(path)
	if len(query) > 0 {
		b.WriteByte('?')
		b.Write(query)
	}
	return b.String()
}

// maxResends bounds how often one request is sent again after failing on a
// connection the agent had closed.
const maxResends = 2

// do sends req to the agent server and returns its answer, the body left to
// read. ctx bounds waiting for a connection, connecting, sending and
// receiving the answer's head; cancelling it abandons the request.
//
// A request that fails is sent again, on another connection, only when the
// agent cannot have acted on it: its TCP stack acknowledged none of it (the
// agent had closed the connection before the request arrived); or the
// method is one RFC 9110 §9.2.2 lets a client repeat and the connection was
// a reused one that answered nothing. A run (POST) that may have reached the
// agent is never sent twice.
func (u *upstream) do(ctx context.Context, req *fasthttp.Request) (*reply, error) {
	for resends := 0; ; resends++ {
		c, err := u.pool.get(ctx)
		if err != nil {
			return nil, err
		}
		reused := c.requests > 0
		resp := fasthttp.AcquireResponse()
		br, err := c.roundTrip(ctx, req, resp)
		if err == nil {
			if ka := resp.Header.Peek("Keep-Alive"); len(ka) > 0 {
				u.keep.advertise(ka)
			}
			return newReply(resp, c, br), nil
		}
		fasthttp.ReleaseResponse(resp)
		var e *exchangeError
		if errors.As(err, &e) && resends < maxResends && (e.unreceived || (reused && e.unanswered && replayable(req))) {
			u.pool.m.upstreamResends.Inc()
			continue
		}
		return nil, err
	}
}

// replayable reports a method a client may repeat by itself: safe methods
// (RFC 9110 §9.2.1), as Go's net/http transport does.
func replayable(req *fasthttp.Request) bool {
	h := &req.Header
	return h.IsGet() || h.IsHead() || h.IsOptions() || h.IsTrace()
}

// upstreamStatus maps an error of the upstream request to the HTTP status the
// consumer gets: 504 when the agent did not answer in time, 502 otherwise.
func upstreamStatus(err error) int {
	var timeout interface{ Timeout() bool } // net.Error, and fasthttp's ErrTimeout
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &timeout) && timeout.Timeout()) {
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
	PeekAll(string) [][]byte
	Del(string)
}) {
	var named []string
	for _, c := range h.PeekAll("Connection") {
		for name := range strings.SplitSeq(string(c), ",") {
			if name = strings.TrimSpace(name); name != "" {
				named = append(named, name)
			}
		}
	}
	for _, name := range named {
		h.Del(name)
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

package proxy

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"github.com/aguard/aguard/auth"
	"github.com/aguard/aguard/policy"
	"github.com/valyala/fasthttp"
)

// This file is the data plane's identity: who sent a request (Options.Auth,
// package auth), the 401 that answers a request that proves no one, and the
// audit line of every request aguard refuses (README, "Identity and
// audit").

// subjectKey is the RequestCtx user value that holds the authenticated
// subject, for the audit line of a request refused after authentication.
type subjectKey struct{}

// unreadKey is the RequestCtx user value set when a request was refused
// before its request line could be read: its audit line then names no
// method and no path.
type unreadKey struct{}

// realm names aguard in its challenges (RFC 9110 §11.6.1).
const realm = `Bearer realm="aguard"`

// authenticate says who sent the request of ctx. Without Options.Auth it
// returns nil and true: nobody is authenticated, and everyone may pass.
// Otherwise a request that proves no one is answered (401 unauthenticated,
// or 503 auth_unavailable when aguard cannot check) and it returns false:
// nothing of it may reach the agent.
func (p *Proxy) authenticate(ctx *fasthttp.RequestCtx) (*auth.Identity, bool) {
	if p.opt.Auth == nil {
		return nil, true
	}
	hdr := &ctx.Request.Header
	id, err := p.opt.Auth.Authenticate(context.Background(), func(name string) []string {
		vs := hdr.PeekAll(name)
		out := make([]string, len(vs))
		for i, v := range vs {
			out[i] = string(v)
		}
		return out
	})
	if err == nil {
		ctx.SetUserValue(subjectKey{}, id.Subject)
		return id, true
	}
	detail := err.Error()
	var ae *auth.Error
	if errors.As(err, &ae) {
		detail = ae.Detail
	}
	switch {
	case errors.Is(err, auth.ErrUnavailable):
		p.fail(ctx, fasthttp.StatusServiceUnavailable, errAuthUnavailable, "aguard cannot verify credentials now: "+detail)
		ctx.Response.Header.Set("Retry-After", "5")
	case errors.Is(err, auth.ErrInvalidToken):
		p.fail(ctx, fasthttp.StatusUnauthorized, errUnauthenticated, "the credentials do not authenticate anyone: "+detail)
		// RFC 6750 §3: the error and a description of it.
		ctx.Response.Header.Set("WWW-Authenticate", realm+`, error="invalid_token", error_description="`+challengeText(detail)+`"`)
	default:
		p.fail(ctx, fasthttp.StatusUnauthorized, errUnauthenticated, "the request carries no credentials: "+detail)
		// RFC 6750 §3.1: no error code for a request without credentials.
		ctx.Response.Header.Set("WWW-Authenticate", realm)
	}
	return nil, false
}

// challengeText makes s fit an error_description, whose characters RFC
// 6750 §3 limits to printable ASCII but '"' and '\', and bounds it.
func challengeText(s string) string {
	const max = 200
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= max {
			b.WriteString("...")
			break
		}
		switch {
		case r == '"':
			b.WriteByte('\'')
		case r == '\\' || r < 0x20 || r > 0x7e:
			b.WriteByte(' ')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// policyIdentity is id as the policy input carries it (input.identity).
func policyIdentity(id *auth.Identity) *policy.Identity {
	if id == nil {
		return nil
	}
	return &policy.Identity{Subject: id.Subject, Issuer: id.Issuer, Claims: id.Claims, Source: id.Source}
}

// subject is the requester recorded on the ledger's calls.
func subject(id *auth.Identity) string {
	if id == nil {
		return ""
	}
	return id.Subject
}

// audit writes the audit line of a request aguard refused itself (a 4xx,
// or 503): who sent it (the subject, once authenticated), from where, and
// what it was answered. The message and the path are attributes, escaped
// by the log's handler. 502 and 504 (the agent unreachable) are failures,
// not refusals, and are not audited.
func (p *Proxy) audit(ctx *fasthttp.RequestCtx, status int, code, message string) {
	if status < 400 || (status >= 500 && status != fasthttp.StatusServiceUnavailable) {
		return
	}
	sub, _ := ctx.UserValue(subjectKey{}).(string)
	method := string(ctx.Method())
	path, _, _ := strings.Cut(string(ctx.Request.Header.RequestURI()), "?")
	if unread, _ := ctx.UserValue(unreadKey{}).(bool); unread {
		method, path = "", ""
	}
	p.log.LogAttrs(context.Background(), slog.LevelInfo, "audit",
		slog.String("action", "refuse"),
		slog.Int("status", status),
		slog.String("code", code),
		slog.String("subject", sub),
		slog.String("remoteAddr", ctx.RemoteAddr().String()),
		slog.String("method", method),
		slog.String("path", path), // without the query, which may carry credentials
		slog.String("message", message),
	)
}

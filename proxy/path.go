package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// One path: routing, the policy and the agent must all read a request's path
// the same way, or a path can be routed and checked as one thing and acted on
// as another. aguard takes the path exactly as received, forwards it
// unchanged (percent-encoding neither added nor removed), refuses what
// servers resolve differently (dot segments, plain or encoded; malformed
// percent-encoding), and matches route prefixes against the path as an agent
// that decodes it would read it: percent-decoded (so an encoded letter or
// slash does not dodge a route), empty segments skipped (so does a doubled
// slash), whole segments only.

// splitTarget splits a request-target (RFC 9112 §3.2) into its path and
// query, raw. An absolute-form target (a proxy-style request) gives the path
// after its authority. Anything else (asterisk-form, authority-form) is an
// error.
func splitTarget(target []byte) (path, query []byte, err error) {
	if len(target) > 0 && target[0] != '/' {
		scheme, rest, ok := bytes.Cut(target, []byte("://"))
		if !ok || !(bytes.EqualFold(scheme, []byte("http")) || bytes.EqualFold(scheme, []byte("https"))) {
			return nil, nil, fmt.Errorf("request target %q is not a path", target)
		}
		if i := bytes.IndexAny(rest, "/?"); i >= 0 {
			target = rest[i:]
		} else {
			target = nil
		}
		if len(target) == 0 || target[0] == '?' {
			target = append([]byte("/"), target...)
		}
	}
	if len(target) == 0 {
		return nil, nil, errors.New("empty request target")
	}
	path, query, _ = bytes.Cut(target, []byte("?"))
	if i := bytes.IndexByte(path, '#'); i >= 0 {
		return nil, nil, fmt.Errorf("path %q holds a fragment", path)
	}
	return path, query, nil
}

// checkPath refuses a path whose segments servers may resolve differently:
// "." or ".." (RFC 3986 §5.2.4), plain or percent-encoded, and malformed
// percent-encoding.
func checkPath(path []byte) error {
	for seg := range bytes.SplitSeq(path, []byte("/")) {
		if isDotSegment(seg) {
			return fmt.Errorf("path %q has a %q segment; send the path it resolves to", path, seg)
		}
		if bytes.IndexByte(seg, '%') >= 0 {
			if _, err := url.PathUnescape(string(seg)); err != nil {
				return fmt.Errorf("path %q: malformed percent-encoding in segment %q", path, seg)
			}
		}
	}
	return nil
}

// isDotSegment reports "." or "..", each dot plain or as %2E (any case).
func isDotSegment(seg []byte) bool {
	dots := 0
	for i := 0; i < len(seg); {
		switch {
		case seg[i] == '.':
			i++
		case i+2 < len(seg) && seg[i] == '%' && seg[i+1] == '2' && (seg[i+2] == 'e' || seg[i+2] == 'E'):
			i += 3
		default:
			return false
		}
		dots++
	}
	return dots == 1 || dots == 2
}

// routeSegments splits a route prefix into its percent-decoded segments; ""
// and "/" have none (they match every path).
func routeSegments(prefix string) ([]string, error) {
	p := strings.Trim(prefix, "/")
	if p == "" {
		return nil, nil
	}
	d, err := url.PathUnescape(p)
	if err != nil {
		return nil, fmt.Errorf("route %q: %w", prefix, err)
	}
	return segments(d), nil
}

// segments splits a decoded path into its non-empty segments.
func segments(path string) []string {
	var segs []string
	for s := range strings.SplitSeq(path, "/") {
		if s != "" {
			segs = append(segs, s)
		}
	}
	return segs
}

// routePath is a checked raw path as routes see it: percent-decoded and
// split into its non-empty segments.
func routePath(path []byte) []string {
	d := string(path)
	if bytes.IndexByte(path, '%') >= 0 {
		d, _ = url.PathUnescape(d) // checkPath has refused malformed encoding
	}
	return segments(d)
}

// matches reports whether a path's segments (routePath) start with the
// route's, whole segments each.
func (u *upstream) matches(segs []string) bool {
	if len(segs) < len(u.segments) {
		return false
	}
	for i, want := range u.segments {
		if segs[i] != want {
			return false
		}
	}
	return true
}

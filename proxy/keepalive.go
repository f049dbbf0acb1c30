package proxy

import (
	"bytes"
	"strconv"
	"sync"
	"time"
)

// keepalive is how long a connection to one agent server may stay idle and
// still be reused: the configured bound (--upstream-keepalive-timeout), cut
// to three quarters of the agent's own keep-alive timeout once aguard knows
// it. The agent may say it (Keep-Alive: timeout=N, as Node does), or show it
// by closing an idle connection (the hangup watcher sees when). Of the
// closes seen, the longest idle time counts: an agent never closes a
// connection later than its timeout, but may close one sooner (a restart
// closes every connection at once, however long each was idle), and a
// connection may have been idle at the agent a little longer than aguard
// saw. What a close taught is forgotten after learnedFor without a longer
// one, so that a restart does not shorten the bound for good, and a changed
// timeout is learned again.
//
// Three quarters leaves the request time to arrive before the agent's timer
// fires: a request sent on a connection the agent is closing at that moment
// cannot be told from one the agent read and dropped, and is not sent again
// (see upstream.do).
type keepalive struct {
	max time.Duration

	mu         sync.Mutex
	advertised time.Duration // from Keep-Alive: timeout=N; 0: none
	observed   time.Duration // the longest idle time of a connection the agent closed
	observedAt time.Time     // when it was seen
}

// learnedFor is how long an idle close observed keeps shortening the bound.
const learnedFor = time.Minute

// bound is how long an idle connection may be reused at now.
func (k *keepalive) bound(now time.Time) time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	b := k.max
	if k.advertised > 0 {
		b = min(b, k.advertised*3/4)
	}
	if k.observed > 0 && now.Sub(k.observedAt) < learnedFor {
		b = min(b, k.observed*3/4)
	}
	return b
}

// observe records that the agent closed a connection idle for idle.
func (k *keepalive) observe(idle time.Duration, now time.Time) {
	k.mu.Lock()
	if idle >= k.observed || now.Sub(k.observedAt) >= learnedFor {
		k.observed, k.observedAt = max(idle, time.Nanosecond), now
	}
	k.mu.Unlock()
}

// advertise records an agent's Keep-Alive header value (RFC 2068 §19.7.1.1,
// "timeout=N" in seconds, as Node and Apache send it).
func (k *keepalive) advertise(header []byte) {
	for param := range bytes.SplitSeq(header, []byte(",")) {
		name, value, ok := bytes.Cut(bytes.TrimSpace(param), []byte("="))
		if !ok || !bytes.EqualFold(bytes.TrimSpace(name), []byte("timeout")) {
			continue
		}
		n, err := strconv.Atoi(string(bytes.TrimSpace(value)))
		if err != nil || n < 0 {
			return
		}
		d := time.Duration(n) * time.Second
		k.mu.Lock()
		k.advertised = max(d, time.Nanosecond)
		k.mu.Unlock()
		return
	}
}

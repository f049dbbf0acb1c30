package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// maxDrain is how much of an answer's body is read (and thrown away) so
// that the connection can be reused.
const maxDrain = 64 << 10

// run is t's delivery goroutine: one delivery in flight at a time, in
// queue order, until Close.
func (n *Notifier) run(t *target) {
	defer n.wg.Done()
	for {
		d := n.next(t)
		if d == nil {
			return
		}
		n.deliver(t, d)
	}
}

// next waits for t's oldest queued delivery and takes it. It returns nil
// once t is closed and empty, or at once when Close gave up.
func (n *Notifier) next(t *target) *delivery {
	for {
		if n.stopCtx.Err() != nil {
			return nil
		}
		t.mu.Lock()
		if len(t.queue) > 0 {
			d := t.queue[0]
			t.queue[0] = nil
			t.queue = t.queue[1:]
			t.queued -= int64(len(d.body))
			t.mu.Unlock()
			n.m.queueDepth.Dec()
			n.m.queueBytes.Sub(float64(len(d.body)))
			return d
		}
		closed := t.closed
		t.mu.Unlock()
		if closed {
			return nil
		}
		select {
		case <-t.wake:
		case <-n.stopCtx.Done():
			return nil
		}
	}
}

// deliver makes up to maxAttempts attempts to deliver d to t, waiting
// between them, and counts the outcome.
//
// Every answer other than 2xx is retried, 4xx included: a receiver that
// refuses (a rotated secret, a route not deployed yet) is more often
// misconfigured for a while than refusing for good, and MaxAttempts bounds
// the cost. Redirects are not followed by the default client, so a 3xx is
// retried too.
func (n *Notifier) deliver(t *target, d *delivery) {
	if !n.deliverTouching(n.stopCtx, t, d, nil) {
		n.aborted.Add(1) // Close gave up; it counts this one
	}
}

// deliverTouching is deliver until stop is done, calling touch (when set)
// before each wait between attempts and at least every third of the claim
// idle time while waiting. It reports false when stop ended it unsent.
func (n *Notifier) deliverTouching(stop context.Context, t *target, d *delivery, touch func()) bool {
	for attempt := 1; ; attempt++ {
		status, retryAfter, err := n.attempt(stop, t, d)
		if err == nil && status >= 200 && status < 300 {
			n.m.attempts.WithLabelValues(attemptOK).Inc()
			n.m.deliveries.WithLabelValues(deliveryDelivered).Inc()
			n.resumed(t)
			return true
		}
		if stop.Err() != nil {
			return false
		}
		result := attemptStatus
		if err != nil {
			result = attemptError
		} else {
			err = fmt.Errorf("answered %d %s", status, http.StatusText(status))
		}
		n.m.attempts.WithLabelValues(result).Inc()
		if attempt >= n.maxAttempts {
			n.m.deliveries.WithLabelValues(deliveryFailed).Inc()
			n.log.Warn("webhook: delivery failed; giving up", "url", t.label, "type", d.event,
				"delivery", d.id, "attempts", attempt, "err", err)
			return true
		}
		wait := n.backoff(attempt)
		if retryAfter > wait {
			wait = min(retryAfter, n.maxBackoff)
		}
		n.log.Debug("webhook: attempt failed; will retry", "url", t.label, "type", d.event,
			"delivery", d.id, "attempt", attempt, "wait_seconds", wait.Seconds(), "err", err)
		for wait > 0 {
			step := wait
			if touch != nil {
				touch()
				step = min(wait, n.claimIdle/3)
			}
			timer := time.NewTimer(step)
			select {
			case <-timer.C:
			case <-stop.Done():
				timer.Stop()
				return false
			}
			wait -= step
		}
	}
}

// resumed reports, after a success, the deliveries t dropped since the
// last report.
func (n *Notifier) resumed(t *target) {
	t.mu.Lock()
	drops := t.drops
	t.drops = 0
	t.mu.Unlock()
	if drops > 0 {
		n.log.Warn("webhook: receiver caught up after deliveries were dropped", "url", t.label, "dropped", drops)
	}
}

// attempt POSTs d to t once, signed now. It returns the answer's status
// and Retry-After, or the error that prevented an answer.
func (n *Notifier) attempt(stop context.Context, t *target, d *delivery) (status int, retryAfter time.Duration, err error) {
	ctx, cancel := context.WithTimeout(stop, n.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(d.body))
	if err != nil {
		return 0, 0, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "aguard-webhook")
	req.Header.Set("X-Aguard-Event", d.event)
	// Standard Webhooks: the message id, this attempt's time, and the
	// signature over both and the body, made afresh for every attempt.
	at := n.now()
	req.Header.Set(HeaderID, d.id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
	if len(n.key) > 0 {
		req.Header.Set(HeaderSignature, Sign(n.key, d.id, at, d.body))
	}
	resp, err := n.client.Do(req)
	if err != nil {
		// The *url.Error repeats the URL, query and all; logs get the label.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return 0, 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	_ = resp.Body.Close()
	return resp.StatusCode, parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()), nil
}

// parseRetryAfter reads a Retry-After value, seconds or an HTTP date
// (relative to now, the real clock); 0 when absent, past or unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, int64(time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// backoff is the wait after the given failed attempt (1-based): MinBackoff
// doubled attempt-1 times, capped at MaxBackoff, then drawn at random
// between half of that and all of it.
func (n *Notifier) backoff(attempt int) time.Duration {
	d := n.minBackoff
	for i := 1; i < attempt && d < n.maxBackoff; i++ {
		if d > n.maxBackoff/2 {
			d = n.maxBackoff
			break
		}
		d *= 2
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

package webhook

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/aguard/aguard/state"
)

// Event types, the value of the body's "type" and of the X-Aguard-Event
// header (an addition to the Standard Webhooks headers). They are a public contract: receivers switch on them.
const (
	// TypeToolCallStarted is sent when aguard first relays a tool call.
	TypeToolCallStarted = "llm.tool_call_started"
	// TypeApprovalRequired is sent when a tool call waits for an approval
	// decision; tool_call.requires_approval_at is the deadline.
	TypeApprovalRequired = "llm.tool_call_approval_required"
	// TypeToolCallCompleted is sent when a tool call reaches a terminal
	// status, whichever it is.
	TypeToolCallCompleted = "llm.tool_call_completed"
	// TypeToolCallApproved is sent when a reviewer approves a call held for
	// approval; tool_call.approved_by names them.
	TypeToolCallApproved = "llm.tool_call_approved"
	// TypeToolCallRejected is sent when a reviewer rejects one (then
	// TypeToolCallCompleted, since the call ended).
	TypeToolCallRejected = "llm.tool_call_rejected"
)

// eventTypes are the event types of the notices state.Notifier receives.
var eventTypes = map[state.Notice]string{
	state.CallStarted:  TypeToolCallStarted,
	state.CallHeld:     TypeApprovalRequired,
	state.CallEnded:    TypeToolCallCompleted,
	state.CallApproved: TypeToolCallApproved,
	state.CallRejected: TypeToolCallRejected,
}

// EventType returns the event type sent for notice, and false for a notice
// that has none.
func EventType(notice state.Notice) (string, bool) {
	t, ok := eventTypes[notice]
	return t, ok
}

// Defaults of Options.
const (
	defaultQueueSize   = 10_000
	defaultQueueBytes  = 64 << 20
	defaultMaxAttempts = 12
	defaultMinBackoff  = 500 * time.Millisecond
	defaultMaxBackoff  = time.Minute
	defaultTimeout     = 10 * time.Second
)

// createdAtLayout is RFC 3339 with milliseconds; used in UTC, it ends in Z.
const createdAtLayout = "2006-01-02T15:04:05.000Z07:00"

// Options configure a Notifier. The zero value of each field means its
// default.
type Options struct {
	// URLs each receive every event, in the order Notify was called. Each
	// must be an absolute http or https URL with a host, and appear once.
	// With none, Notify does nothing.
	URLs []string
	// Secret keys the Standard Webhooks signature (webhook-signature):
	// "whsec_<base64>" is the base64 of the key, any other string the key
	// itself (ParseSecret). Empty means deliveries are sent unsigned, which
	// New reports once as a warning.
	Secret string
	// QueueSize bounds the deliveries waiting for each URL, besides the one
	// in flight (default 10 000). When a URL's queue is full, its oldest
	// waiting delivery is dropped to make room, and counted.
	QueueSize int
	// QueueBytes bounds the bodies waiting for each URL, in bytes, besides
	// the one in flight (default 64 MiB): past it, as past QueueSize, the
	// oldest waiting deliveries are dropped and counted. A body larger than
	// QueueBytes is dropped at once. The bodies of one event are shared by
	// its URLs, so the memory they take is at most QueueBytes for all of
	// them, and a little more for those in flight.
	QueueBytes int64
	// MaxAttempts bounds the attempts of one delivery (default 12), after
	// which it is counted as failed and the next one is sent.
	MaxAttempts int
	// MinBackoff and MaxBackoff shape the wait between attempts: it starts
	// at MinBackoff (default 500ms) and doubles after every failed attempt
	// up to MaxBackoff (default 1 minute), and each wait is drawn at random
	// between half of that and all of it. A Retry-After header on the
	// answer lengthens the wait, up to MaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// Timeout bounds each attempt, from dialing to reading the answer
	// (default 10s).
	Timeout time.Duration
	// Client sends the requests. The default follows no redirects (a 3xx
	// answer is a failed attempt) and has Timeout; its idle connections are
	// closed by Close. A Client given here is used as is, and its
	// connections are left alone.
	Client *http.Client
	// Logger receives reports of failed and dropped deliveries (default:
	// discard). It never receives a request body.
	Logger *slog.Logger
	// Registerer, when set, registers aguard_webhook_deliveries_total
	// {result="delivered|failed|dropped"}, aguard_webhook_attempts_total
	// {result="ok|error|status"} and aguard_webhook_queue_depth.
	Registerer prometheus.Registerer
	// Now stamps created_at and the signature timestamps (default
	// time.Now). Waits between attempts use the real clock.
	Now func() time.Time
	// Redis, when set, holds the deliveries waiting for each URL, shared
	// by every replica on that Redis (see stream.go): a delivery queued by
	// a replica that dies is delivered by another. The Notifier does not
	// close it.
	Redis redis.UniversalClient
	// ClaimIdle is how long a delivery in Redis may sit unclaimed in the
	// hands of a replica that stopped renewing it before another replica
	// takes it over (default 15s).
	ClaimIdle time.Duration
}

// Notifier sends webhook events to the configured URLs. Its methods are
// safe for concurrent use. It runs one goroutine per URL until Close,
// which must be called to stop them.
type Notifier struct {
	targets     []*target
	key         []byte
	maxAttempts int
	minBackoff  time.Duration
	maxBackoff  time.Duration
	timeout     time.Duration
	client      *http.Client
	ownClient   bool
	log         *slog.Logger
	m           *metrics
	now         func() time.Time

	stopCtx context.Context    // canceled when Close gives up: attempts abort
	stop    context.CancelFunc // cancels stopCtx

	// With Options.Redis (stream.go).
	rdb            redis.UniversalClient
	consumer       string
	claimIdle      time.Duration
	streamCtx      context.Context    // canceled when Close begins: deliveries in Redis stay there
	streamStop     context.CancelFunc // cancels streamCtx
	redisSkipUntil atomic.Int64       // Unix ns: until then, queue in memory only
	wg             sync.WaitGroup     // the delivery goroutines
	done           chan struct{}      // closed when they have all returned
	aborted        atomic.Int64       // deliveries abandoned in flight by stop

	closing   atomic.Bool
	closeOnce sync.Once
	lateOnce  sync.Once // reported a Notify after Close
}

// target is one URL, its queue and the state of its delivery goroutine.
type target struct {
	url   string        // as configured; what requests go to
	label string        // for logs: index and origin only
	size  int           // queue bound
	bytes int64         // queue bound in bytes
	wake  chan struct{} // capacity 1: something was queued, or closed was set
	keys  []string      // its stream and byte counter in Redis

	mu     sync.Mutex
	queue  []*delivery // waiting, oldest first
	queued int64       // bytes of the bodies waiting
	closed bool        // Close was called: take no more, return once empty
	drops  int         // dropped since the last report
}

// delivery is one event bound for one URL.
type delivery struct {
	id    string // webhook-id: the event's, the same on every attempt and URL
	event string
	body  []byte // shared by the deliveries of one event; never modified
}

// envelope is the webhook body without its last member, tool_call, the
// record (see encode).
type envelope struct {
	Type      string `json:"type"`
	CreatedAt string `json:"created_at"`
}

// New checks opt and returns a Notifier with one delivery goroutine per
// URL running. The caller must Close it.
func New(opt Options) (*Notifier, error) {
	targets, err := parseURLs(opt.URLs)
	if err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"QueueSize", int64(opt.QueueSize)},
		{"QueueBytes", opt.QueueBytes},
		{"MaxAttempts", int64(opt.MaxAttempts)},
		{"MinBackoff", int64(opt.MinBackoff)},
		{"MaxBackoff", int64(opt.MaxBackoff)},
		{"Timeout", int64(opt.Timeout)},
	} {
		if f.v < 0 {
			return nil, fmt.Errorf("webhook: %s is negative (%d)", f.name, f.v)
		}
	}
	if opt.QueueSize == 0 {
		opt.QueueSize = defaultQueueSize
	}
	if opt.QueueBytes == 0 {
		opt.QueueBytes = defaultQueueBytes
	}
	if opt.MaxAttempts == 0 {
		opt.MaxAttempts = defaultMaxAttempts
	}
	if opt.MinBackoff == 0 {
		opt.MinBackoff = defaultMinBackoff
	}
	if opt.MaxBackoff == 0 {
		opt.MaxBackoff = max(defaultMaxBackoff, opt.MinBackoff)
	}
	if opt.MinBackoff > opt.MaxBackoff {
		return nil, fmt.Errorf("webhook: MinBackoff %s is above MaxBackoff %s", opt.MinBackoff, opt.MaxBackoff)
	}
	if opt.Timeout == 0 {
		opt.Timeout = defaultTimeout
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.ClaimIdle <= 0 {
		opt.ClaimIdle = defaultClaimIdle
	}
	key, err := ParseSecret(opt.Secret)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(opt.Registerer)
	if err != nil {
		return nil, err
	}
	n := &Notifier{
		targets:     targets,
		key:         key,
		maxAttempts: opt.MaxAttempts,
		minBackoff:  opt.MinBackoff,
		maxBackoff:  opt.MaxBackoff,
		timeout:     opt.Timeout,
		client:      opt.Client,
		log:         opt.Logger.With("component", "webhook"),
		m:           m,
		now:         opt.Now,
		done:        make(chan struct{}),
	}
	if n.client == nil {
		n.client, n.ownClient = newClient(opt.Timeout), true
	}
	if len(n.key) == 0 && len(targets) > 0 {
		n.log.Warn("webhook: no secret configured; deliveries are sent unsigned", "urls", len(targets))
	}
	n.stopCtx, n.stop = context.WithCancel(context.Background())
	n.streamCtx, n.streamStop = context.WithCancel(n.stopCtx)
	n.rdb, n.claimIdle, n.consumer = opt.Redis, opt.ClaimIdle, newConsumerID()
	for _, t := range targets {
		t.size, t.bytes, t.keys = opt.QueueSize, opt.QueueBytes, streamKeys(t.url)
		n.wg.Add(1)
		go n.run(t)
		if n.rdb != nil {
			n.wg.Add(1)
			go n.runStream(t)
		}
	}
	return n, nil
}

// parseURLs checks the configured URLs and makes a target of each.
func parseURLs(raw []string) ([]*target, error) {
	seen := make(map[string]bool, len(raw))
	targets := make([]*target, 0, len(raw))
	for i, s := range raw {
		u, err := url.Parse(s)
		if err != nil {
			if ue, ok := errors.AsType[*url.Error](err); ok {
				err = ue.Err // without the URL, which may hold a token
			}
			return nil, fmt.Errorf("webhook: URL #%d is not a URL: %w", i+1, err)
		}
		// Only the origin is ever shown: webhook URLs often carry a token
		// in their user info, path or query.
		origin := (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
		if sch := strings.ToLower(u.Scheme); sch != "http" && sch != "https" {
			return nil, fmt.Errorf("webhook: URL #%d (%s): scheme %q is not http or https", i+1, origin, u.Scheme)
		}
		if u.Hostname() == "" {
			return nil, fmt.Errorf("webhook: URL #%d (%s): no host", i+1, origin)
		}
		if seen[s] {
			return nil, fmt.Errorf("webhook: URL #%d (%s): listed more than once", i+1, origin)
		}
		seen[s] = true
		label := fmt.Sprintf("#%d %s", i+1, origin)
		targets = append(targets, &target{url: s, label: label, wake: make(chan struct{}, 1)})
	}
	return targets, nil
}

// newClient is the default client: its own transport (so Close can shut
// its connections), no redirects followed, timeout per request.
func newClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          16,
			MaxIdleConnsPerHost:   2,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   timeout,
			ExpectContinueTimeout: time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Notify queues the event of notice's type (EventType) about call for
// every URL and returns at once; it never waits for a receiver. The body is
// encoded now, with created_at set to the current time, so call may change
// as soon as Notify returns (but not while it runs). A notice without an
// event type, a nil call, or a call that cannot be encoded is reported to
// the Logger and sent nowhere. After Close, events are counted as dropped.
// Notify makes *Notifier a state.Notifier.
func (n *Notifier) Notify(notice state.Notice, call *state.ToolCall) {
	n.NotifyAll([]state.Notification{{Notice: notice, Call: call}})
}

var _ state.BatchNotifier = (*Notifier)(nil)

// NotifyAll is Notify for several notices, in order; with Redis, each URL's
// events go to its stream in one round trip. NotifyAll makes *Notifier a
// state.BatchNotifier.
func (n *Notifier) NotifyAll(ns []state.Notification) {
	if len(n.targets) == 0 {
		return
	}
	ds := make([]delivery, 0, len(ns))
	for _, x := range ns {
		eventType, ok := EventType(x.Notice)
		if !ok {
			n.log.Error("webhook: a notice without an event type; event not sent", "notice", int(x.Notice))
			continue
		}
		if x.Call == nil {
			n.log.Error("webhook: nil tool call; event not sent", "type", eventType)
			continue
		}
		if n.closing.Load() {
			n.dropLate(eventType, len(n.targets))
			continue
		}
		body, err := n.encode(eventType, x.Call)
		if err != nil {
			n.log.Error("webhook: event not sent", "type", eventType, "err", err)
			continue
		}
		ds = append(ds, delivery{id: newMessageID(), event: eventType, body: body})
	}
	if len(ds) == 0 {
		return
	}
	for _, t := range n.targets {
		left := ds
		if n.rdb != nil {
			left = n.streamEnqueue(t, ds)
		}
		for _, d := range left {
			n.enqueue(t, &d) // a copy per URL: each queue owns its deliveries
		}
	}
}

// encode builds the body of an event about call: the envelope written
// around the record's encoding, which is copied once, into a body of its
// exact size (encoding the envelope as a struct would copy the record
// twice more). Arguments that are a JSON object are sent once, as
// arguments_json: arguments_text carries only arguments that are not (see
// state.ToolCall), and a record holding both would double the body.
func (n *Notifier) encode(eventType string, call *state.ToolCall) ([]byte, error) {
	c := call
	if c.ArgumentsText != "" && len(c.ArgumentsJSON) > 0 && c.ArgumentsText == string(c.ArgumentsJSON) {
		cp := *call
		cp.ArgumentsText = ""
		c = &cp
	}
	tc, err := encodeToolCall(c)
	if err != nil {
		return nil, err
	}
	head, err := json.Marshal(envelope{Type: eventType, CreatedAt: n.now().UTC().Format(createdAtLayout)})
	if err != nil {
		return nil, fmt.Errorf("webhook: encode the envelope: %w", err)
	}
	// head is {"type":…,"created_at":…}: the record goes before its "}".
	head = head[:len(head)-1]
	body := make([]byte, 0, len(head)+len(`,"tool_call":`)+len(tc)+1)
	body = append(body, head...)
	body = append(body, `,"tool_call":`...)
	body = append(body, tc...)
	return append(body, '}'), nil
}

// dropLate counts deliveries of an event raised after Close as dropped.
func (n *Notifier) dropLate(eventType string, deliveries int) {
	n.m.deliveries.WithLabelValues(deliveryDropped).Add(float64(deliveries))
	n.lateOnce.Do(func() {
		n.log.Warn("webhook: event raised after Close; dropped (reported once)", "type", eventType)
	})
}

// enqueue adds d to t's queue, dropping the oldest waiting deliveries while
// the queue is full in count or in bytes, and wakes t's goroutine. A body
// larger than the whole byte budget is dropped itself.
func (n *Notifier) enqueue(t *target, d *delivery) {
	size := int64(len(d.body))
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		n.dropLate(d.event, 1)
		return
	}
	depth, queued := len(t.queue), t.queued
	dropped := 0
	if size > t.bytes {
		dropped = 1
	} else {
		for len(t.queue) > 0 && (len(t.queue) >= t.size || t.queued+size > t.bytes) {
			t.queued -= int64(len(t.queue[0].body))
			t.queue[0] = nil
			t.queue = t.queue[1:]
			dropped++
		}
		t.queue = append(t.queue, d)
		t.queued += size
	}
	first := dropped > 0 && t.drops == 0
	t.drops += dropped
	depth, queued = len(t.queue)-depth, t.queued-queued
	t.mu.Unlock()

	if dropped > 0 {
		n.m.deliveries.WithLabelValues(deliveryDropped).Add(float64(dropped))
	}
	n.m.queueDepth.Add(float64(depth))
	n.m.queueBytes.Add(float64(queued))
	select {
	case t.wake <- struct{}{}:
	default:
	}
	if first {
		n.log.Warn("webhook: queue full; dropping the oldest waiting deliveries until the receiver catches up",
			"url", t.label, "queue_size", t.size, "queue_bytes", t.bytes, "body_bytes", size)
	}
}

// newMessageID returns "msg_" and 128 random bits in hex.
func newMessageID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand since Go 1.24)
	return "msg_" + hex.EncodeToString(b[:])
}

// Close stops taking events and keeps delivering what is queued, retries
// included, until every queue is empty or ctx is done; then it aborts what
// is in flight and stops all goroutines, and returns an error wrapping
// ctx's that says how many deliveries were left unsent (counted as
// dropped). Close always returns with the goroutines stopped. Calling it
// again waits for the same end; only the first call reports what was
// left.
func (n *Notifier) Close(ctx context.Context) error {
	n.closeOnce.Do(func() {
		n.closing.Store(true)
		n.streamStop() // what waits in Redis stays there, for any replica
		for _, t := range n.targets {
			t.mu.Lock()
			t.closed = true
			t.mu.Unlock()
			select {
			case t.wake <- struct{}{}:
			default:
			}
		}
		go func() {
			n.wg.Wait()
			close(n.done)
		}()
	})
	var gaveUp error
	select {
	case <-n.done:
	case <-ctx.Done():
		gaveUp = ctx.Err()
		n.stop()
		<-n.done
	}
	n.stop()
	left := int(n.aborted.Swap(0))
	for _, t := range n.targets {
		t.mu.Lock()
		queued, bytes := len(t.queue), t.queued
		t.queue, t.queued = nil, 0
		t.mu.Unlock()
		left += queued
		n.m.queueDepth.Sub(float64(queued))
		n.m.queueBytes.Sub(float64(bytes))
	}
	if n.ownClient {
		n.client.CloseIdleConnections()
	}
	if left > 0 {
		n.m.deliveries.WithLabelValues(deliveryDropped).Add(float64(left))
		n.log.Warn("webhook: closed with deliveries unsent", "unsent", left)
	}
	switch {
	case gaveUp != nil:
		return fmt.Errorf("webhook: close: stopped with %d deliveries unsent: %w", left, gaveUp)
	case left > 0: // a concurrent Close gave up
		return fmt.Errorf("webhook: close: stopped with %d deliveries unsent", left)
	}
	return nil
}

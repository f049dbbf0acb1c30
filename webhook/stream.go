package webhook

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Deliveries in Redis. With Options.Redis, each URL's deliveries are
// queued in a Redis Stream, aguard:{wh:<hash of the URL>}:deliveries, read
// through the consumer group "aguard" by every replica: whichever replica
// is alive delivers them, at least once, each under the id it was queued
// with (the delivery header is the same on every attempt, from any
// replica). A replica renews its claim on a delivery it is retrying; one
// left idle for ClaimIdle (a replica that died or stopped mid-delivery) is
// taken over by another (XAUTOCLAIM). The byte budget (QueueBytes) and the
// count (QueueSize) bound each URL's stream across replicas: a script
// keeps the bytes queued in aguard:{wh:<hash>}:bytes and drops the oldest
// deliveries to make room. A delivery is deleted from the stream once it
// is delivered or has failed every attempt.
//
// While Redis does not answer, events go to this process's memory queue
// (as without Redis) and are delivered from there; Notify never waits on
// an unreachable Redis longer than one timeout, then skips it for a while.

const (
	streamGroup        = "aguard"
	defaultClaimIdle   = 15 * time.Second // a delivery idle this long is taken over
	streamBlock        = time.Second      // XREADGROUP's wait for new deliveries
	redisSkip          = 5 * time.Second  // memory only, after Redis failed a Notify
	redisNotifyTimeout = 500 * time.Millisecond
)

// streamAddSrc queues one delivery: KEYS stream, bytes counter; ARGV id,
// event, body, size limit (count), bytes limit. It drops the oldest
// deliveries while the stream is full in count or bytes, and replies the
// number dropped, or -1 when the body alone exceeds the bytes limit.
const streamAddSrc = `
local size = string.len(ARGV[3])
local maxn, maxb = tonumber(ARGV[4]), tonumber(ARGV[5])
if size > maxb then return -1 end
local dropped = 0
local queued = tonumber(redis.call('GET', KEYS[2]) or '0')
while redis.call('XLEN', KEYS[1]) >= maxn or queued + size > maxb do
  local old = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
  if #old == 0 then queued = 0; break end
  local f, osize = old[1][2], 0
  for i = 1, #f, 2 do if f[i] == 'b' then osize = string.len(f[i+1]) end end
  redis.call('XDEL', KEYS[1], old[1][1])
  queued = queued - osize
  dropped = dropped + 1
end
redis.call('XADD', KEYS[1], '*', 'i', ARGV[1], 'e', ARGV[2], 'b', ARGV[3])
redis.call('SET', KEYS[2], queued + size)
return dropped
`

// streamAckSrc ends one delivery: KEYS stream, bytes counter; ARGV entry
// id, body size. The counter is lowered only if the entry was still there
// (a full stream may have dropped it meanwhile).
const streamAckSrc = `
redis.call('XACK', KEYS[1], '` + streamGroup + `', ARGV[1])
if redis.call('XDEL', KEYS[1], ARGV[1]) == 1 then
  local left = redis.call('DECRBY', KEYS[2], ARGV[2])
  if left < 0 then redis.call('SET', KEYS[2], 0) end
end
return 1
`

var (
	streamAdd = redis.NewScript(streamAddSrc)
	streamAck = redis.NewScript(streamAckSrc)
)

// streamKeys are the keys of t's stream and byte counter.
func streamKeys(url string) []string {
	h := sha256.Sum256([]byte(url))
	tag := "aguard:{wh:" + hex.EncodeToString(h[:8]) + "}:"
	return []string{tag + "deliveries", tag + "bytes"}
}

// newConsumerID names this Notifier in the consumer group.
func newConsumerID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// streamEnqueue queues ds in t's stream, in one round trip, and returns
// those Redis did not take (the caller queues them in memory).
func (n *Notifier) streamEnqueue(t *target, ds []delivery) (left []delivery) {
	if time.Now().UnixNano() < n.redisSkipUntil.Load() {
		return ds
	}
	ctx, cancel := context.WithTimeout(n.stopCtx, redisNotifyTimeout)
	defer cancel()
	run := func(load bool) ([]*redis.Cmd, error) {
		cmds := make([]*redis.Cmd, len(ds))
		_, err := n.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, d := range ds {
				args := []any{d.id, d.event, d.body, t.size, t.bytes}
				if load {
					cmds[i] = streamAdd.Eval(ctx, p, t.keys, args...)
				} else {
					cmds[i] = streamAdd.EvalSha(ctx, p, t.keys, args...)
				}
			}
			return nil
		})
		return cmds, err
	}
	cmds, err := run(false)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmds, err = run(true)
	}
	var failed error
	for i, cmd := range cmds {
		dropped, err := cmd.Int()
		if err != nil {
			left, failed = append(left, ds[i]), err
			continue
		}
		switch {
		case dropped < 0:
			dropped = 1
			fallthrough
		case dropped > 0:
			n.m.deliveries.WithLabelValues(deliveryDropped).Add(float64(dropped))
			n.log.Warn("webhook: queue full; dropped the oldest deliveries", "url", t.label,
				"queue_size", t.size, "queue_bytes", t.bytes, "body_bytes", len(ds[i].body), "dropped", dropped)
		}
	}
	if failed == nil && err != nil {
		left, failed = ds, err
	}
	if failed != nil {
		n.redisSkipUntil.Store(time.Now().Add(redisSkip).UnixNano())
		n.log.Warn("webhook: redis did not take deliveries; queued in memory", "url", t.label, "deliveries", len(left), "err", failed)
	}
	return left
}

// runStream is t's stream goroutine: it delivers what the group hands this
// replica, and takes over deliveries left idle by others, until Close.
func (n *Notifier) runStream(t *target) {
	defer n.wg.Done()
	ctx := n.streamCtx
	if err := n.rdb.XGroupCreateMkStream(ctx, t.keys[0], streamGroup, "0").Err(); err != nil && !isBusyGroup(err) {
		n.log.Warn("webhook: cannot create the delivery group; retrying", "url", t.label, "err", err)
	}
	lastClaim := time.Time{}
	backoff := n.minBackoff
	for ctx.Err() == nil && !t.isClosed() {
		var msgs []redis.XMessage
		var err error
		if time.Since(lastClaim) >= n.claimIdle/3 {
			lastClaim = time.Now()
			msgs, _, err = n.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
				Stream: t.keys[0], Group: streamGroup, Consumer: n.consumer,
				MinIdle: n.claimIdle, Start: "0-0", Count: 16,
			}).Result()
		}
		if err == nil && len(msgs) == 0 {
			var streams []redis.XStream
			streams, err = n.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: streamGroup, Consumer: n.consumer, Streams: []string{t.keys[0], ">"},
				Count: 16, Block: min(streamBlock, n.claimIdle/3),
			}).Result()
			if errors.Is(err, redis.Nil) {
				err = nil
			}
			for _, s := range streams {
				msgs = append(msgs, s.Messages...)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if isNoGroup(err) {
				_ = n.rdb.XGroupCreateMkStream(ctx, t.keys[0], streamGroup, "0").Err()
			}
			if !n.pause(backoff) {
				return
			}
			backoff = min(2*backoff, n.maxBackoff)
			continue
		}
		backoff = n.minBackoff
		for _, m := range msgs {
			if !n.deliverEntry(t, m) {
				return
			}
		}
	}
}

// deliverEntry delivers one stream entry and ends it in the stream; it
// reports false when Close stopped it, the entry left pending for a
// replica to take over.
func (n *Notifier) deliverEntry(t *target, m redis.XMessage) bool {
	id, _ := m.Values["i"].(string)
	event, _ := m.Values["e"].(string)
	body, _ := m.Values["b"].(string)
	if id == "" || event == "" {
		n.log.Error("webhook: malformed delivery in redis; deleted", "url", t.label, "entry", m.ID)
		n.ackEntry(t, m.ID, len(body))
		return true
	}
	d := &delivery{id: id, event: event, body: []byte(body)}
	touch := func() { // renew the claim, so that no other replica takes it over
		ctx, cancel := context.WithTimeout(n.streamCtx, redisNotifyTimeout)
		defer cancel()
		_ = n.rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: t.keys[0], Group: streamGroup,
			Consumer: n.consumer, MinIdle: 0, Messages: []string{m.ID}}).Err()
	}
	if !n.deliverTouching(n.streamCtx, t, d, touch) {
		return false
	}
	n.ackEntry(t, m.ID, len(body))
	return true
}

// ackEntry removes a finished delivery from t's stream.
func (n *Notifier) ackEntry(t *target, entry string, size int) {
	ctx, cancel := context.WithTimeout(context.Background(), redisNotifyTimeout)
	defer cancel()
	if err := streamAck.Run(ctx, n.rdb, t.keys, entry, strconv.Itoa(size)).Err(); err != nil {
		n.log.Warn("webhook: cannot remove a finished delivery from redis; it may be sent again", "url", t.label, "err", err)
	}
}

// pause waits d, or until Close gives up; it reports false then.
func (n *Notifier) pause(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-n.streamCtx.Done():
		return false
	}
}

func (t *target) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

func isBusyGroup(err error) bool {
	return err != nil && len(err.Error()) >= 9 && err.Error()[:9] == "BUSYGROUP"
}

func isNoGroup(err error) bool {
	return err != nil && len(err.Error()) >= 7 && err.Error()[:7] == "NOGROUP"
}

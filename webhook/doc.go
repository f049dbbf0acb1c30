// Package webhook delivers aguard's tool-call webhooks: it signs each event,
// POSTs it to every configured URL, and retries failed deliveries with
// backoff, on its own goroutines, so that the caller (a stream being relayed)
// never waits for a receiver.
//
// It is delivery only. It decides nothing about tool calls: which event to
// send and when is up to the caller, and what a receiver answers changes
// nothing but whether the delivery is retried. Delivery is at least once:
// a receiver dedupes on webhook-id, which is the same on every attempt of
// one event and for every URL it goes to.
//
// With Options.Redis, the deliveries waiting for each URL are kept in a
// Redis Stream that every replica reads through one consumer group, so that
// a delivery queued by a replica that dies is delivered by another (see
// stream.go); without it, or while Redis does not answer, they wait in this
// process's memory.
//
// Requests follow Standard Webhooks (https://www.standardwebhooks.com):
//
//	Content-Type: application/json
//	User-Agent: aguard-webhook
//	webhook-id: msg_ and 32 lowercase hex digits, one per event
//	webhook-timestamp: the attempt's time, Unix seconds
//	webhook-signature: v1,<base64 HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>">
//	X-Aguard-Event: llm.tool_call_started (or another event type)
//
// and the body
//
//	{"type":"llm.tool_call_started","created_at":"2026-01-02T03:04:05.678Z","tool_call":{…}}
//
// where tool_call is the record in the ToolCall model's webhook profile
// (snake_case field names, see toolCallJSON in payload.go; thread_id and id
// identify the call) and created_at is when the event was raised, not when
// it was sent. The signature is made afresh for every attempt, so its
// timestamp is the attempt's; receivers check it with Verify, or with any
// Standard Webhooks library, given the same secret (ParseSecret).
package webhook

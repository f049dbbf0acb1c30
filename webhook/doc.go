// Package webhook delivers aguard's tool-call webhooks: it signs each event,
// POSTs it to every configured URL, and retries failed deliveries with
// backoff, on its own goroutines, so that the caller (a stream being relayed)
// never waits for a receiver.
//
// It is delivery only. It decides nothing about tool calls: which event to
// send and when is up to the caller, and what a receiver answers changes
// nothing but whether the delivery is retried. Delivery is at least once:
// a receiver dedupes on the X-Aguard-Delivery header, which is the same on
// every attempt of one delivery.
//
// Each request carries:
//
//	Content-Type: application/json
//	User-Agent: aguard-webhook
//	X-Aguard-Event: llm.tool_call_started (or another event type)
//	X-Aguard-Delivery: 32 lowercase hex digits, unique per event and URL
//	X-Aguard-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">
//
// and the body
//
//	{"type":"llm.tool_call_started","created_at":"2026-01-02T03:04:05.678Z","tool_call":{…}}
//
// where tool_call is the record in the ToolCall model's webhook profile
// (snake_case field names, see state.ToolCall.WebhookJSON; thread_id and id
// identify the call) and created_at is when the event was raised, not when
// it was sent. The signature is made afresh for
// every attempt, so its timestamp is the attempt's; receivers check it with
// Verify.
package webhook

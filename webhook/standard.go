package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks headers (https://www.standardwebhooks.com).
const (
	// HeaderID is the message id: the same on every attempt to deliver one
	// event, and for every URL it goes to. Receivers dedupe on it.
	HeaderID = "webhook-id"
	// HeaderTimestamp is the attempt's time, in Unix seconds.
	HeaderTimestamp = "webhook-timestamp"
	// HeaderSignature is "v1,<base64 HMAC-SHA256>", several separated by
	// spaces when a receiver is given more than one.
	HeaderSignature = "webhook-signature"
)

// secretPrefix marks a secret written as base64, as Standard Webhooks'
// libraries write theirs.
const secretPrefix = "whsec_"

// ParseSecret reads --webhook-secret: "whsec_<base64>" is the base64 of the
// key (the form Standard Webhooks' libraries generate and read); any other
// string is the key itself, as bytes.
func ParseSecret(secret string) ([]byte, error) {
	rest, ok := strings.CutPrefix(secret, secretPrefix)
	if !ok {
		return []byte(secret), nil
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("webhook: a secret starting with %s must be base64 after it: %w", secretPrefix, err)
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("webhook: the secret %s… holds no key", secretPrefix)
	}
	return key, nil
}

// Sign returns the webhook-signature value of the message id sent at t with
// body: "v1," and the base64 of the HMAC-SHA256, keyed with key, of
// "<id>.<unix seconds>.<body>".
func Sign(key []byte, id string, t time.Time, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, id, strconv.FormatInt(t.Unix(), 10), body))
}

func mac(key []byte, id, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// maxSignatureHeader bounds the webhook-signature value Verify parses.
const maxSignatureHeader = 4096

// Verify checks a delivery's Standard Webhooks headers against its raw
// body, for receivers (and tests): secret as --webhook-secret takes it; one
// of the space-separated v1 signatures must be the body's (compared in
// constant time), and webhook-timestamp within tolerance of now, either
// way. Signatures of other versions are ignored. Replays within the
// tolerance are the receiver's to catch, by webhook-id.
func Verify(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	key, err := ParseSecret(secret)
	if err != nil {
		return err
	}
	if len(key) == 0 {
		return errors.New("webhook: verify: empty secret")
	}
	id, ts, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	switch {
	case id == "":
		return errors.New("webhook: verify: no " + HeaderID + " header")
	case ts == "":
		return errors.New("webhook: verify: no " + HeaderTimestamp + " header")
	case sigs == "":
		return errors.New("webhook: verify: no " + HeaderSignature + " header")
	case len(sigs) > maxSignatureHeader:
		return fmt.Errorf("webhook: verify: %s is %d bytes, longer than %d", HeaderSignature, len(sigs), maxSignatureHeader)
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook: verify: %s %q is not Unix seconds", HeaderTimestamp, ts)
	}
	want := mac(key, id, ts, body)
	versions := 0
	for sig := range strings.FieldsSeq(sigs) {
		v, b64, ok := strings.Cut(sig, ",")
		if !ok || v != "v1" {
			continue
		}
		versions++
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			sent := time.Unix(unix, 0)
			if skew := now.Sub(sent).Abs(); skew > tolerance {
				return fmt.Errorf("webhook: verify: timestamp %s is %s from now, beyond the tolerance of %s",
					sent.UTC().Format(time.RFC3339), skew, tolerance)
			}
			return nil
		}
	}
	if versions == 0 {
		return errors.New("webhook: verify: no v1 signature in " + HeaderSignature)
	}
	return fmt.Errorf("webhook: verify: none of %d v1 signatures matches (wrong secret, or the id, timestamp or body altered)", versions)
}

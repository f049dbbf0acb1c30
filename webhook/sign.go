package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Sign returns the X-Aguard-Signature header value for body sent at t:
// "t=<unix seconds>,v1=<hex>", where <hex> is the lowercase hex HMAC-SHA256,
// keyed with secret, of the unix seconds in decimal, a dot, and body.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

// mac is the HMAC-SHA256 of "<ts>.<body>" keyed with secret.
func mac(secret, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// maxHeaderLen bounds the header Verify is willing to parse.
const maxHeaderLen = 4096

// Verify checks an X-Aguard-Signature header value against body, for
// receivers (and tests). The header is a comma-separated list of key=value
// pairs: exactly one t (unix seconds) and one or more v1 (hex HMAC-SHA256);
// other keys are ignored, so that later schemes can be added alongside.
// Verify succeeds when any v1 matches the MAC of "<t>.<body>" under secret
// (compared in constant time) and t is within tolerance of now, in either
// direction. It does not remember what it has seen: replays within the
// tolerance are the receiver's to catch, by X-Aguard-Delivery.
//
// The error says what is wrong: an empty secret or negative tolerance, a
// malformed header, no matching signature, or a timestamp too far from now.
func Verify(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if secret == "" {
		return errors.New("webhook: verify signature: empty secret")
	}
	if tolerance < 0 {
		return fmt.Errorf("webhook: verify signature: negative tolerance %s", tolerance)
	}
	if header == "" {
		return errors.New("webhook: verify signature: empty header")
	}
	if len(header) > maxHeaderLen {
		return fmt.Errorf("webhook: verify signature: header is %d bytes, longer than %d", len(header), maxHeaderLen)
	}
	var (
		ts   string
		sigs [][]byte
	)
	for part := range strings.SplitSeq(header, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return fmt.Errorf("webhook: verify signature: malformed element %q in header (want key=value)", part)
		}
		switch key {
		case "t":
			if ts != "" {
				return errors.New("webhook: verify signature: more than one t in header")
			}
			if val == "" {
				return errors.New("webhook: verify signature: empty t in header")
			}
			ts = val
		case "v1":
			sig, err := hex.DecodeString(val)
			if err != nil {
				return fmt.Errorf("webhook: verify signature: v1 %q is not hex: %w", val, err)
			}
			if len(sig) != sha256.Size {
				return fmt.Errorf("webhook: verify signature: v1 is %d bytes, want %d", len(sig), sha256.Size)
			}
			sigs = append(sigs, sig)
		}
	}
	if ts == "" {
		return errors.New("webhook: verify signature: no t in header")
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook: verify signature: t %q is not unix seconds: %w", ts, err)
	}
	if len(sigs) == 0 {
		return errors.New("webhook: verify signature: no v1 in header")
	}
	want := mac(secret, ts, body)
	match := false
	for _, sig := range sigs {
		if hmac.Equal(sig, want) {
			match = true
		}
	}
	if !match {
		return fmt.Errorf("webhook: verify signature: none of %d v1 signatures matches the body (wrong secret, or body altered)", len(sigs))
	}
	sent := time.Unix(unix, 0)
	if skew := now.Sub(sent).Abs(); skew > tolerance {
		return fmt.Errorf("webhook: verify signature: timestamp %s is %s from now, beyond the tolerance of %s",
			sent.UTC().Format(time.RFC3339), skew, tolerance)
	}
	return nil
}

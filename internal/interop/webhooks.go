package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"time"
)

// Delivery is one webhook request as a receiver got it.
type Delivery struct {
	Header http.Header
	Body   []byte
}

// VerifyWebhooks checks deliveries with the official Standard Webhooks
// library for JavaScript (npm standardwebhooks, pinned in
// interop/package-lock.json), given secret as aguard's --webhook-secret
// takes it: raw tells it the secret is the key itself rather than
// whsec_<base64>. It returns, per delivery, "" when the library accepts it,
// or the library's error. The library also refuses a webhook-timestamp more
// than 5 minutes from now.
func VerifyWebhooks(ctx context.Context, secret string, raw bool, deliveries []Delivery) ([]string, error) {
	client, err := scriptPath()
	if err != nil {
		return nil, err
	}
	script := filepath.Join(filepath.Dir(client), "webhooks.mjs")
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("interop: node not found on PATH: %w", err)
	}
	type delivery struct {
		Headers map[string]string `json:"headers"`
		Body    string            `json:"body"`
	}
	in := struct {
		Secret     string     `json:"secret"`
		Raw        bool       `json:"raw"`
		Deliveries []delivery `json:"deliveries"`
	}{Secret: secret, Raw: raw}
	for _, d := range deliveries {
		h := map[string]string{}
		for name := range d.Header {
			h[name] = d.Header.Get(name)
		}
		in.Deliveries = append(in.Deliveries, delivery{Headers: h, Body: string(d.Body)})
	}
	stdin, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("interop: encode deliveries: %w", err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &stdout, &stderr
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("interop: node %s: %w; stderr: %s", script, err, tail(stderr.String()))
	}
	var results []struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &results); err != nil || len(results) != len(deliveries) {
		return nil, fmt.Errorf("interop: output of %s: %v; stdout: %s", script, err, tail(stdout.String()))
	}
	out := make([]string, len(results))
	for i, r := range results {
		if !r.OK {
			out[i] = r.Error
			if out[i] == "" {
				out[i] = "refused"
			}
		}
	}
	return out, nil
}

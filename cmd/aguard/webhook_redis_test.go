package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aguard/aguard/internal/redistest"
)

// TestServeDeliversTheWebhooksOfAKilledReplica runs a call through one
// aguard process while the webhook receiver is down, kills that process
// (-9) with its delivery queued, brings the receiver up and starts a second
// process on the same Redis: the second delivers the webhook, under the
// delivery id the first gave it, within 30 s.
func TestServeDeliversTheWebhooksOfAKilledReplica(t *testing.T) {
	bin := buildAguard(t)
	srv := redistest.Start(t)
	agent := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range []string{
			`{"type":"RUN_STARTED","threadId":"t-hook","runId":"run-h1"}`,
			`{"type":"TOOL_CALL_START","toolCallId":"call-h1","toolCallName":"confirm_order"}`,
			`{"type":"TOOL_CALL_ARGS","toolCallId":"call-h1","delta":"{}"}`,
			`{"type":"TOOL_CALL_END","toolCallId":"call-h1"}`,
			`{"type":"RUN_FINISHED","threadId":"t-hook","runId":"run-h1"}`,
		} {
			io.WriteString(w, "data: "+e+"\n\n")
		}
	})}
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go agent.Serve(aln)
	t.Cleanup(func() { agent.Close() })

	// The receiver's port, free until the receiver starts.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hookAddr := ln.Addr().String()
	ln.Close()
	hookURL := "http://" + hookAddr + "/hook"
	args := []string{"--upstream", "http://" + aln.Addr().String(), "--redis", srv.URL(), "--webhook", hookURL, "--admin-token", "tok"}
	doomed := startAguard(t, bin, args...)

	input := `{"threadId":"t-hook","runId":"run-h1","protocolVersion":"1.0","messages":[],` +
		`"tools":[{"name":"confirm_order","description":"ask","parameters":{"type":"object"}}]}`
	resp, err := http.Post("http://"+doomed.listen+"/agent", "application/json", strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	rc := redis.NewClient(&redis.Options{Addr: srv.Addr(), DisableIdentity: true})
	t.Cleanup(func() { rc.Close() })
	ctx := context.Background()
	var queued []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		keys, _ := rc.Keys(ctx, "aguard:{wh:*}:deliveries").Result()
		if len(keys) == 1 {
			pending, _ := rc.XPending(ctx, keys[0], "aguard").Result()
			entries, _ := rc.XRange(ctx, keys[0], "-", "+").Result()
			if pending != nil && pending.Count > 0 && len(entries) > 0 { // queued, and in the doomed replica's hands
				for _, e := range entries {
					queued = append(queued, e.Values["i"].(string))
				}
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no webhook delivery queued in redis and claimed by the first replica")
		}
		time.Sleep(20 * time.Millisecond)
	}
	doomed.cmd.Process.Kill()
	doomed.cmd.Wait()

	var mu sync.Mutex
	got := map[string]string{} // delivery id -> event
	hl, err := net.Listen("tcp", hookAddr)
	if err != nil {
		t.Fatalf("listen on the receiver's port: %v", err)
	}
	receiver := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		got[r.Header.Get("webhook-id")] = r.Header.Get("X-Aguard-Event")
		mu.Unlock()
	})}
	go receiver.Serve(hl)
	t.Cleanup(func() { receiver.Close() })
	up := time.Now()
	startAguard(t, bin, args...)

	for {
		mu.Lock()
		var ids []string
		for id := range got {
			ids = append(ids, id)
		}
		mu.Unlock()
		slices.Sort(ids)
		slices.Sort(queued)
		if len(ids) >= len(queued) {
			if !slices.Equal(ids, queued) {
				t.Fatalf("delivered ids %v, want the ids the killed replica queued %v", ids, queued)
			}
			break
		}
		if time.Since(up) > 30*time.Second {
			t.Fatalf("within 30 s of the receiver coming up, %d of the %d queued deliveries arrived", len(ids), len(queued))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d deliveries queued by the killed replica arrived %v after the receiver came up", len(queued), time.Since(up).Round(time.Millisecond))
}

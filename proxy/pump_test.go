package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestWaitingForTheAgentReadsNothing pins the pump's reads of a plain TCP
// agent: an event that arrives alone costs one read of the agent's socket,
// and waiting for the next one costs none (Go's net package would read
// once more, finding nothing, before it waits).
func TestWaitingForTheAgentReadsNothing(t *testing.T) {
	if !wireReadsFD {
		t.Skip("the wire cannot read its socket directly on this platform")
	}
	const n = 40
	next := make(chan struct{})
	agent := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(json string) {
			fmt.Fprintf(w, "data: %s\n\n", json)
			w.(http.Flusher).Flush()
		}
		send(`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`)
		send(`{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}`)
		for i := range n {
			select {
			case <-next: // the consumer has the event before: aguard waits for this one
			case <-r.Context().Done():
				return
			}
			send(fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"%d"}`, i))
		}
		send(`{"type":"TEXT_MESSAGE_END","messageId":"m"}`)
		send(`{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`)
	}
	h := newHarness(t, agent)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp := h.post(t, ctx, "/", runInput("t", "r"))
	defer resp.Body.Close()
	f := &frames{r: bufio.NewReader(resp.Body)}
	got := 0
	for ; ; got++ {
		ev, err := f.next()
		if err == io.EOF {
			break // read to the end: the consumer does not leave while the stream ends
		}
		if err != nil {
			t.Fatalf("after %d events: %v", got, err)
		}
		if got >= 1 && got <= n {
			next <- struct{}{}
		}
		if got == 0 && field(t, ev, "type") != "RUN_STARTED" {
			t.Fatalf("first event %s", ev)
		}
	}
	if got != n+4 {
		t.Fatalf("%d events, want %d", got, n+4)
	}

	// The run is over when its connection is back in the pool.
	pool := h.p.upstreams[0].pool
	deadline := time.Now().Add(10 * time.Second)
	for pool.idleConns() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the agent's connection never went back to the pool")
		}
		time.Sleep(5 * time.Millisecond)
	}
	pool.mu.Lock()
	reads := pool.tail.socketReads
	pool.mu.Unlock()
	// One read per event the agent sent on its own (the first two may come
	// with the answer's head), at most two for the last two, and the read
	// that finds nothing yet right after the head.
	if max := n + 3; reads > max {
		t.Fatalf("%d reads of the agent's socket for %d events sent one at a time, want at most %d", reads, n+4, max)
	}
	if reads < n {
		t.Fatalf("%d reads of the agent's socket for %d events sent one at a time: the pump did not read it directly", reads, n)
	}
}

package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
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
	// One read per event the agent sent on its own; at most one each for
	// the two it sends before them (they may come with the answer's head,
	// or not, on a loaded machine), the two after them and the body's last
	// chunk; and the read that finds nothing yet right after the head. The
	// pump before the direct reads needed about two per event (2n).
	if max := n + 6; reads > max {
		t.Fatalf("%d reads of the agent's socket for %d events sent one at a time, want at most %d", reads, n+4, max)
	}
	if reads < n {
		t.Fatalf("%d reads of the agent's socket for %d events sent one at a time: the pump did not read it directly", reads, n)
	}
}

// TestAnAgentClosingRightAfterAnEventEndsTheStreamAtOnce pins that the
// agent's close is seen even when it arrives with the last bytes before
// it, in the same wake-up: a read that returns those bytes without the
// close (a short read, the socket drained of data) must not make the pump
// wait for a readiness that already came. The stream ends with
// AGUARD_UPSTREAM_LOST long before the idle limit.
func TestAnAgentClosingRightAfterAnEventEndsTheStreamAtOnce(t *testing.T) {
	for round := range 20 {
		next := make(chan struct{})
		agent := func(w http.ResponseWriter, r *http.Request) {
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			chunk := func(s string) { fmt.Fprintf(brw, "%x\r\n%s\r\n", len(s), s) }
			brw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
			chunk(frame(`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`))
			brw.Flush()
			select {
			case <-next: // the pump waits for the agent
			case <-r.Context().Done():
				return
			}
			chunk(frame(`{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}`))
			brw.Flush()
			conn.Close() // at once: the close follows the event on the wire
		}
		h := newHarness(t, agent, func(o *Options) { o.UpstreamIdleTimeout = time.Hour })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		resp := h.post(t, ctx, "/agent", runInput("t", "r"))
		f := &frames{r: bufio.NewReader(resp.Body)}
		var got []string
		for {
			ev, err := f.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("round %d, after %d events: %v", round, len(got), err)
			}
			got = append(got, field(t, ev, "type"))
			if len(got) == 1 {
				close(next)
			}
		}
		resp.Body.Close()
		cancel()
		if want := []string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_END", "RUN_ERROR"}; len(got) < 2 || got[len(got)-1] != "RUN_ERROR" || got[1] != "TEXT_MESSAGE_START" {
			t.Fatalf("round %d: events %v, want %v", round, got, want)
		}
	}
}

// TestConsumersLeavingBusyStreamsEndThemAll pins that a stream whose
// consumer leaves ends while its agent is still sending: aguard shuts the
// agent's connection down, the agent closes it, and that close may come in
// the same readiness as the agent's last events.
func TestConsumersLeavingBusyStreamsEndThemAll(t *testing.T) {
	const streams = 100
	agent := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, frame(`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`)+
			frame(`{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}`))
		w.(http.Flusher).Flush()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
				fmt.Fprint(w, frame(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}`))
				w.(http.Flusher).Flush()
			}
		}
	}
	h := newHarness(t, agent, func(o *Options) { o.UpstreamIdleTimeout = time.Hour })
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			resp := h.post(t, ctx, "/agent", runInput(fmt.Sprint("t", i), "r"))
			f := &frames{r: bufio.NewReader(resp.Body)}
			for range 5 + i%7 {
				if _, err := f.next(); err != nil {
					t.Errorf("stream %d: %v", i, err)
					break
				}
			}
			cancel() // the consumer leaves
			resp.Body.Close()
		})
	}
	wg.Wait()
	deadline := time.Now().Add(15 * time.Second)
	for {
		h.p.mu.Lock()
		open := len(h.p.streams)
		h.p.mu.Unlock()
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d streams still open 15 s after their consumers left", open, streams)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWakeupsTellBackloggedStreamsFromEventsOneAtATime pins the counts the
// GOMAXPROCS governor reads (Proxy.Wakeups): events the agent sends one at
// a time each wake the pump alone, one event a wakeup; events written
// together are read in one wakeup, many events to it.
func TestWakeupsTellBackloggedStreamsFromEventsOneAtATime(t *testing.T) {
	if !wireReadsFD {
		t.Skip("the wire cannot read its socket directly on this platform")
	}
	const single, burst = 20, 10
	next := make(chan struct{})
	agent := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(frames string) {
			io.WriteString(w, frames)
			w.(http.Flusher).Flush()
		}
		content := func(i int) string {
			return frame(fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"%d"}`, i))
		}
		send(frame(`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`))
		send(frame(`{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}`))
		for i := range single + 1 {
			select {
			case <-next: // the consumer has the event before
			case <-r.Context().Done():
				return
			}
			if i == single { // the rest in one write
				var all strings.Builder
				for j := range burst {
					all.WriteString(content(single + j))
				}
				send(all.String())
				select {
				case <-next: // the consumer has the burst
				case <-r.Context().Done():
					return
				}
				send(frame(`{"type":"TEXT_MESSAGE_END","messageId":"m"}`) + frame(`{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`))
				return
			}
			send(content(i))
		}
	}
	h := newHarness(t, agent)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp := h.post(t, ctx, "/", runInput("t", "r"))
	defer resp.Body.Close()
	f := &frames{r: bufio.NewReader(resp.Body)}
	var all0, events0 uint64
	for got := 0; got < single+2; got++ {
		if _, err := f.next(); err != nil {
			t.Fatalf("after %d events: %v", got, err)
		}
		if got == 2 { // the first content event: from here on, one at a time
			all0, events0 = h.p.Wakeups()
		}
		if got >= 1 && got <= single {
			next <- struct{}{}
		}
	}
	// The consumer has the last event sent alone, so its wakeup is counted;
	// the burst is asked for only now, so that its wakeup cannot be counted
	// among these.
	all1, events1 := h.p.Wakeups()
	if woke := all1 - all0; woke < single-1 {
		t.Errorf("%d wakeups for %d events sent one at a time, want at least %d", woke, single-1, single-1)
	}
	if read, woke := events1-events0, all1-all0; read > woke {
		t.Errorf("%d wakeups read %d events sent one at a time, want at most one each", woke, read)
	}
	next <- struct{}{}
	for got := range burst {
		if _, err := f.next(); err != nil {
			t.Fatalf("event %d of the burst: %v", got, err)
		}
	}
	// The consumer has the burst, so the wakeup that read it is counted.
	if all2, events2 := h.p.Wakeups(); all2 == all1 || events2-events1 != burst || events2-events1 < 2*(all2-all1) {
		t.Errorf("%d wakeups read %d events written at once, want %d in at least one and at most %d", all2-all1, events2-events1, burst, burst/2)
	}
	next <- struct{}{}
	if got := len(readAll(t, f.r)); got != 2 {
		t.Fatalf("%d events after the burst, want 2", got)
	}
}

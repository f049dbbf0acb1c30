package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// openStreams returns the streams the proxy serves now.
func (p *Proxy) openStreams() []*stream {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*stream
	for s := range p.streams {
		out = append(out, s)
	}
	return out
}

// TestAStreamIdleAfterABurstHoldsNoLargeOutputBuffer: an agent that writes
// a burst faster than aguard reads it is read in large batches, and each
// batch's frames are gathered for one write to the consumer. Once written,
// the stream must not keep room for the batch: a run that streamed a fast
// answer and then waits (for a person, for a long tool) would otherwise
// hold tens of KiB while it does nothing.
func TestAStreamIdleAfterABurstHoldsNoLargeOutputBuffer(t *testing.T) {
	const burst = 2000
	release := make(chan struct{})
	defer close(release)
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		var b strings.Builder
		b.WriteString(frame(`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`))
		b.WriteString(frame(`{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}`))
		for i := range burst {
			b.WriteString(frame(fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"%04d %s"}`, i, strings.Repeat("x", 100))))
		}
		io.WriteString(w, b.String()) // one chunk, in the socket at once
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	resp := h.post(t, context.Background(), "/agent", runInput("t", "r"))
	defer resp.Body.Close()
	f := &frames{r: bufio.NewReader(resp.Body)}
	for i := range burst + 2 {
		if _, err := f.next(); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}

	// Every frame has been read, so written: the stream now waits for its
	// agent.
	streams := h.p.openStreams()
	if len(streams) != 1 {
		t.Fatalf("%d streams open, want 1", len(streams))
	}
	s := streams[0]
	s.wmu.Lock()
	held := cap(s.out)
	s.wmu.Unlock()
	if held > 4<<10 {
		t.Fatalf("the idle stream holds %d bytes of output buffer, want at most 4 KiB", held)
	}
}

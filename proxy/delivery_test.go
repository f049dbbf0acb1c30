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
)

// TestDeliveryPerEvent pins that each event reaches the consumer before the
// agent sends the next: the agent waits for the consumer to have read event
// i before it writes event i+1, so any buffering in aguard deadlocks the test.
func TestDeliveryPerEvent(t *testing.T) {
	seen := make(chan int)
	const n = 5
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, frame(`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`))
		io.WriteString(w, frame(`{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}`))
		w.(http.Flusher).Flush()
		for i := range n {
			if i > 0 {
				select {
				case <-seen:
				case <-r.Context().Done():
					return
				}
			}
			fmt.Fprintf(w, "data: {\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"%d\"}\n\n", i)
			w.(http.Flusher).Flush()
		}
		<-seen
		io.WriteString(w, frame(`{"type":"TEXT_MESSAGE_END","messageId":"m"}`))
		io.WriteString(w, frame(`{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`))
	})
	resp := h.post(t, context.Background(), "/agent", runInput("t", "r"))
	defer resp.Body.Close()
	f := &frames{r: bufio.NewReader(resp.Body)}
	for range 2 {
		if _, err := f.next(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		ev, err := f.next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if got := field(t, ev, "delta"); got != fmt.Sprint(i) {
			t.Fatalf("event %d has delta %q", i, got)
		}
		seen <- i
	}
	rest := readAll(t, resp.Body)
	if len(rest) != 2 || field(t, rest[1], "type") != "RUN_FINISHED" {
		t.Fatalf("tail = %q", rest)
	}
}

// TestPassThroughByteIdentical pins that events aguard does not change reach
// the consumer with their JSON bytes unchanged: key order, unknown fields,
// escapes and number spellings included.
func TestPassThroughByteIdentical(t *testing.T) {
	events := []string{
		`{"type":"RUN_STARTED","runId":"r","threadId":"t","x-vendor":{"b":1,"a":[1.50,2e3]}}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"m"}`,
		`{"delta":"caf\u00e9 \"quoted\" \\ </script>","type":"TEXT_MESSAGE_CONTENT","messageId":"m","unknownField":null}`,
		`{"type":"CUSTOM","name":"com.example.x","value":{"z":true,"y":[]}}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"m"}`,
		`{"type":"STATE_SNAPSHOT","snapshot":{"k":"v"}}`,
		`{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"success"}}`,
	}
	var body strings.Builder
	for _, e := range events {
		body.WriteString(frame(e))
	}
	// On a connection of the stream's own (a duplicated descriptor), and on
	// the server's, as where descriptors cannot be duplicated.
	for _, share := range []bool{false, true} {
		t.Run(fmt.Sprintf("shareConns=%v", share), func(t *testing.T) {
			h := newHarness(t, sseAgent(body.String()))
			h.p.shareConns.Store(share)
			resp := h.post(t, context.Background(), "/agent", runInput("t", "r"))
			defer resp.Body.Close()
			for name, want := range map[string]string{
				"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no",
			} {
				if got := resp.Header.Get(name); got != want {
					t.Errorf("header %s = %q, want %q", name, got, want)
				}
			}
			if resp.ContentLength != -1 || resp.Header.Get("Content-Encoding") != "" {
				t.Errorf("want a chunked, uncompressed stream; got length %d, encoding %q", resp.ContentLength, resp.Header.Get("Content-Encoding"))
			}
			got := readAll(t, resp.Body)
			if strings.Join(got, "\n") != strings.Join(events, "\n") {
				t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(events, "\n"))
			}
		})
	}
}

// TestFramingAcceptedOnInput pins the lenient input side and the strict output
// side: CRLF, CR, "data:" without a space, multi-line data, comments and id
// lines in; one compact LF frame per event out.
func TestFramingAcceptedOnInput(t *testing.T) {
	body := "data:{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\"}\r\n\r\n" +
		": agent keep-alive\n\n" +
		"id: 42\nevent: message\ndata: {\"type\":\"TEXT_MESSAGE_START\",\r\ndata:   \"messageId\": \"m\"}\r\n\r\n" +
		"data: {\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"a b\"}\r\r" +
		"data: {\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m\"}\n\n" +
		"data: {\"type\":\"RUN_FINISHED\",\"threadId\":\"t\",\"runId\":\"r\"}\n\n"
	h := newHarness(t, sseAgent(body))
	resp := h.post(t, context.Background(), "/agent", runInput("t", "r"))
	defer resp.Body.Close()
	got := readAll(t, resp.Body)
	want := []string{
		`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"m"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"a b"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"m"}`,
		`{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestConcurrentStreamsNoCrossTalk runs 100 streams at once; each agent run
// speaks only of its own thread, and each consumer must hear only its own.
func TestConcurrentStreamsNoCrossTalk(t *testing.T) {
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		thread := between(string(b), `"threadId":"`, `"`)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, frame(fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":"r"}`, thread)))
		fmt.Fprint(w, frame(`{"type":"TEXT_MESSAGE_START","messageId":"m"}`))
		for i := range 20 {
			fmt.Fprint(w, frame(fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"%s-%d"}`, thread, i)))
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, frame(`{"type":"TEXT_MESSAGE_END","messageId":"m"}`))
		fmt.Fprint(w, frame(fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":"r"}`, thread)))
	})
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			thread := fmt.Sprintf("thread-%03d", i)
			resp := h.post(t, context.Background(), "/agent", runInput(thread, "r"))
			defer resp.Body.Close()
			f := &frames{r: bufio.NewReader(resp.Body)}
			n := 0
			for {
				ev, err := f.next()
				if err == io.EOF {
					break
				}
				if err != nil {
					errs <- fmt.Errorf("%s: %w", thread, err)
					return
				}
				if strings.Contains(ev, "thread-") && !strings.Contains(ev, thread) {
					errs <- fmt.Errorf("%s received another thread's event: %s", thread, ev)
					return
				}
				n++
			}
			if n != 24 {
				errs <- fmt.Errorf("%s: %d events, want 24", thread, n)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func between(s, start, end string) string {
	_, after, _ := strings.Cut(s, start)
	v, _, _ := strings.Cut(after, end)
	return v
}

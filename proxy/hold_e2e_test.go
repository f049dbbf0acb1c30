package proxy

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aguard/aguard/policy"
)

// heldRun is one run of the agent in TestHeldCallOverSockets: it writes its
// events in three parts, waiting between them until the consumer has read
// what the part before made it expect, and records when it wrote each event.
type heldRun struct {
	next chan struct{} // the consumer read what it expected: write the next part
	mu   sync.Mutex
	sent map[string]time.Time
}

func (r *heldRun) sentAt(e string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent[e]
}

var heldRunParts = [][]string{
	{
		`{"type":"RUN_STARTED","threadId":"thread-p","runId":"held"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"s1","toolCallName":"search","parentMessageId":"m0"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"s1","delta":"{\"q\":\"go\"}"}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"searching"}`,
	},
	{
		`{"type":"TOOL_CALL_END","toolCallId":"s1"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
	},
	{
		`{"type":"TOOL_CALL_RESULT","messageId":"t1","toolCallId":"s1","content":"found"}`,
		`{"type":"RUN_FINISHED","threadId":"thread-p","runId":"held"}`,
	},
}

// TestHeldCallOverSockets runs an agent through aguard, on loopback
// sockets, with the default policy, which holds the agent's call to its own
// tool "search" until the call's result arrives. The agent writes the call's
// START and ARGS and then a text message, and writes nothing more until the
// consumer has received that text: the text reaches the consumer while the
// call is held, ahead of it, and not one event of the call does. The same
// once the call's END has come (an agent-side call waits for its result).
// When the result comes, the consumer receives the whole call, in order,
// then its result.
//
// It measures, and logs, what holding costs: how long after the agent sent
// them the consumer got the held START and the text that went ahead, and
// how long after the result (the event that releases the call) the released
// START arrived. Nothing about time is asserted.
func TestHeldCallOverSockets(t *testing.T) {
	engine, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	runs := make(chan *heldRun, 1)
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		run := <-runs
		w.Header().Set("Content-Type", "text/event-stream")
		for i, part := range heldRunParts {
			if i > 0 {
				select {
				case <-run.next:
				case <-r.Context().Done():
					return
				}
			}
			for _, e := range part {
				run.mu.Lock()
				run.sent[e] = time.Now()
				run.mu.Unlock()
				io.WriteString(w, frame(e))
				w.(http.Flusher).Flush()
			}
		}
	}, func(o *Options) { o.Policy = engine })

	const rounds = 25
	var heldStart, textAhead, release []time.Duration
	for range rounds {
		run := &heldRun{next: make(chan struct{}), sent: map[string]time.Time{}}
		runs <- run
		resp := h.post(t, context.Background(), "/agent", confirmInput("held"))
		f := &frames{r: bufio.NewReader(resp.Body)}
		recv := map[string]time.Time{}
		read := func(n int) []string {
			t.Helper()
			var got []string
			for range n {
				ev, err := f.next()
				if err != nil {
					t.Fatalf("after %q: %v", got, err)
				}
				recv[ev] = time.Now()
				got = append(got, ev)
			}
			return got
		}
		// The text the agent sent after the held call's START and ARGS
		// arrives while the agent waits: nothing of the call comes first.
		if got, want := read(3), []string{heldRunParts[0][0], heldRunParts[0][3], heldRunParts[0][4]}; !slices.Equal(got, want) {
			t.Fatalf("before the held call's END the consumer got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		run.next <- struct{}{}
		if got, want := read(1), []string{heldRunParts[1][1]}; !slices.Equal(got, want) {
			t.Fatalf("after the held call's END the consumer got %q, want only %q", got, want)
		}
		run.next <- struct{}{}
		want := []string{heldRunParts[0][1], heldRunParts[0][2], heldRunParts[1][0], heldRunParts[2][0],
			`{"type":"RUN_FINISHED","threadId":"thread-p","runId":"held"}`}
		if got := read(len(want)); !slices.Equal(got, want) {
			t.Fatalf("after the result the consumer got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if _, err := f.next(); err != io.EOF {
			t.Fatalf("after RUN_FINISHED: %v, want the end of the stream", err)
		}
		resp.Body.Close()
		start, text, result := heldRunParts[0][1], heldRunParts[0][4], heldRunParts[2][0]
		heldStart = append(heldStart, recv[start].Sub(run.sentAt(start)))
		textAhead = append(textAhead, recv[text].Sub(run.sentAt(text)))
		release = append(release, recv[start].Sub(run.sentAt(result)))
	}
	median := func(ds []time.Duration) time.Duration {
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	t.Logf("over %d runs on loopback, medians: the held call's START reached the consumer %v after the agent sent it "+
		"(the agent's own time to its result, with the consumer's round trips in between); "+
		"it went out %v after the result that released it; the text that went ahead of it took %v, as a streamed event does",
		rounds, median(heldStart), median(release), median(textAhead))
}

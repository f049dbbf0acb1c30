package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/aguard/aguard/state"
)

// BenchmarkOpenCallsHeapPerStream measures what one stream holding many
// open tool calls costs in heap: the agent starts and ends openCalls
// agent-side calls (EXECUTING, open until the run ends) and waits; once the
// consumer has read them all, the live heap is compared with the one before
// the stream (the ledger's records, the store's, the stream's own state).
// Reported per stream of openCalls calls, in MiB (heap-MiB/stream).
//
//	go test -run '^$' -bench OpenCallsHeapPerStream -benchtime 1x ./proxy
func BenchmarkOpenCallsHeapPerStream(b *testing.B) {
	const openCalls = 99_000 // under the 100,000 entities of one run
	store, err := state.Open(context.Background(), state.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	release := make(chan struct{})
	agent := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		thread, run := between(string(body), `"threadId":"`, `"`), between(string(body), `"runId":"`, `"`)
		w.Header().Set("Content-Type", "text/event-stream")
		bw := bufio.NewWriterSize(w, 64<<10)
		fmt.Fprintf(bw, "data: {\"type\":\"RUN_STARTED\",\"threadId\":%q,\"runId\":%q}\n\n", thread, run)
		for i := range openCalls {
			fmt.Fprintf(bw, "data: {\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"call_%d\",\"toolCallName\":\"search\"}\n\n", i)
			fmt.Fprintf(bw, "data: {\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"call_%d\",\"delta\":\"{\\\"q\\\":\\\"what is open %d\\\"}\"}\n\n", i, i)
			fmt.Fprintf(bw, "data: {\"type\":\"TOOL_CALL_END\",\"toolCallId\":\"call_%d\"}\n\n", i)
		}
		fmt.Fprintf(bw, "data: {\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\",\"role\":\"assistant\"}\n\n")
		bw.Flush()
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprintf(bw, "data: {\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m\"}\n\n")
		fmt.Fprintf(bw, "data: {\"type\":\"RUN_FINISHED\",\"threadId\":%q,\"runId\":%q}\n\n", thread, run)
		bw.Flush()
		w.(http.Flusher).Flush()
	}
	h := newHarness(b, agent, func(o *Options) { o.State = store })
	var total float64
	for i := 0; i < b.N; i++ {
		release = make(chan struct{})
		runtime.GC()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		req, _ := http.NewRequest("POST", h.url+"/agent", strings.NewReader(runInput(fmt.Sprintf("t%d", i), "r")))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		f := &frames{r: bufio.NewReader(resp.Body)}
		for {
			ev, err := f.next()
			if err != nil {
				b.Fatalf("stream ended early: %v", err)
			}
			if strings.Contains(ev, `"TEXT_MESSAGE_START"`) {
				break
			}
		}
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&after)
		total += float64(after.HeapAlloc) - float64(before.HeapAlloc)
		close(release)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	b.ReportMetric(total/float64(b.N)/(1<<20), "heap-MiB/stream")
	b.ReportMetric(total/float64(b.N)/openCalls, "heap-B/call")
}

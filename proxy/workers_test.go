package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
)

// serverWorkers counts the goroutines of the consumer server's worker pool:
// those serving a connection and those idle in the pool.
func serverWorkers(t *testing.T) int {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	n := 0
	_, recs, _ := strings.Cut(b.String(), "\n") // after "goroutine profile: total N"
	for _, rec := range strings.Split(recs, "\n\n") {
		if !strings.Contains(rec, "fasthttp.(*workerPool).workerFunc") {
			continue
		}
		count, _, _ := strings.Cut(rec, " @ ")
		c, err := strconv.Atoi(count)
		if err != nil {
			t.Fatalf("goroutine record %q: %v", rec, err)
		}
		n += c
	}
	return n
}

// TestABurstOfStreamsLeavesNoIdleWorkersBehind: a stream leaves the server's
// worker once its response is hijacked, so a burst of streams opened at
// once leaves as many idle workers as it had requests in flight. Each holds
// a goroutine and its stack; idle streams opened in a burst (agent UIs
// waiting for a person) would pay for them per stream until fasthttp's
// default of 10 s of idleness cleaned them. They go within two seconds.
func TestABurstOfStreamsLeavesNoIdleWorkersBehind(t *testing.T) {
	const burst = 64
	release := make(chan struct{})
	h := newHarness(t, waitingAgent(release))
	before := serverWorkers(t)

	// All requests in flight at once: each waits at the start line until
	// every one has its connection.
	var start, opened sync.WaitGroup
	start.Add(1)
	opened.Add(burst)
	bodies := make(chan io.ReadCloser, burst)
	errs := make(chan error, burst)
	for i := range burst {
		go func() {
			defer opened.Done()
			start.Wait()
			req, _ := http.NewRequest("POST", h.url+"/agent", strings.NewReader(runInput("t", fmt.Sprint("r", i))))
			req.Header.Set("Content-Type", "application/json")
			resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
			if err != nil {
				errs <- err
				return
			}
			bodies <- resp.Body
			if _, err := (&frames{r: bufio.NewReader(resp.Body)}).next(); err != nil {
				errs <- fmt.Errorf("stream %d: %w", i, err)
			}
		}()
	}
	start.Done()
	opened.Wait()
	close(bodies)
	close(errs)
	defer func() {
		close(release)
		for b := range bodies {
			b.Close()
		}
	}()
	for err := range errs {
		t.Fatal(err)
	}
	peak := serverWorkers(t) - before
	if peak < 4 {
		// Too few requests overlapped for the burst to leave workers:
		// the test would show nothing.
		t.Fatalf("the burst left %d idle workers; want several to watch them go", peak)
	}
	t.Logf("idle workers after a burst of %d streams: %d", burst, peak)
	await.Within(t, 3*time.Second, "the burst's idle workers to exit", func() bool {
		return serverWorkers(t) <= before+1
	})
}

package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aguard/aguard/policy"
)

// walkingPolicy reads every value of a call's arguments, as a policy that
// looks for a dangerous value anywhere in them does.
const walkingPolicy = `package aguard

default decision := {"action": "allow", "reason": "ok"}

decision := {"action": "deny", "reason": "a negative count"} if {
	walk(input.call.arguments, [_, v])
	is_number(v)
	v < 0
}
`

// heapPeak samples the bytes of live and not yet swept heap objects until
// stop is closed, and returns the highest sample over the level found right
// after a collection at the start.
func heapPeak(stop <-chan struct{}) <-chan uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	base := s[0].Value.Uint64()
	out := make(chan uint64, 1)
	go func() {
		var peak uint64
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			peak = max(peak, s[0].Value.Uint64())
			select {
			case <-stop:
				out <- peak - min(peak, base)
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

// TestLargeArgumentInspectionsTakeTurns: checking a call's arguments against
// its schema and a policy that reads them costs about 90 bytes for each JSON
// value they hold, so 8 runs whose calls each hold 256 Ki values (512 KiB of
// [0,0,…]) took 6 times 23 MB at once, and a lying agent with more streams
// could take the process down before the memory budget, which only turns
// new streams away, saw it. aguard inspects large arguments in turn, within
// a process-wide number of values: every call is still decided (allowed
// here: its TOOL_CALL_END reaches the consumer), and the heap's peak stays within what two such inspections need.
func TestLargeArgumentInspectionsTakeTurns(t *testing.T) {
	const runs = 6
	dir := t.TempDir()
	writePolicy(t, dir, walkingPolicy)
	// The evaluation's deadline is not what is tested: a walk of 256 Ki
	// values under the race detector takes longer than the default 100 ms.
	engine, err := policy.New(context.Background(), policy.Options{Dir: dir, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	args := `{"rows":[` + strings.Repeat("0,", 256<<10-1) + `0]}`
	argsJSON, _ := json.Marshal(args)
	input := func(run string) string {
		return `{"threadId":"thread-` + run + `","runId":"` + run + `","protocolVersion":"1.0","messages":[],` +
			`"tools":[{"name":"store","description":"Store rows","parameters":{"type":"object","properties":{"rows":{"type":"array","items":{"type":"integer","minimum":0}}},"required":["rows"]}}],` +
			`"context":[],"state":{},"forwardedProps":{}}`
	}
	var arrived sync.WaitGroup
	arrived.Add(runs)
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		run := between(string(b), `"runId":"`, `"`)
		w.Header().Set("Content-Type", "text/event-stream")
		w.(http.Flusher).Flush()
		arrived.Done()
		<-all // every run's call reaches aguard at once
		for _, e := range []string{
			`{"type":"RUN_STARTED","threadId":"thread-` + run + `","runId":"` + run + `"}`,
			`{"type":"TOOL_CALL_START","toolCallId":"call-` + run + `","toolCallName":"store"}`,
			`{"type":"TOOL_CALL_ARGS","toolCallId":"call-` + run + `","delta":` + string(argsJSON) + `}`,
			`{"type":"TOOL_CALL_END","toolCallId":"call-` + run + `"}`,
			`{"type":"RUN_FINISHED","threadId":"thread-` + run + `","runId":"` + run + `"}`,
		} {
			io.WriteString(w, frame(e))
			w.(http.Flusher).Flush()
		}
	}, func(o *Options) { o.Policy = engine })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stop := make(chan struct{})
	peak := heapPeak(stop)
	var allowed atomic.Int32
	var wg sync.WaitGroup
	for i := range runs {
		run := "r" + string(rune('a'+i))
		wg.Go(func() {
			resp := h.post(t, ctx, "/", input(run))
			defer resp.Body.Close()
			evs := readAll(t, resp.Body)
			got := strings.Join(evs, "\n")
			if strings.Contains(got, "aguard.tool_call_denied") || !strings.Contains(got, `{"type":"TOOL_CALL_END","toolCallId":"call-`+run+`"}`) {
				for _, e := range evs {
					t.Log(e[:min(len(e), 200)])
				}
				t.Errorf("run %s: the call was not allowed", run)
				return
			}
			allowed.Add(1)
		})
	}
	wg.Wait()
	close(stop)
	grew := <-peak
	t.Logf("%d calls of %d bytes of arguments allowed; the heap grew by %d MiB at its peak", allowed.Load(), len(args), grew>>20)
	if limit := uint64(100 << 20); grew > limit {
		t.Errorf("the heap grew by %d MiB while %d calls were inspected; inspected in turn, it stays under %d MiB", grew>>20, runs, limit>>20)
	}
}

package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/redistest"
	"github.com/aguard/aguard/state"
	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"
)

// gatedAgent answers each run with RUN_STARTED, then one batch of events per
// gate, each batch written once its gate is closed: an agent-side tool call
// (START, ARGS, END, RESULT) per batch but the last, which starts a frontend
// call and finishes the run. Every event carries the time it was written
// (x_sent, Unix ns), which aguard forwards unchanged.
type gatedAgent struct {
	gates []chan struct{}
}

func (a *gatedAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	thread, run := between(string(b), `"threadId":"`, `"`), between(string(b), `"runId":"`, `"`)
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(events ...string) {
		for _, e := range events {
			io.WriteString(w, frame(strings.TrimSuffix(e, "}")+`,"x_sent":`+strconv.FormatInt(time.Now().UnixNano(), 10)+`}`))
		}
		w.(http.Flusher).Flush()
	}
	send(`{"type":"RUN_STARTED","threadId":"` + thread + `","runId":"` + run + `"}`)
	for i, g := range a.gates {
		select {
		case <-g:
		case <-r.Context().Done():
			return
		}
		if i < len(a.gates)-1 {
			id := fmt.Sprintf("c%d", i)
			send(`{"type":"TOOL_CALL_START","toolCallId":"`+id+`","toolCallName":"lookup"}`,
				`{"type":"TOOL_CALL_ARGS","toolCallId":"`+id+`","delta":"{\"q\":\"x\"}"}`,
				`{"type":"TOOL_CALL_END","toolCallId":"`+id+`"}`,
				`{"type":"TOOL_CALL_RESULT","messageId":"m`+id+`","toolCallId":"`+id+`","content":"found"}`)
			continue
		}
		send(`{"type":"TOOL_CALL_START","toolCallId":"f","toolCallName":"confirm_order"}`,
			`{"type":"TOOL_CALL_ARGS","toolCallId":"f","delta":"{\"orderId\":\"A\"}"}`,
			`{"type":"TOOL_CALL_END","toolCallId":"f"}`,
			`{"type":"RUN_FINISHED","threadId":"`+thread+`","runId":"`+run+`"}`)
	}
}

// received is one event as a consumer read it.
type received struct {
	event string
	at    time.Time
}

// TestASlowRedisNeverHoldsUpEvents runs 50 streams through aguard while a
// real redis-server is paused (CLIENT PAUSE), five times: every tool call
// event of a batch the agent sends during a pause reaches its consumer
// before Redis answers again (no event waits for a ledger write), and so does
// each RUN_FINISHED, which waits for its write only --redis-timeout; the
// store reports Redis slow meanwhile. Once Redis answers, every write the
// streams made is in it: the calls' records and each thread's pending call.
// The latencies it saw are logged.
func TestASlowRedisNeverHoldsUpEvents(t *testing.T) {
	const streams, batches, pause = 50, 5, 3 * time.Second
	redis := redistest.Start(t)
	// Commands may wait for the whole pause: the client must not time out
	// (that would be an outage, a different path).
	url := redis.URL() + "?read_timeout=60s&write_timeout=60s"
	var logs syncBuffer
	reg := prometheus.NewRegistry()
	store := openStoreOpt(t, state.Options{RedisURL: url, Registerer: reg,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	agent := &gatedAgent{}
	for range batches {
		agent.gates = append(agent.gates, make(chan struct{}))
	}
	h := newHarness(t, agent.ServeHTTP, func(o *Options) { o.State = store })
	ctl := goredis.NewClient(&goredis.Options{Addr: redis.Addr(), ReadTimeout: time.Minute})
	defer ctl.Close()
	if err := ctl.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}

	// Each consumer reports every event it reads; a batch is complete for
	// a stream with its last event.
	var mu sync.Mutex
	got := make([][]received, streams)
	progress := make(chan struct{}, streams*batches*8)
	var wg sync.WaitGroup
	for i := range streams {
		input := `{"threadId":"t` + strconv.Itoa(i) + `","runId":"r` + strconv.Itoa(i) + `","protocolVersion":"1.0","messages":[],` +
			`"tools":[{"name":"confirm_order","description":"Ask the user","parameters":{"type":"object"}}]}`
		resp := h.post(t, context.Background(), "/agent", input)
		wg.Go(func() {
			defer resp.Body.Close()
			f := &frames{r: bufio.NewReader(resp.Body)}
			for {
				ev, err := f.next()
				if err != nil {
					if err != io.EOF {
						t.Errorf("stream %d: %v", i, err)
					}
					return
				}
				mu.Lock()
				got[i] = append(got[i], received{ev, time.Now()})
				mu.Unlock()
				progress <- struct{}{}
			}
		})
	}
	// complete counts the streams that have read the event ending batch b.
	last := func(b int) string {
		if b == batches-1 {
			return `"type":"RUN_FINISHED"`
		}
		return fmt.Sprintf(`"type":"TOOL_CALL_RESULT","messageId":"mc%d"`, b)
	}
	complete := func(b int) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, evs := range got {
			if slices.ContainsFunc(evs, func(r received) bool { return strings.Contains(r.event, last(b)) }) {
				n++
			}
		}
		return n
	}
	await.Within(t, 10*time.Second, "every stream to start", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !slices.ContainsFunc(got, func(evs []received) bool { return len(evs) == 0 })
	})

	for b := range batches {
		// CLIENT PAUSE holds every command of every client (the pausing
		// one's too) until it ends by itself.
		if err := ctl.Do(context.Background(), "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
			t.Fatal(err)
		}
		// answered closes when Redis answers again: the end of the pause.
		answered := make(chan struct{})
		go func() {
			ctl.Ping(context.Background())
			close(answered)
		}()
		close(agent.gates[b])
		for complete(b) < streams {
			select {
			case <-progress:
			case <-answered:
				t.Fatalf("batch %d: %d of %d streams read it before Redis answered again: the others waited for Redis",
					b, complete(b), streams)
			}
		}
		if b == batches-1 {
			ok, reason := store.Ready()
			if !ok || !strings.Contains(reason, "redis slow") {
				t.Errorf("Ready while Redis is paused = %v %q, want degraded: redis slow", ok, reason)
			}
		}
		<-answered
	}
	wg.Wait()

	// Latencies, from the agent's write to the consumer's read.
	var plain, finished []time.Duration
	for _, evs := range got {
		for _, r := range evs {
			m := sentAt.FindStringSubmatch(r.event)
			if m == nil {
				t.Fatalf("event without x_sent: %s", r.event)
			}
			ns, err := strconv.ParseInt(m[1], 10, 64)
			if err != nil {
				t.Fatalf("event without x_sent: %s", r.event)
			}
			d := r.at.Sub(time.Unix(0, ns))
			if strings.Contains(r.event, `"type":"RUN_FINISHED"`) {
				finished = append(finished, d)
			} else {
				plain = append(plain, d)
			}
		}
	}
	t.Logf("%d streams, Redis paused %d times: %d non-final events: %s; RUN_FINISHED: %s",
		streams, batches, len(plain), quantiles(plain), quantiles(finished))
	if n := counter(t, reg, "aguard_state_redis_slow_total"); n < batches {
		t.Errorf("aguard_state_redis_slow_total = %v after %d pauses", n, batches)
	}
	if n := counter(t, reg, "aguard_state_writes_late_total"); n < streams {
		t.Errorf("aguard_state_writes_late_total = %v: every RUN_FINISHED went out before Redis had its write", n)
	}
	if !strings.Contains(logs.String(), `"msg":"redis slow"`) {
		t.Errorf("no \"redis slow\" line logged:\n%s", logs.String())
	}

	other := openStore(t, redis.URL())
	for i := range streams {
		thread := "t" + strconv.Itoa(i)
		await.Within(t, 15*time.Second, "thread "+thread+" in Redis", func() bool {
			th, err := other.GetThread(context.Background(), thread)
			return err == nil && strings.Join(th.PendingCalls, ",") == "f"
		})
		for b := range batches - 1 {
			c, err := other.GetCall(context.Background(), state.Ref{ThreadID: thread, ID: fmt.Sprintf("c%d", b)})
			if err != nil || c.Status != state.StatusCompleted {
				t.Fatalf("record of call c%d of %s in Redis: %+v, %v; want COMPLETED", b, thread, c, err)
			}
		}
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// counter is the value of an unlabelled counter in reg.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

var sentAt = regexp.MustCompile(`"x_sent":([0-9]+)`)

// quantiles writes the p50, p99 and max of ds.
func quantiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("p50 %v, p99 %v, max %v", q(0.50).Round(time.Microsecond), q(0.99).Round(time.Microsecond), s[len(s)-1].Round(time.Microsecond))
}

// TestARunThatFinishesLeavesTheRegistryWithItsLastWrites: a run that
// finishes with a frontend call pending leaves the runs registry with the
// writes its RUN_FINISHED waits for, not a write delay (an hour here) later:
// a replica that died just after would otherwise have its run taken for
// lost by another, and the pending call it announced cancelled.
func TestARunThatFinishesLeavesTheRegistryWithItsLastWrites(t *testing.T) {
	srv := redistest.Start(t)
	agent := &recordingAgent{runs: map[string][]string{"run-1": callIn("thread-x", "run-1", "call-1")}}
	h := newHarness(t, agent.ServeHTTP, func(o *Options) {
		o.State = openStoreOpt(t, state.Options{RedisURL: srv.URL(), WriteDelay: time.Hour})
	})
	status, events, _ := postRun(t, h, threadInput("run-1", "", ""))
	if status != 200 || !slices.ContainsFunc(events, func(e string) bool { return strings.Contains(e, `"pendingToolCallIds":["call-1"]`) }) {
		t.Fatalf("run: %d %q", status, events)
	}
	// Until the run's writes land the registry is empty too: wait for
	// them, then for the registry.
	awaitRunEnd(t, openStore(t, srv.URL()), "thread-x", "run-1")
	opt, err := goredis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	rc := goredis.NewClient(opt)
	defer rc.Close()
	ctx := context.Background()
	await.Within(t, 5*time.Second, "the run to leave the registry", func() bool {
		keys, err := rc.Keys(ctx, "aguard:runs:*").Result()
		if err != nil {
			return false
		}
		for _, k := range keys {
			if rc.HLen(ctx, k).Val() > 0 {
				return false
			}
		}
		return true
	})
	if st := rc.HGet(ctx, "aguard:{thread-x}:call:call-1", "s").Val(); st != string(state.StatusExecuting) {
		t.Errorf("the pending call has status %q in Redis, want %q", st, state.StatusExecuting)
	}
}

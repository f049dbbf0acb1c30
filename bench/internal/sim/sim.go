// Package sim is a synthetic AG-UI 1.0 agent server for load tests: it answers
// every POSTed RunAgentInput with a valid event stream of a configurable shape
// and pace, and stamps each TEXT_MESSAGE_CONTENT with the time it was sent so
// that a consumer on the same machine can measure the latency added between
// the agent and itself.
//
// A run is, in order: RUN_STARTED; then Tools+1 segments, each a text message
// (TEXT_MESSAGE_START, its share of the Events TEXT_MESSAGE_CONTENT events,
// TEXT_MESSAGE_END) followed, except for the last, by one tool call
// (TOOL_CALL_START, TOOL_CALL_ARGS in chunks, TOOL_CALL_END, and a
// TOOL_CALL_RESULT when the call is the agent's own); then RUN_FINISHED with
// the exact list of the frontend calls left pending. Every event is one SSE
// frame, "data: <json>\n\n", flushed on its own.
package sim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// Tool names the simulator calls. FrontendTool must be advertised in the
// RunAgentInput (loadgen does) for calls marked frontend; BackendTool is
// never advertised, so its calls are the agent's own and are answered with a
// TOOL_CALL_RESULT.
const (
	FrontendTool = "bench_frontend_tool"
	BackendTool  = "bench_backend_tool"
)

// StampPrefix starts the delta of every TEXT_MESSAGE_CONTENT, followed by the
// send time in Unix nanoseconds and a ';'.
const StampPrefix = "t="

// Config is the shape of the runs the simulator sends. Every field can be
// overridden per request with a query parameter of the same name in lower
// case (events, rate, delta, tools, args, frontend, idle).
type Config struct {
	// Events is the number of TEXT_MESSAGE_CONTENT events per run.
	Events int
	// Rate is the events per second per stream, counting every event; 0
	// sends as fast as the consumer reads.
	Rate float64
	// Delta is the size in bytes of each content delta (stamp included).
	Delta int
	// Tools is the number of tool calls per run.
	Tools int
	// Args is the size in bytes of each tool call's JSON arguments.
	Args int
	// Frontend makes the tool calls frontend calls (FrontendTool, left
	// pending for the application); otherwise they are BackendTool calls the
	// agent answers itself.
	Frontend bool
	// Idle sends RUN_STARTED and then nothing until the consumer leaves or
	// IdleHold runs out (then RUN_FINISHED).
	Idle bool
	// IdleHold bounds how long an idle stream is held open.
	IdleHold time.Duration
}

// ArgsChunk is the largest piece of argument text one TOOL_CALL_ARGS carries.
const ArgsChunk = 256

// Handler serves runs shaped by the default configuration def.
func Handler(def Config) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "agentsim: POST a RunAgentInput", http.StatusMethodNotAllowed)
			return
		}
		cfg, err := override(def, r)
		if err != nil {
			http.Error(w, "agentsim: "+err.Error(), http.StatusBadRequest)
			return
		}
		var in struct {
			ThreadID string `json:"threadId"`
			RunID    string `json:"runId"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8<<20)).Decode(&in); err != nil {
			http.Error(w, "agentsim: reading the RunAgentInput: "+err.Error(), http.StatusBadRequest)
			return
		}
		fl, ok := w.(http.Flusher)
		if !ok {
			http.Error(w, "agentsim: response writer cannot flush", http.StatusInternalServerError)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		run := &runWriter{w: w, fl: fl, done: r.Context().Done()}
		if cfg.Rate > 0 {
			period := time.Duration(float64(time.Second) / cfg.Rate)
			// Each run ticks at a phase of its own. loadgen spreads the
			// stream starts evenly over its ramp; when that spacing is a
			// multiple of the period (200 streams over a 10 s ramp at 20
			// events/s: one start per period), the runs would tick
			// together, and every stream's event would reach the proxy in
			// one burst per period instead of the steady load the rate
			// describes.
			run.Idle(rand.N(period))
			run.tick = time.NewTicker(period)
			defer run.tick.Stop()
		}
		Run(run, cfg, in.ThreadID, in.RunID)
	})
}

// override applies the request's query parameters to def.
func override(def Config, r *http.Request) (Config, error) {
	c := def
	q := r.URL.Query()
	ints := map[string]*int{"events": &c.Events, "delta": &c.Delta, "tools": &c.Tools, "args": &c.Args}
	for name, p := range ints {
		if s := q.Get(name); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil || v < 0 {
				return c, fmt.Errorf("query %s=%q: want a non-negative integer", name, s)
			}
			*p = v
		}
	}
	if s := q.Get("rate"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v < 0 {
			return c, fmt.Errorf("query rate=%q: want a non-negative number", s)
		}
		c.Rate = v
	}
	bools := map[string]*bool{"frontend": &c.Frontend, "idle": &c.Idle}
	for name, p := range bools {
		if s := q.Get(name); s != "" {
			v, err := strconv.ParseBool(s)
			if err != nil {
				return c, fmt.Errorf("query %s=%q: want true or false", name, s)
			}
			*p = v
		}
	}
	return c, nil
}

// Sink receives the frames of a run. Frame writes one event's JSON as a
// frame; it reports false when the consumer is gone and the run must stop.
// Wait blocks until the next event is due (paced runs) and reports false
// when the consumer is gone.
type Sink interface {
	Frame(json []byte) bool
	Wait() bool
	// Idle blocks until the consumer leaves or hold runs out.
	Idle(hold time.Duration)
}

// runWriter is the Sink of an HTTP response.
type runWriter struct {
	w    http.ResponseWriter
	fl   http.Flusher
	tick *time.Ticker // nil when unpaced
	done <-chan struct{}
	buf  []byte
}

func (rw *runWriter) Frame(ev []byte) bool {
	rw.buf = append(append(append(rw.buf[:0], "data: "...), ev...), "\n\n"...)
	if _, err := rw.w.Write(rw.buf); err != nil {
		return false
	}
	rw.fl.Flush()
	return true
}

func (rw *runWriter) Wait() bool {
	if rw.tick == nil {
		select {
		case <-rw.done:
			return false
		default:
			return true
		}
	}
	select {
	case <-rw.tick.C:
		return true
	case <-rw.done:
		return false
	}
}

func (rw *runWriter) Idle(hold time.Duration) {
	t := time.NewTimer(hold)
	defer t.Stop()
	select {
	case <-t.C:
	case <-rw.done:
	}
}

// Run sends one run shaped by cfg to s. Stamps are taken just before each
// content frame is written.
func Run(s Sink, cfg Config, threadID, runID string) {
	var b []byte
	emit := func() bool { return s.Wait() && s.Frame(b) }

	b = fmt.Appendf(b[:0], `{"type":"RUN_STARTED","threadId":%s,"runId":%s}`, quote(threadID), quote(runID))
	if !s.Frame(b) {
		return
	}
	if cfg.Idle {
		s.Idle(cfg.IdleHold)
		b = fmt.Appendf(b[:0], `{"type":"RUN_FINISHED","threadId":%s,"runId":%s,"outcome":{"type":"success","pendingToolCallIds":[]}}`,
			quote(threadID), quote(runID))
		s.Frame(b)
		return
	}

	pad := cfg.Delta - len(StampPrefix) - 20 // 19 digits and ';'
	if pad < 0 {
		pad = 0
	}
	args := arguments(cfg.Args)
	var pending []string
	segments := cfg.Tools + 1
	for seg := range segments {
		n := cfg.Events / segments
		if seg < cfg.Events%segments {
			n++
		}
		if n > 0 {
			msg := "m-" + strconv.Itoa(seg)
			b = fmt.Appendf(b[:0], `{"type":"TEXT_MESSAGE_START","messageId":%q,"role":"assistant"}`, msg)
			if !emit() {
				return
			}
			for range n {
				if !s.Wait() {
					return
				}
				b = fmt.Appendf(b[:0], `{"type":"TEXT_MESSAGE_CONTENT","messageId":%q,"delta":"%s%d;`, msg, StampPrefix, time.Now().UnixNano())
				for range pad {
					b = append(b, 'x')
				}
				b = append(b, `"}`...)
				if !s.Frame(b) {
					return
				}
			}
			b = fmt.Appendf(b[:0], `{"type":"TEXT_MESSAGE_END","messageId":%q}`, msg)
			if !emit() {
				return
			}
		}
		if seg == segments-1 {
			break
		}
		id := "c-" + strconv.Itoa(seg)
		name := BackendTool
		if cfg.Frontend {
			name = FrontendTool
		}
		b = fmt.Appendf(b[:0], `{"type":"TOOL_CALL_START","toolCallId":%q,"toolCallName":%q,"parentMessageId":"m-%d"}`, id, name, seg)
		if !emit() {
			return
		}
		for off := 0; off < len(args); off += ArgsChunk {
			chunk := args[off:min(off+ArgsChunk, len(args))]
			b = fmt.Appendf(b[:0], `{"type":"TOOL_CALL_ARGS","toolCallId":%q,"delta":%s}`, id, quote(chunk))
			if !emit() {
				return
			}
		}
		b = fmt.Appendf(b[:0], `{"type":"TOOL_CALL_END","toolCallId":%q}`, id)
		if !emit() {
			return
		}
		if cfg.Frontend {
			pending = append(pending, id)
			continue
		}
		b = fmt.Appendf(b[:0], `{"type":"TOOL_CALL_RESULT","messageId":"tr-%d","toolCallId":%q,"content":"done"}`, seg, id)
		if !emit() {
			return
		}
	}
	ids, _ := json.Marshal(pending)
	if pending == nil {
		ids = []byte("[]")
	}
	b = fmt.Appendf(b[:0], `{"type":"RUN_FINISHED","threadId":%s,"runId":%s,"outcome":{"type":"success","pendingToolCallIds":%s}}`,
		quote(threadID), quote(runID), ids)
	emit()
}

// arguments returns a JSON object of about size bytes: {"text":"xxx…"}.
func arguments(size int) string {
	const frame = len(`{"text":""}`)
	n := size - frame
	if n < 0 {
		n = 0
	}
	b := make([]byte, 0, frame+n)
	b = append(b, `{"text":"`...)
	for i := range n {
		b = append(b, 'a'+byte(i%26))
	}
	return string(append(b, `"}`...))
}

// quote returns s as a JSON string.
func quote(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

package proxy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
	"github.com/aguard/aguard/internal/syncbuf"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestStreamCountsAddUp pins the stream metrics, which the hot path adds to
// the shared counters in batches: once the consumer has the run's end, every
// event and byte of it is counted.
func TestStreamCountsAddUp(t *testing.T) {
	events := []string{
		`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}`,
	}
	for range 50 {
		events = append(events, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"tok"}`)
	}
	events = append(events, `{"type":"TEXT_MESSAGE_END","messageId":"m"}`, `{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`)
	var body strings.Builder
	dataBytes, frameBytes := 0, 0
	for _, e := range events {
		body.WriteString(frame(e))
		dataBytes += len(e)
		frameBytes += len(frame(e))
	}
	reg := prometheus.NewRegistry()
	h := newHarness(t, sseAgent(body.String()), func(o *Options) { o.Metrics = NewMetrics(reg) })
	for i := range 2 {
		resp := h.post(t, context.Background(), "/agent", runInput("t", "r"))
		if got := readAll(t, resp.Body); len(got) != len(events) {
			t.Fatalf("got %d events, want %d", len(got), len(events))
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		runs := float64(i + 1)
		for _, c := range []struct {
			name string
			m    prometheus.Metric
			want float64
		}{
			{"events in, content", h.p.m.eventsIn["TEXT_MESSAGE_CONTENT"], 50 * runs},
			{"events out, content", h.p.m.eventsOut["TEXT_MESSAGE_CONTENT"], 50 * runs},
			{"events in, start", h.p.m.eventsIn["TEXT_MESSAGE_START"], runs},
			{"events out, finished", h.p.m.eventsOut["RUN_FINISHED"], runs},
			{"bytes in", h.p.m.bytesIn, float64(dataBytes) * runs},
		} {
			if got := value(t, c.m); got != c.want {
				t.Errorf("run %d: %s = %v, want %v", i+1, c.name, got, c.want)
			}
		}
		await.Within(t, 5*time.Second, "the stream to end", func() bool { return h.p.inFlight() == 0 })
		if got, want := value(t, h.p.m.bytesOut), float64(frameBytes)*runs; got != want {
			t.Errorf("run %d: bytes out = %v, want %v", i+1, got, want)
		}
	}
}

func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}

// TestStreamCountsReachTheCountersInSilence pins that batched counts do not
// wait for the stream's end: a stream whose agent goes quiet has them added
// at the next heartbeat tick.
func TestStreamCountsReachTheCountersInSilence(t *testing.T) {
	release := make(chan struct{})
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, frame(`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`))
		io.WriteString(w, frame(`{"type":"TEXT_MESSAGE_START","messageId":"m"}`))
		for range 3 {
			io.WriteString(w, frame(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}`))
		}
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}, func(o *Options) { o.Heartbeat = 20 * time.Millisecond })
	defer close(release)
	resp := h.post(t, context.Background(), "/agent", runInput("t", "r"))
	defer resp.Body.Close()
	await.Within(t, 5*time.Second, "3 content events counted", func() bool {
		return value(t, h.p.m.eventsIn["TEXT_MESSAGE_CONTENT"]) == 3 && value(t, h.p.m.eventsOut["TEXT_MESSAGE_CONTENT"]) == 3
	})
}

// TestABoundReachedIsNotedCountedAndLogged: an agent whose event holds more
// JSON values than aguard parses at once (a STATE_DELTA of 40,000 empty
// patch operations) gets its stream ended with AGUARD_LIMIT_EXCEEDED, and
// the operator sees why: a limit_exceeded note in the metrics and a warning
// in the log.
func TestABoundReachedIsNotedCountedAndLogged(t *testing.T) {
	delta := `{"type":"STATE_DELTA","delta":[` + strings.Repeat(`{"op":"add","path":"/a","value":0},`, 40_000) + `{"op":"add","path":"/a","value":0}]}`
	body := frame(`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`) + frame(delta) + frame(`{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`)
	reg := prometheus.NewRegistry()
	logs := &syncbuf.Buffer{}
	h := newHarness(t, sseAgent(body), func(o *Options) {
		o.Metrics = NewMetrics(reg)
		o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	resp := h.post(t, context.Background(), "/agent", runInput("t", "r"))
	got := readAll(t, resp.Body)
	resp.Body.Close()
	if len(got) != 2 || !strings.Contains(got[1], `"code":"AGUARD_LIMIT_EXCEEDED"`) {
		t.Fatalf("the consumer got %q", got)
	}
	if n := value(t, h.p.m.notes.WithLabelValues("limit_exceeded")); n != 1 {
		t.Fatalf("aguard_stream_notes_total{kind=\"limit_exceeded\"} = %v, want 1", n)
	}
	await.Within(t, 5*time.Second, "the warning", func() bool {
		return strings.Contains(logs.String(), `"level":"WARN"`) && strings.Contains(logs.String(), `"kind":"limit_exceeded"`)
	})
}

package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestTruncatedResponse pins that an agent stream ending without a terminal
// event never reads as a success: the consumer gets RUN_ERROR
// AGUARD_UPSTREAM_LOST after what did arrive.
func TestTruncatedResponse(t *testing.T) {
	start := frame(`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`) +
		frame(`{"type":"TEXT_MESSAGE_START","messageId":"m"}`) +
		frame(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"partial"}`)
	tests := []struct {
		name  string
		agent http.HandlerFunc
		want  int // events before the RUN_ERROR
	}{
		{"clean end without terminal", sseAgent(start), 3},
		{"end inside an event", sseAgent(start + `data: {"type":"TEXT_MESSAGE_CONT`), 3},
		{"empty body", sseAgent(""), 0},
		{"connection cut mid-stream", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Write([]byte(start))
			w.(http.Flusher).Flush()
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.(*net.TCPConn).SetLinger(0)
				conn.Close()
			}
		}, 3},
		{"broken chunk framing, connection kept open", func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(start), start)
			conn.Write([]byte("zz\r\n" + frame(`{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`) + "\r\n"))
			io.Copy(io.Discard, conn) // until aguard lets the connection go
		}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.agent)
			resp := h.post(t, context.Background(), "/agent", runInput("t", "r"))
			defer resp.Body.Close()
			got := readAll(t, resp.Body)
			if len(got) != tt.want+1 {
				t.Fatalf("got %d events %q, want %d then RUN_ERROR", len(got), got, tt.want)
			}
			last := got[len(got)-1]
			if field(t, last, "type") != "RUN_ERROR" || field(t, last, "code") != "AGUARD_UPSTREAM_LOST" {
				t.Fatalf("last event %s, want RUN_ERROR AGUARD_UPSTREAM_LOST", last)
			}
		})
	}
}

// TestEventOverLimit pins that an event larger than --max-event ends the
// stream with AGUARD_LIMIT_EXCEEDED and nothing of the event.
func TestEventOverLimit(t *testing.T) {
	big := `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"` + strings.Repeat("x", 4096) + `"}`
	h := newHarness(t, sseAgent(
		frame(`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`)+frame(`{"type":"TEXT_MESSAGE_START","messageId":"m"}`),
		frame(big)+frame(`{"type":"TEXT_MESSAGE_END","messageId":"m"}`),
	), func(o *Options) { o.MaxEvent = 1024 })
	resp := h.post(t, context.Background(), "/agent", runInput("t", "r"))
	defer resp.Body.Close()
	got := readAll(t, resp.Body)
	if len(got) != 3 || field(t, got[2], "code") != "AGUARD_LIMIT_EXCEEDED" {
		t.Fatalf("got %q, want two events then RUN_ERROR AGUARD_LIMIT_EXCEEDED", got)
	}
	if strings.Contains(strings.Join(got, ""), "xxxx") {
		t.Fatal("part of the oversized event reached the consumer")
	}
}

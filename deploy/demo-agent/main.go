// Command demo-agent is a scripted AG-UI 1.0 agent server for trying aguard
// out with deploy/compose.yaml. It is not an agent: every POST with a
// RunAgentInput gets the same short event stream, paced so that it can be
// watched arriving:
//
//   - RUN_STARTED, then an assistant text message in a few deltas;
//   - a call to its own tool lookup_order, answered in the stream;
//   - when the input advertises tools, a call to the first one with "{}" as
//     arguments, left for the application to answer (a frontend call: aguard's
//     policy checks the arguments against the tool's schema);
//   - RUN_FINISHED with a success outcome and no pendingToolCallIds (aguard
//     adds the list).
//
// GET /healthz answers 200. `demo-agent probe` GETs it and exits 0 or 1, for
// the container healthcheck (the image has no shell or curl).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	listen := flag.String("listen", ":8000", "address to listen on")
	delay := flag.Duration("delay", 150*time.Millisecond, "pause between events")
	flag.Parse()
	if flag.Arg(0) == "probe" {
		os.Exit(probe(*listen))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		run(w, r, *delay)
	})
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("demo-agent listening on %s", *listen)
	log.Fatal(srv.ListenAndServe())
}

// runInput is the part of a RunAgentInput the script uses.
type runInput struct {
	ThreadID string `json:"threadId"`
	RunID    string `json:"runId"`
	Tools    []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

type event map[string]any

func run(w http.ResponseWriter, r *http.Request, delay time.Duration) {
	var in runInput
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8<<20)).Decode(&in); err != nil || in.ThreadID == "" || in.RunID == "" {
		http.Error(w, "want a RunAgentInput with threadId and runId", http.StatusBadRequest)
		return
	}
	// Call ids are global in aguard's ledger: derive them from the run id.
	msg, lookup, result := "msg-"+in.RunID, "call-"+in.RunID+"-lookup", "result-"+in.RunID+"-lookup"
	events := []event{
		{"type": "RUN_STARTED", "threadId": in.ThreadID, "runId": in.RunID},
		{"type": "TEXT_MESSAGE_START", "messageId": msg, "role": "assistant"},
		{"type": "TEXT_MESSAGE_CONTENT", "messageId": msg, "delta": "Hello from the demo agent. "},
		{"type": "TEXT_MESSAGE_CONTENT", "messageId": msg, "delta": "Looking up order A-17."},
		{"type": "TEXT_MESSAGE_END", "messageId": msg},
		{"type": "TOOL_CALL_START", "toolCallId": lookup, "toolCallName": "lookup_order", "parentMessageId": msg},
		{"type": "TOOL_CALL_ARGS", "toolCallId": lookup, "delta": `{"id":"A-17"}`},
		{"type": "TOOL_CALL_END", "toolCallId": lookup},
		{"type": "TOOL_CALL_RESULT", "messageId": result, "toolCallId": lookup, "content": "2 items, shipped"},
	}
	if len(in.Tools) > 0 {
		call := "call-" + in.RunID + "-frontend"
		events = append(events,
			event{"type": "TOOL_CALL_START", "toolCallId": call, "toolCallName": in.Tools[0].Name, "parentMessageId": msg},
			event{"type": "TOOL_CALL_ARGS", "toolCallId": call, "delta": "{}"},
			event{"type": "TOOL_CALL_END", "toolCallId": call},
		)
	}
	events = append(events, event{"type": "RUN_FINISHED", "threadId": in.ThreadID, "runId": in.RunID, "outcome": event{"type": "success"}})

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	for i, ev := range events {
		if i > 0 && !sleep(r.Context(), delay) {
			return // the consumer (aguard) went away
		}
		b, _ := json.Marshal(ev)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// probe GETs /healthz on the local listener and returns the exit code.
func probe(listen string) int {
	_, port, err := net.SplitHostPort(listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		return 1
	}
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + net.JoinHostPort("127.0.0.1", port) + "/healthz")
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, "probe: /healthz answered", resp.Status)
		return 1
	}
	return 0
}

package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/aguard/aguard/state"
	"github.com/aguard/aguard/webhook"
)

// A receiver checks the Standard Webhooks signature on the raw body before
// trusting it, and dedupes on webhook-id.
func ExampleVerify() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	seen := map[string]bool{} // a real receiver keeps this in its database
	out := make(chan string, 1)

	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "cannot read body", http.StatusBadRequest)
			return
		}
		err = webhook.Verify(secret, r.Header, body, time.Now(), 5*time.Minute)
		if err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		if id := r.Header.Get("webhook-id"); seen[id] {
			w.WriteHeader(http.StatusNoContent) // already handled: acknowledge only
			return
		} else {
			seen[id] = true
		}
		var ev struct {
			Type     string `json:"type"`
			ToolCall struct {
				ID           string `json:"id"`
				Name         string `json:"name"`
				IsClientTool bool   `json:"is_client_tool"`
			} `json:"tool_call"`
		}
		if err := json.Unmarshal(body, &ev); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		out <- fmt.Sprintf("%s %s %s client=%t", ev.Type, ev.ToolCall.ID, ev.ToolCall.Name, ev.ToolCall.IsClientTool)
	}))
	defer receiver.Close()

	n, err := webhook.New(webhook.Options{URLs: []string{receiver.URL}, Secret: secret})
	if err != nil {
		fmt.Println(err)
		return
	}
	n.Notify(state.CallStarted, &state.ToolCall{
		ID:     "call_1",
		Name:   "get_weather",
		Status: state.StatusExecuting,
	})
	fmt.Println(<-out)
	if err := n.Close(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output: llm.tool_call_started call_1 get_weather client=false
}

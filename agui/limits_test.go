package agui

import (
	"fmt"
	"strings"
	"testing"
)

// TestStreamMemoryIsBounded pins the per-stream limits: an agent that opens
// calls without end, or sends runs without end, gets RUN_ERROR
// AGUARD_LIMIT_EXCEEDED instead of growing aguard's memory.
func TestStreamMemoryIsBounded(t *testing.T) {
	t.Run("tool calls per run", func(t *testing.T) {
		s := NewStream(nil, Options{})
		var b Batch
		s.Feed([]byte(runStarted), &b)
		for i := 0; i <= maxEntitiesPerRun && !b.Done; i++ {
			s.Feed(fmt.Appendf(nil, `{"type":"TOOL_CALL_START","toolCallId":"c%d","toolCallName":"x"}`, i), &b)
		}
		if !b.Done || !strings.Contains(string(b.Out[len(b.Out)-1].JSON), `"code":"AGUARD_LIMIT_EXCEEDED"`) {
			t.Fatalf("not ended by the limit: %q", b.Out)
		}
	})
	t.Run("runs per stream", func(t *testing.T) {
		s := NewStream(nil, Options{})
		var b Batch
		for i := 0; i <= maxRunsPerStream && !b.Done; i++ {
			s.Feed([]byte(runStarted), &b)
			if !b.Done {
				s.Feed([]byte(runFinished), &b)
			}
		}
		if !b.Done || !strings.Contains(string(b.Out[len(b.Out)-1].JSON), `"code":"AGUARD_LIMIT_EXCEEDED"`) {
			t.Fatalf("not ended by the limit: %q", b.Out)
		}
	})
}

package agui

import "testing"

// TestChunksAccepted pins chunk streams the 1.0 client expands without error:
// aguard forwards them unchanged and tracks the synthesised starts and ends.
func TestChunksAccepted(t *testing.T) {
	tests := []struct {
		name   string
		events []string
	}{
		{"tool chunks closed by RUN_FINISHED", []string{runStarted,
			`{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"search","parentMessageId":"m","delta":"{"}`,
			`{"type":"TOOL_CALL_CHUNK","delta":"}"}`,
			`{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"search","parentMessageId":"m"}`,
			runFinished}},
		{"text chunks, repeated role agrees with default", []string{runStarted,
			`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"a"}`,
			`{"type":"TEXT_MESSAGE_CHUNK","role":"assistant","delta":"b"}`,
			runFinished}},
		{"new id in lane closes the previous stream", []string{runStarted,
			`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","delta":"a"}`,
			`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m2","delta":"b"}`,
			`{"type":"TEXT_MESSAGE_CHUNK","delta":"c"}`,
			runFinished}},
		{"explicit event closes the lane", []string{runStarted,
			`{"type":"REASONING_MESSAGE_CHUNK","messageId":"r","delta":"a"}`,
			`{"type":"CUSTOM","name":"x","value":null}`,
			runFinished}},
		{"lanes per subagent", []string{runStarted,
			`{"type":"TOOL_CALL_CHUNK","toolCallId":"c1","toolCallName":"a","subagentRunId":"s1"}`,
			`{"type":"TOOL_CALL_CHUNK","toolCallId":"c2","toolCallName":"b","subagentRunId":"s2"}`,
			`{"type":"TOOL_CALL_CHUNK","delta":"x","subagentRunId":"s1"}`,
			`{"type":"TOOL_CALL_CHUNK","toolCallId":"c2","delta":"y"}`,
			runFinished}},
		{"sole open lane takes an untagged continuation", []string{runStarted,
			`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"a","subagentRunId":"s1"}`,
			`{"type":"TEXT_MESSAGE_CHUNK","delta":"b"}`,
			runFinished}},
		{"subagent terminal closes its lane", []string{runStarted,
			`{"type":"SUBAGENT_STARTED","subagentRunId":"s1","name":"n"}`,
			`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"a","subagentRunId":"s1"}`,
			`{"type":"SUBAGENT_FINISHED","subagentRunId":"s1"}`,
			runFinished}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := feed(t, nil, Options{}, true, tt.events...)
			for _, n := range r.notes {
				if n.Kind == "violation" {
					t.Fatalf("violation: %+v", n)
				}
			}
			if len(r.out) != len(tt.events) {
				t.Fatalf("out = %q", r.out)
			}
			for i := range tt.events[:len(tt.events)-1] {
				if r.out[i] != tt.events[i] {
					t.Fatalf("event %d changed: %s", i, r.out[i])
				}
			}
		})
	}
}

// TestChunksFatal pins the chunk rules the 1.0 client's transformChunks
// treats as fatal.
func TestChunksFatal(t *testing.T) {
	tests := []struct {
		name   string
		events []string
		rule   string
	}{
		{"first tool chunk without id", []string{runStarted, `{"type":"TOOL_CALL_CHUNK","toolCallName":"n","delta":"x"}`}, "chunk_missing_id"},
		{"first tool chunk without name", []string{runStarted, `{"type":"TOOL_CALL_CHUNK","toolCallId":"c","delta":"x"}`}, "chunk_missing_name"},
		{"first text chunk without id", []string{runStarted, `{"type":"TEXT_MESSAGE_CHUNK","delta":"x"}`}, "chunk_missing_id"},
		{"first reasoning chunk without id", []string{runStarted, `{"type":"REASONING_MESSAGE_CHUNK","delta":"x"}`}, "chunk_missing_id"},
		{"continuation renames the tool", []string{runStarted, `{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"search","delta":"{"}`, `{"type":"TOOL_CALL_CHUNK","toolCallName":"delete_everything","delta":"}"}`}, "chunk_conflict"},
		{"continuation changes the parent", []string{runStarted, `{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"s","parentMessageId":"m1"}`, `{"type":"TOOL_CALL_CHUNK","toolCallId":"c","parentMessageId":"m2"}`}, "chunk_conflict"},
		{"continuation changes the role", []string{runStarted, `{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"a"}`, `{"type":"TEXT_MESSAGE_CHUNK","role":"user","delta":"b"}`}, "chunk_conflict"},
		{"continuation adds a name", []string{runStarted, `{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"a"}`, `{"type":"TEXT_MESSAGE_CHUNK","name":"bob","delta":"b"}`}, "chunk_conflict"},
		{"ambiguous id-less chunk", []string{runStarted, `{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","subagentRunId":"s1"}`, `{"type":"TEXT_MESSAGE_CHUNK","messageId":"m2","subagentRunId":"s2"}`, `{"type":"TEXT_MESSAGE_CHUNK","delta":"?"}`}, "ambiguous_chunk"},
		{"tagged chunk for another lane's id", []string{runStarted, `{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"n","subagentRunId":"s1"}`, `{"type":"TOOL_CALL_CHUNK","toolCallId":"c","subagentRunId":"s2","delta":"x"}`}, "owner_mismatch"},
		{"explicit args for a chunk-assembled call", []string{runStarted, `{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"n"}`, `{"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"x"}`}, "tool_call_not_open"},
		{"id-less continuation after a result closed the lane", []string{runStarted, `{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"n"}`, `{"type":"TOOL_CALL_RESULT","messageId":"tm","toolCallId":"c","content":"x"}`, `{"type":"TOOL_CALL_CHUNK","delta":"x"}`}, "chunk_missing_id"},
		{"explicit end from another lane", []string{runStarted, `{"type":"TOOL_CALL_CHUNK","toolCallId":"a","toolCallName":"n","subagentRunId":"s1"}`, `{"type":"TOOL_CALL_END","toolCallId":"a"}`}, "chunk_form_mixed"},
		{"chunk after RUN_FINISHED", []string{runStarted, runFinished, `{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"n"}`}, "event_after_run_finished"},
		{"chunk opens a call with the id of an open one", []string{runStarted, `{"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"n"}`, `{"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"n","subagentRunId":"s"}`}, "tool_call_already_open"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantViolation(t, feed(t, nil, Options{}, false, tt.events...), tt.rule)
		})
	}
}

package loop

import (
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/agcore/agrun/registry"
)

// The JSON forms are contracts: session files (Message) and the lines of
// `agrun run --json` (events).

func TestMessageJSONIsStable(t *testing.T) {
	tests := []struct {
		msg  Message
		want string
	}{
		{Message{Role: RoleUser, Content: "hi"}, `{"role":"user","content":"hi"}`},
		{Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "call_1", Name: "wc", Arguments: `{"text":"a"}`}}},
			`{"role":"assistant","tool_calls":[{"id":"call_1","name":"wc","arguments":"{\"text\":\"a\"}"}]}`},
		{Message{Role: RoleTool, ToolCallID: "call_1", Name: "wc", Content: `{"words":1}`},
			`{"role":"tool","content":"{\"words\":1}","tool_call_id":"call_1","name":"wc"}`},
		{Message{Role: RoleAssistant, Content: "text", ToolCalls: []ToolCall{{ID: "x", Name: "n", Arguments: `{"broken`}}},
			`{"role":"assistant","content":"text","tool_calls":[{"id":"x","name":"n","arguments":"{\"broken"}]}`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.msg)
		if err != nil || string(b) != tt.want {
			t.Errorf("marshal %+v\n got %s\nwant %s", tt.msg, b, tt.want)
		}
		var back Message
		if err := json.Unmarshal(b, &back); err != nil || !equalMessages([]Message{back}, []Message{tt.msg}) {
			t.Errorf("round trip of %s gave %+v (%v)", b, back, err)
		}
	}
}

func TestEventJSONLines(t *testing.T) {
	tests := []struct {
		ev   Event
		want string
	}{
		{&TextDelta{Text: "Hi \"you\""}, `{"type":"text_delta","text":"Hi \"you\""}`},
		{&ToolExecutionStarted{ID: "call_1", Name: "word_count", Input: json.RawMessage(`{"text": "a b"}`)},
			`{"type":"tool_started","id":"call_1","name":"word_count","input":{"text":"a b"}}`},
		{&ToolExecutionStarted{ID: "call_2", Name: "word_count", Input: json.RawMessage(`{"text": "a`)},
			`{"type":"tool_started","id":"call_2","name":"word_count","input":"{\"text\": \"a"}`},
		{&ToolExecutionCompleted{ID: "call_1", Name: "word_count", Output: json.RawMessage(`{"words":2}`), Duration: 3 * time.Millisecond},
			`{"type":"tool_completed","id":"call_1","name":"word_count","output":{"words":2},"is_error":false,"error_kind":"","duration_ms":3}`},
		{&ToolExecutionCompleted{ID: "call_3", Name: "x", Output: json.RawMessage(`"no tool named \"x\""`), IsError: true, ErrorKind: registry.NotFound},
			`{"type":"tool_completed","id":"call_3","name":"x","output":"no tool named \"x\"","is_error":true,"error_kind":"not_found","duration_ms":0}`},
		{&ToolExecutionCompleted{ID: "call_4", Name: "mcp__x", Output: json.RawMessage(`1`), Audit: &registry.Audit{Source: "mcp", BytesIn: 2, BytesOut: 1}},
			`{"type":"tool_completed","id":"call_4","name":"mcp__x","output":1,"is_error":false,"error_kind":"","duration_ms":0,"audit":{"source":"mcp","bytes_in":2,"bytes_out":1}}`},
		{&TurnComplete{Reason: "tool_calls", Usage: Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15}},
			`{"type":"turn_complete","reason":"tool_calls","usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.ev)
		if err != nil || string(b) != tt.want {
			t.Errorf("%s:\n got %s (%v)\nwant %s", tt.ev.EventType(), b, err, tt.want)
		}
	}
}

func TestKindOf(t *testing.T) {
	tests := map[error]string{
		nil:                           "",
		ErrMaxTurns:                   "max_turns",
		&RepeatedCallError{Tool: "t"}: "repeated_call",
		&APIError{StatusCode: 400}:    "provider",
		ErrBadResponse:                "provider",
		&TransportError{Err: io.EOF}:  "transport",
		ErrBusy:                       "other",
		ErrInvalidHistory:             "other",
	}
	for err, want := range tests {
		if got := KindOf(err); string(got) != want { // the strings are the contract
			t.Errorf("KindOf(%v) = %q, want %q", err, got, want)
		}
	}
}

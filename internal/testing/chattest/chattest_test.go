package chattest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func post(t *testing.T, s *Server, body string) (int, string) {
	t.Helper()
	res, err := http.Post(s.URL+"/chat/completions", "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// In DeepSeek's thinking mode, a tool-call turn must come back with the
// reasoning_content it came with, unchanged, in every later request.
func TestRequireReasoning(t *testing.T) {
	s := New(t,
		Reply{Reasoning: "think", ToolCalls: []Call{{ID: "call_1", Name: "f", Args: "{}"}}},
		Reply{Text: "ok"})
	s.RequireReasoning()
	code, body := post(t, s, `{"model":"m","messages":[{"role":"user","content":"q"}]}`)
	if code != 200 || !strings.Contains(body, `"reasoning_content":"think"`) {
		t.Fatalf("first reply %d %s", code, body)
	}
	turn := func(reasoning string) string {
		m := map[string]any{"role": "assistant", "content": nil,
			"tool_calls": []any{map[string]any{"id": "call_1", "type": "function", "function": map[string]any{"name": "f", "arguments": "{}"}}}}
		if reasoning != "" {
			m["reasoning_content"] = reasoning
		}
		b, _ := json.Marshal(map[string]any{"model": "m", "messages": []any{
			map[string]any{"role": "user", "content": "q"}, m,
			map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "1"}}})
		return string(b)
	}
	if code, body := post(t, s, turn("")); code != 400 || body != DeepSeekReasoningError {
		t.Errorf("without reasoning_content: %d %s", code, body)
	}
	if code, body := post(t, s, turn("thunk")); code != 400 || body != DeepSeekReasoningError {
		t.Errorf("with changed reasoning_content: %d %s", code, body)
	}
	if code, body := post(t, s, turn("think")); code != 200 || !strings.Contains(body, "ok") {
		t.Errorf("with its reasoning_content: %d %s", code, body)
	}
	if n := len(s.Requests()); n != 4 {
		t.Errorf("%d requests recorded", n)
	}
}

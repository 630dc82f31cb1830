package loop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/loop/chat"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

// wordCount is a registry.Tool written in Go.
type wordCount struct{}

func (wordCount) Name() string        { return "word_count" }
func (wordCount) Description() string { return "Count the words of a text" }
func (wordCount) Parameters() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)
}
func (wordCount) Permissions() []permission.Permission { return nil }
func (wordCount) Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	var in struct{ Text string }
	if err := json.Unmarshal(args, &in); err != nil {
		return nil, err
	}
	return json.Marshal(map[string]int{"words": len(strings.Fields(in.Text))})
}

// fakeModel stands in for an OpenAI-compatible server: it asks for
// word_count once, then answers with the tool's result.
func fakeModel() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		if !strings.Contains(string(body), `"role":"tool"`) {
			fmt.Fprint(w, `data: {"id":"1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_7","type":"function","function":{"name":"word_count","arguments":"{\"text\":\"to be or not to be\"}"}}]},"finish_reason":"tool_calls"}]}`+"\n\n")
		} else {
			fmt.Fprint(w, `data: {"id":"2","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"Six words."},"finish_reason":"stop"}]}`+"\n\n")
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
}

func ExampleCycle_SubmitStreamWithTools() {
	srv := fakeModel()
	defer srv.Close()

	reg := registry.New()
	if err := reg.Register(wordCount{}); err != nil {
		panic(err)
	}
	p, err := chat.New(chat.Config{BaseURL: srv.URL, Model: "any-model"})
	if err != nil {
		panic(err)
	}
	c, err := loop.New(loop.Config{Provider: p, System: "Use tools."})
	if err != nil {
		panic(err)
	}
	for ev, err := range c.SubmitStreamWithTools(context.Background(), "How many words in 'to be or not to be'?", reg) {
		if err != nil {
			fmt.Println("run failed:", loop.KindOf(err), err)
			return
		}
		line, _ := json.Marshal(ev) // the `agrun run --json` line
		if e, ok := ev.(*loop.ToolExecutionCompleted); ok {
			e.Duration = 0 // keep the example's output stable
			line, _ = json.Marshal(e)
		}
		fmt.Println(string(line))
	}
	msgs := c.Messages()
	fmt.Println(len(msgs), "messages; final:", msgs[len(msgs)-1].Content)
	// Output:
	// {"type":"turn_complete","reason":"tool_calls","usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}
	// {"type":"tool_started","id":"call_7","name":"word_count","input":{"text":"to be or not to be"}}
	// {"type":"tool_completed","id":"call_7","name":"word_count","output":{"words":6},"is_error":false,"error_kind":"","duration_ms":0}
	// {"type":"text_delta","text":"Six words."}
	// {"type":"turn_complete","reason":"stop","usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}
	// 4 messages; final: Six words.
}

package anthropictest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

const model = anthropic.Model("claude-sonnet-4-5")

func client(srv *Server, opts ...option.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]option.RequestOption{
		option.WithBaseURL(srv.URL), option.WithAPIKey("test-key"), option.WithMaxRetries(0),
	}, opts...)...)
}

// newClient is client(srv) as a pointer, to call methods on its services.
func newClient(srv *Server) *anthropic.Client {
	c := client(srv)
	return &c
}

var wordCount = anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
	Name:        "word_count",
	Description: anthropic.String("Counts words."),
	InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"text": map[string]any{"type": "string"}}},
}}

func user(text string) anthropic.MessageParam {
	return anthropic.NewUserMessage(anthropic.NewTextBlock(text))
}

// stream sends params as a stream and accumulates the events.
func stream(t *testing.T, c anthropic.Client, params anthropic.MessageNewParams, opts ...option.RequestOption) (anthropic.Message, error) {
	t.Helper()
	s := c.Messages.NewStreaming(context.Background(), params, opts...)
	defer s.Close()
	var msg anthropic.Message
	for s.Next() {
		if err := msg.Accumulate(s.Current()); err != nil {
			t.Fatalf("Accumulate: %v", err)
		}
	}
	return msg, s.Err()
}

// wantAPIError checks that err is the API's error with this status and
// type, and a message containing msg.
func wantAPIError(t *testing.T, err error, status int, typ, msg string) {
	t.Helper()
	var ae *anthropic.Error
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v, want an *anthropic.Error", err)
	}
	if ae.StatusCode != status || string(ae.Type()) != typ || !strings.Contains(ae.Message, msg) {
		t.Fatalf("error = %d %s %q, want %d %s containing %q", ae.StatusCode, ae.Type(), ae.Message, status, typ, msg)
	}
	if !strings.HasPrefix(ae.RequestID, "req_") {
		t.Errorf("RequestID = %q, want req_...", ae.RequestID)
	}
}

// post sends body to the server with an API key and a version, changed as
// headers say, and returns the status and the error's type and message.
func post(t *testing.T, srv *Server, body string, headers ...string) (status int, typ, msg string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(body))
	req.Header.Set("content-type", "application/json")
	req.Header.Set("x-api-key", "test-key")
	req.Header.Set("anthropic-version", "2023-06-01")
	for _, h := range headers { // "name" drops a header, "+name: value" sets one
		if kv, ok := strings.CutPrefix(h, "+"); ok {
			k, v, _ := strings.Cut(kv, ": ")
			req.Header.Set(k, v)
		} else {
			req.Header.Del(h)
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var e struct {
		Type  string
		Error struct{ Type, Message string }
		// request_id is checked below
		RequestID string `json:"request_id"`
	}
	b, _ := io.ReadAll(res.Body)
	json.Unmarshal(b, &e)
	if res.StatusCode != http.StatusOK && (e.Type != "error" || !strings.HasPrefix(e.RequestID, "req_")) {
		t.Errorf("error body = %s, want {\"type\":\"error\",...,\"request_id\":\"req_...\"}", b)
	}
	return res.StatusCode, e.Error.Type, e.Error.Message
}

func TestStreamThroughSDK(t *testing.T) {
	srv := New(t, Reply{
		Thinking:  "The user wants a count.",
		Text:      "Let me count <them> & see.",
		ToolCalls: []Call{{Name: "word_count", Args: `{"text":"a b"}`}, {ID: "toolu_given", Name: "word_count", Args: `{"text":"c"}`}},
	})
	msg, err := stream(t, client(srv), anthropic.MessageNewParams{
		Model: model, MaxTokens: 2048, Messages: []anthropic.MessageParam{user("count a b")},
		Tools: []anthropic.ToolUnionParam{wordCount}, Thinking: anthropic.ThinkingConfigParamOfEnabled(1024),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 4 {
		t.Fatalf("content = %s, want thinking, text and 2 tool_use", msg.RawJSON())
	}
	th, text, call, call2 := msg.Content[0], msg.Content[1], msg.Content[2], msg.Content[3]
	if th.Type != "thinking" || th.Thinking != "The user wants a count." || len(th.Signature) < 150 {
		t.Errorf("thinking block = %+v", th)
	}
	if text.Type != "text" || text.Text != "Let me count <them> & see." {
		t.Errorf("text block = %q %q", text.Type, text.Text)
	}
	if call.Type != "tool_use" || !strings.HasPrefix(call.ID, "toolu_01") || len(call.ID) != 30 || call.Name != "word_count" || string(call.Input) != `{"text":"a b"}` {
		t.Errorf("tool_use block = %s %s %s %s", call.Type, call.ID, call.Name, call.Input)
	}
	if call2.ID != "toolu_given" || string(call2.Input) != `{"text":"c"}` {
		t.Errorf("second tool_use = %s %s", call2.ID, call2.Input)
	}
	if msg.StopReason != "tool_use" || msg.Model != model || !strings.HasPrefix(msg.ID, "msg_01") {
		t.Errorf("message = %s %s %s", msg.ID, msg.Model, msg.StopReason)
	}
	if msg.Usage.InputTokens != 10 || msg.Usage.OutputTokens != 5 || msg.Usage.CacheReadInputTokens != 0 {
		t.Errorf("usage = %+v", msg.Usage)
	}
	got := srv.Requests()
	if len(got) != 1 || !got[0].Stream || got[0].MaxTokens != 2048 || got[0].Model != string(model) ||
		len(got[0].Tools) != 1 || got[0].Tools[0].Name != "word_count" || got[0].Header.Get("Authorization") != "Bearer test-key" {
		t.Fatalf("requests = %+v", got)
	}
	if m := got[0].Messages; len(m) != 1 || m[0].Role != "user" || m[0].Content[0].Text != "count a b" {
		t.Errorf("messages = %+v", m)
	}
	if !bytes.Contains(got[0].Thinking, []byte(`"budget_tokens":1024`)) {
		t.Errorf("thinking = %s", got[0].Thinking)
	}
}

type sseEvent struct {
	name string
	data map[string]any
}

// events sends a raw streamed request and reads the events.
func events(t *testing.T, srv *Server, body string) []sseEvent {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(body))
	req.Header.Set("x-api-key", "k")
	req.Header.Set("anthropic-version", "2023-06-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q", ct)
	}
	var out []sseEvent
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	var name string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
				t.Fatalf("data %q: %v", line, err)
			}
			if d["type"] != name {
				t.Errorf("event %q has data type %v", name, d["type"])
			}
			out = append(out, sseEvent{name, d})
		}
	}
	return out
}

func names(evs []sseEvent) string {
	var s []string
	for _, e := range evs {
		n := e.name
		if d, ok := e.data["delta"].(map[string]any); ok && e.name == "content_block_delta" {
			n = d["type"].(string)
		}
		s = append(s, n)
	}
	return strings.Join(s, " ")
}

const streamBody = `{"model":"claude-sonnet-4-5","max_tokens":2048,"stream":true,"messages":[{"role":"user","content":"hi"}]}`

func TestStreamEventOrder(t *testing.T) {
	srv := New(t, Reply{
		Thinking: "think", RedactedThinking: true, Text: "abc",
		ToolCalls: []Call{{Name: "f", Args: `{"x":1,"y":2}`}},
	})
	evs := events(t, srv, streamBody)
	want := "message_start content_block_start ping thinking_delta thinking_delta signature_delta content_block_stop " +
		"content_block_start content_block_stop " +
		"content_block_start text_delta text_delta text_delta content_block_stop " +
		"content_block_start input_json_delta input_json_delta input_json_delta input_json_delta content_block_stop " +
		"message_delta message_stop"
	if got := names(evs); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	start := evs[0].data["message"].(map[string]any)
	if start["stop_reason"] != nil || len(start["content"].([]any)) != 0 || start["role"] != "assistant" {
		t.Errorf("message_start = %v", start)
	}
	if b := evs[7].data["content_block"].(map[string]any); b["type"] != "redacted_thinking" || len(b["data"].(string)) < 200 {
		t.Errorf("redacted block = %v", b)
	}
	d := evs[len(evs)-2].data
	if d["delta"].(map[string]any)["stop_reason"] != "tool_use" || d["usage"].(map[string]any)["output_tokens"] != 5.0 {
		t.Errorf("message_delta = %v", d)
	}
}

func TestNonStreamed(t *testing.T) {
	srv := New(t, Reply{Text: "Hello.", Usage: &Usage{InputTokens: 7, OutputTokens: 3}},
		Reply{Thinking: "hmm", ToolCalls: []Call{{Name: "word_count", Args: `{"text":"a"}`}}})
	c := client(srv)
	msg, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model: model, MaxTokens: 100, Messages: []anthropic.MessageParam{user("hi")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Text != "Hello." || msg.StopReason != "end_turn" ||
		msg.Usage.InputTokens != 7 || msg.Usage.OutputTokens != 3 || msg.Role != "assistant" {
		t.Errorf("message = %s", msg.RawJSON())
	}
	msg, err = c.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model: model, MaxTokens: 2000, Messages: []anthropic.MessageParam{user("count")},
		Tools: []anthropic.ToolUnionParam{wordCount}, Thinking: anthropic.ThinkingConfigParamOfEnabled(1024),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 2 || msg.Content[0].Signature == "" || msg.Content[1].Name != "word_count" || msg.StopReason != "tool_use" {
		t.Errorf("message = %s", msg.RawJSON())
	}
	if srv.Requests()[1].Stream {
		t.Error("request recorded as a stream")
	}
}

// TestRefusedThroughSDK sends requests the API refuses, as the SDK builds
// them.
func TestRefusedThroughSDK(t *testing.T) {
	toolUse := anthropic.NewAssistantMessage(anthropic.NewToolUseBlock("toolu_1", map[string]any{"text": "a b"}, "word_count"))
	base := func() anthropic.MessageNewParams {
		return anthropic.MessageNewParams{Model: model, MaxTokens: 100, Messages: []anthropic.MessageParam{user("hi")}}
	}
	cc := anthropic.NewCacheControlEphemeralParam()
	tests := []struct {
		name   string
		edit   func(p *anthropic.MessageNewParams)
		opts   []option.RequestOption
		status int
		typ    string
		msg    string
	}{
		{"no model", func(p *anthropic.MessageNewParams) { p.Model = "" }, nil, 400, "invalid_request_error", "model: Field required"},
		{"max_tokens 0", func(p *anthropic.MessageNewParams) { p.MaxTokens = 0 }, nil, 400, "invalid_request_error", "max_tokens: Input should be greater than or equal to 1"},
		{"no messages", func(p *anthropic.MessageNewParams) { p.Messages = nil }, nil, 400, "invalid_request_error", "messages: Field required"},
		{"first message assistant", func(p *anthropic.MessageNewParams) {
			p.Messages = []anthropic.MessageParam{anthropic.NewAssistantMessage(anthropic.NewTextBlock("hi")), user("hi")}
		}, nil, 400, "invalid_request_error", `messages: first message must use the "user" role`},
		{"empty text block", func(p *anthropic.MessageNewParams) { p.Messages = []anthropic.MessageParam{user("")} },
			nil, 400, "invalid_request_error", "messages: text content blocks must be non-empty"},
		{"tool_use without tool_result", func(p *anthropic.MessageNewParams) {
			p.Messages = append(p.Messages, toolUse, user("and?"))
		}, nil, 400, "invalid_request_error", "messages.2: Did not find 1 `tool_result` block(s) at the beginning of this message."},
		{"tool_result after text", func(p *anthropic.MessageNewParams) {
			p.Messages = append(p.Messages, toolUse, anthropic.NewUserMessage(anthropic.NewTextBlock("here:"), anthropic.NewToolResultBlock("toolu_1", "2", false)))
		}, nil, 400, "invalid_request_error", "messages.2: Did not find 1 `tool_result` block(s) at the beginning of this message."},
		{"tool_use ids not answered", func(p *anthropic.MessageNewParams) {
			p.Messages = append(p.Messages,
				anthropic.NewAssistantMessage(anthropic.NewToolUseBlock("toolu_1", map[string]any{}, "word_count"), anthropic.NewToolUseBlock("toolu_2", map[string]any{}, "word_count")),
				anthropic.NewUserMessage(anthropic.NewToolResultBlock("toolu_1", "2", false)))
		}, nil, 400, "invalid_request_error", "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_2. Each `tool_use` block must have a corresponding `tool_result` block in the next message."},
		{"unexpected tool_use_id", func(p *anthropic.MessageNewParams) {
			p.Messages = append(p.Messages, toolUse, anthropic.NewUserMessage(anthropic.NewToolResultBlock("toolu_other", "2", false)))
		}, nil, 400, "invalid_request_error", "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_other. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."},
		{"tool_result with no tool_use before", func(p *anthropic.MessageNewParams) {
			p.Messages = []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewToolResultBlock("toolu_1", "2", false))}
		}, nil, 400, "invalid_request_error", "messages.0.content.0: unexpected `tool_use_id`"},
		{"thinking budget under 1024", func(p *anthropic.MessageNewParams) { p.Thinking = anthropic.ThinkingConfigParamOfEnabled(1000) },
			nil, 400, "invalid_request_error", "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"},
		{"thinking budget not under max_tokens", func(p *anthropic.MessageNewParams) {
			p.MaxTokens = 1024
			p.Thinking = anthropic.ThinkingConfigParamOfEnabled(1024)
		}, nil, 400, "invalid_request_error", "`max_tokens` must be greater than `thinking.budget_tokens`"},
		{"thinking with forced tool use", func(p *anthropic.MessageNewParams) {
			p.MaxTokens = 2048
			p.Thinking = anthropic.ThinkingConfigParamOfEnabled(1024)
			p.Tools = []anthropic.ToolUnionParam{wordCount}
			p.ToolChoice = anthropic.ToolChoiceUnionParam{OfAny: &anthropic.ToolChoiceAnyParam{}}
		}, nil, 400, "invalid_request_error", "Thinking may not be enabled when tool_choice forces tool use."},
		{"thinking on, tool loop without thinking block", func(p *anthropic.MessageNewParams) {
			p.MaxTokens = 2048
			p.Thinking = anthropic.ThinkingConfigParamOfEnabled(1024)
			p.Tools = []anthropic.ToolUnionParam{wordCount}
			p.Messages = append(p.Messages, toolUse, anthropic.NewUserMessage(anthropic.NewToolResultBlock("toolu_1", "2", false)))
		}, nil, 400, "invalid_request_error", "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a final `assistant` message must start with a thinking block"},
		{"thinking block not issued", func(p *anthropic.MessageNewParams) {
			p.Messages = append(p.Messages, anthropic.NewAssistantMessage(anthropic.NewThinkingBlock("c2lnbmF0dXJl", "made up"), anthropic.NewTextBlock("ok")), user("more"))
		}, nil, 400, "invalid_request_error", "messages.1.content.0: Invalid `signature` in `thinking` block"},
		{"redacted thinking not issued", func(p *anthropic.MessageNewParams) {
			p.Messages = append(p.Messages, anthropic.NewAssistantMessage(anthropic.NewRedactedThinkingBlock("ZGF0YQ=="), anthropic.NewTextBlock("ok")), user("more"))
		}, nil, 400, "invalid_request_error", "messages.1.content.0: Invalid `data` in `redacted_thinking` block"},
		{"bad tool name", func(p *anthropic.MessageNewParams) {
			p.Tools = []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "word.count", InputSchema: anthropic.ToolInputSchemaParam{}}}}
		}, nil, 400, "invalid_request_error", "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'"},
		{"tool name too long", func(p *anthropic.MessageNewParams) {
			p.Tools = []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: strings.Repeat("a", 65), InputSchema: anthropic.ToolInputSchemaParam{}}}}
		}, nil, 400, "invalid_request_error", "tools.0.custom.name: String should match pattern"},
		{"duplicate tool names", func(p *anthropic.MessageNewParams) { p.Tools = []anthropic.ToolUnionParam{wordCount, wordCount} },
			nil, 400, "invalid_request_error", "tools: Tool names must be unique."},
		{"five cache_control blocks", func(p *anthropic.MessageNewParams) {
			for range 5 {
				p.System = append(p.System, anthropic.TextBlockParam{Text: "rule", CacheControl: cc})
			}
		}, nil, 400, "invalid_request_error", "A maximum of 4 blocks with cache_control may be provided. Found 5."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := New(t, Reply{Text: "should not be used"})
			p := base()
			if tt.edit != nil {
				tt.edit(&p)
			}
			opts := tt.opts
			if opts == nil {
				opts = []option.RequestOption{option.WithAPIKey("k")}
			}
			c := anthropic.NewClient(append([]option.RequestOption{option.WithBaseURL(srv.URL), option.WithMaxRetries(0)}, opts...)...)
			_, err := c.Messages.New(context.Background(), p)
			wantAPIError(t, err, tt.status, tt.typ, tt.msg)
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("%d requests recorded, want 1", n)
			}
			// The refusal used no reply: the next good request gets it.
			if _, err := newClient(srv).Messages.New(context.Background(), base()); err != nil {
				t.Errorf("good request after a refused one: %v", err)
			}
		})
	}
}

// TestRefusedRaw sends requests the SDK cannot build.
func TestRefusedRaw(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		hdrs   []string
		status int
		typ    string
		msg    string
	}{
		{"no x-api-key", streamBody, []string{"x-api-key"}, 401, "authentication_error", "x-api-key header is required"},
		{"bearer token with 2023-06-01", streamBody, []string{"x-api-key", "+Authorization: Bearer sk-ant-test"}, 401, "authentication_error", "x-api-key header is required"},
		{"bearer token without a token", streamBody, []string{"x-api-key", "+Authorization: Bearer ", "+anthropic-version: 2026-10-21"}, 401, "authentication_error", "x-api-key header is required"},
		{"unknown version", streamBody, []string{"+anthropic-version: 2024-10-22"}, 400, "invalid_request_error", `anthropic-version: "2024-10-22" is not a valid version`},
		{"no anthropic-version", streamBody, []string{"anthropic-version"}, 400, "invalid_request_error", "anthropic-version: header is required"},
		{"not JSON", `{"model":`, nil, 400, "invalid_request_error", "There was an error parsing the body"},
		{"unknown parameter", `{"model":"m","max_tokens":5,"max_completion_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error", "max_completion_tokens: Extra inputs are not permitted"},
		{"no max_tokens", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error", "max_tokens: Field required"},
		{"max_tokens not an integer", `{"model":"m","max_tokens":"5","messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error", "max_tokens: Input should be a valid integer"},
		{"max_tokens fractional", `{"model":"m","max_tokens":5.5,"messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error", "max_tokens: Input should be a valid integer"},
		{"model not a string", `{"model":5,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error", "model: Input should be a valid string"},
		{"empty messages", `{"model":"m","max_tokens":5,"messages":[]}`, nil, 400, "invalid_request_error", "messages: at least one message is required"},
		{"unknown role", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"tool","content":"x"}]}`, nil, 400, "invalid_request_error", "messages.1.role: Input should be 'user' or 'assistant'"},
		{"system role on a model without it", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"system","content":"x"}]}`, nil, 400, "invalid_request_error", "messages.1: role 'system' is not supported on this model"},
		{"empty content", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[]}]}`, nil, 400, "invalid_request_error", "messages.0: all messages must have non-empty content except for the optional final assistant message"},
		{"no content", `{"model":"m","max_tokens":5,"messages":[{"role":"user"}]}`, nil, 400, "invalid_request_error", "messages.0.content: Field required"},
		{"blank text", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"  "}]}`, nil, 400, "invalid_request_error", "messages: text content blocks must contain non-whitespace text"},
		{"prefill ends in whitespace", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"The answer is "}]}`, nil, 400, "invalid_request_error", "messages: final assistant content cannot end with trailing whitespace"},
		{"tool_use without input", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f"}]}]}`, nil, 400, "invalid_request_error", "messages.1.content.0.tool_use.input: Field required"},
		{"thinking without signature", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"x"},{"type":"text","text":"y"}]},{"role":"user","content":"z"}]}`, nil, 400, "invalid_request_error", "messages.1.content.0.thinking.signature: Field required"},
		{"tool_use in the final assistant message", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_9","name":"f","input":{}}]}]}`, nil, 400, "invalid_request_error", "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_9."},
		{"tool without input_schema", `{"model":"m","max_tokens":5,"tools":[{"name":"f"}],"messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error", "tools.0.custom.input_schema: Field required"},
		{"input_schema not an object schema", `{"model":"m","max_tokens":5,"tools":[{"name":"f","input_schema":{"type":"string"}}],"messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error", "tools.0.custom.input_schema.type: Input should be 'object'"},
		{"unknown thinking type", `{"model":"m","max_tokens":5,"thinking":{"type":"on"},"messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error", "thinking: Input tag 'on'"},
		{"thinking without budget", `{"model":"m","max_tokens":5000,"thinking":{"type":"enabled"},"messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error", "thinking.enabled.budget_tokens: Field required"},
		{"stream not a boolean", `{"model":"m","max_tokens":5,"stream":"yes","messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error", "stream: Input should be a valid boolean"},
		{"redacted thinking not issued", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"y"},{"type":"redacted_thinking","data":"x"}]},{"role":"user","content":"z"}]}`, nil, 400, "invalid_request_error", "messages.1.content.1: Invalid `data` in `redacted_thinking` block"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := New(t, Reply{Text: "unused"})
			status, typ, msg := post(t, srv, tt.body, tt.hdrs...)
			if status != tt.status || typ != tt.typ || !strings.Contains(msg, tt.msg) {
				t.Errorf("got %d %s %q, want %d %s containing %q", status, typ, msg, tt.status, tt.typ, tt.msg)
			}
			if got := srv.Requests(); len(got) != 1 || string(got[0].Raw) != tt.body {
				t.Errorf("recorded %d requests, raw %q", len(got), got[0].Raw)
			}
		})
	}
}

func TestNotFound(t *testing.T) {
	srv := New(t)
	res, err := http.Post(srv.URL+"/v1/complete", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 404 || len(srv.Requests()) != 1 {
		t.Errorf("status %d, %d requests", res.StatusCode, len(srv.Requests()))
	}
}

func TestAccepted(t *testing.T) {
	tests := []struct{ name, body string }{
		// The API combines consecutive messages of one role into one turn.
		{"consecutive user messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`},
		{"tool results split over user messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"a"},` +
			`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"1"}]},{"role":"user","content":"and then?"}]}`},
		{"tool results then text", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"a"},` +
			`{"role":"assistant","content":[{"type":"text","text":"ok"},{"type":"tool_use","id":"t1","name":"f","input":{}},{"type":"tool_use","id":"t2","name":"f","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"2"},{"type":"tool_result","tool_use_id":"t1","is_error":true,"content":[{"type":"text","text":"boom"}]},{"type":"text","text":"go on"}]}]}`},
		{"prefill", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"The answer is"}]}`},
		{"empty final assistant", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[]}]}`},
		// A new user turn starts a new assistant turn: no thinking block needed.
		{"thinking on after a tool loop without thinking", `{"model":"m","max_tokens":5000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"a"},` +
			`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"1"}]},{"role":"assistant","content":"done"},{"role":"user","content":"next"}]}`},
		{"interleaved thinking budget over max_tokens", `{"model":"m","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":4000},"messages":[{"role":"user","content":"a"}]}`},
		{"system message on opus 4.8", `{"model":"claude-opus-4-8","max_tokens":5,"messages":[{"role":"user","content":"a"},{"role":"system","content":"be brief"},{"role":"assistant","content":"ok"},{"role":"user","content":"b"}]}`},
		{"server tool", `{"model":"m","max_tokens":5,"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":5}],"messages":[{"role":"user","content":"a"}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := New(t, Reply{Text: "fine"})
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(tt.body))
			req.Header.Set("x-api-key", "k")
			req.Header.Set("anthropic-version", "2023-06-01")
			req.Header.Set("anthropic-beta", "fine-grained-tool-streaming-2025-05-14, interleaved-thinking-2025-05-14")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || !strings.Contains(string(b), `"text":"fine"`) {
				t.Errorf("got %d %s", res.StatusCode, b)
			}
		})
	}
}

// TestThinkingToolRoundTrip passes the thinking blocks of a tool call back
// with its result, as the API requires.
func TestThinkingToolRoundTrip(t *testing.T) {
	srv := New(t,
		Reply{Thinking: "I should count.", RedactedThinking: true, ToolCalls: []Call{{Name: "word_count", Args: `{"text":"a b"}`}}},
		Reply{Text: "There are 2 words."},
		Reply{Text: "Bye."},
	)
	c := client(srv)
	params := anthropic.MessageNewParams{
		Model: model, MaxTokens: 2048, Thinking: anthropic.ThinkingConfigParamOfEnabled(1024),
		Tools: []anthropic.ToolUnionParam{wordCount}, Messages: []anthropic.MessageParam{user("count a b")},
	}
	first, err := stream(t, c, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Content) != 3 || first.Content[1].Type != "redacted_thinking" {
		t.Fatalf("first reply = %s", first.RawJSON())
	}
	result := anthropic.NewUserMessage(anthropic.NewToolResultBlock(first.Content[2].ID, "2", false))
	with := func(assistant anthropic.MessageParam) anthropic.MessageNewParams {
		p := params
		p.Messages = []anthropic.MessageParam{user("count a b"), assistant, result}
		return p
	}

	// One byte of the signature changed.
	bad := first.ToParam()
	sig := []byte(bad.OfAssistant.Content[0].OfThinking.Signature)
	sig[10] ^= 1
	bad.OfAssistant.Content[0].OfThinking.Signature = string(sig)
	_, err = stream(t, c, with(bad))
	wantAPIError(t, err, 400, "invalid_request_error", "messages.1.content.0: Invalid `signature` in `thinking` block")

	// The thinking text changed under its signature.
	edited := first.ToParam()
	edited.OfAssistant.Content[0].OfThinking.Thinking += "!"
	_, err = stream(t, c, with(edited))
	wantAPIError(t, err, 400, "invalid_request_error", "messages.1.content.0: `thinking` or `redacted_thinking` blocks in the latest assistant message cannot be modified.")

	// One byte of the redacted data changed.
	redacted := first.ToParam()
	data := []byte(redacted.OfAssistant.Content[1].OfRedactedThinking.Data)
	data[5] ^= 1
	redacted.OfAssistant.Content[1].OfRedactedThinking.Data = string(data)
	_, err = stream(t, c, with(redacted))
	wantAPIError(t, err, 400, "invalid_request_error", "messages.1.content.1: Invalid `data` in `redacted_thinking` block")

	// The thinking blocks moved after the tool call.
	moved := first.ToParam()
	moved.OfAssistant.Content = append(moved.OfAssistant.Content[2:], moved.OfAssistant.Content[:2]...)
	_, err = stream(t, c, with(moved))
	wantAPIError(t, err, 400, "invalid_request_error", "messages.1.content.0: If an assistant message contains any thinking blocks, the first block must be thinking or redacted_thinking. Found tool_use.")

	// The thinking blocks left out.
	dropped := first.ToParam()
	dropped.OfAssistant.Content = dropped.OfAssistant.Content[2:]
	_, err = stream(t, c, with(dropped))
	wantAPIError(t, err, 400, "invalid_request_error", "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`.")

	// Passed back unchanged.
	second, err := stream(t, c, with(first.ToParam()))
	if err != nil {
		t.Fatal(err)
	}
	if second.Content[0].Text != "There are 2 words." {
		t.Errorf("second reply = %s", second.RawJSON())
	}
	if got := srv.Requests(); len(got) != 7 {
		t.Errorf("%d requests recorded, want 7", len(got))
	}

	// The next user turn: the old thinking blocks may stay (they are checked)
	// or go.
	p := with(first.ToParam())
	p.Messages = append(p.Messages, second.ToParam(), user("thanks"))
	p.Messages[1].OfAssistant.Content = p.Messages[1].OfAssistant.Content[2:]
	if _, err := stream(t, c, p); err != nil {
		t.Errorf("new turn without the old thinking: %v", err)
	}
}

func TestPromptCaching(t *testing.T) {
	srv := New(t, Reply{Text: "1"}, Reply{Text: "2"}, Reply{Text: "3"}, Reply{Text: "4", Usage: &Usage{InputTokens: 1, OutputTokens: 2, CacheReadInputTokens: 3}}, Reply{Text: "5"})
	c := client(srv)
	long := strings.Repeat("You are a careful assistant. ", 100)
	cached := func(system string) anthropic.MessageNewParams {
		tool := *wordCount.OfTool
		tool.CacheControl = anthropic.NewCacheControlEphemeralParam()
		return anthropic.MessageNewParams{
			Model: model, MaxTokens: 100, Messages: []anthropic.MessageParam{user("hi")},
			Tools:  []anthropic.ToolUnionParam{{OfTool: &tool}},
			System: []anthropic.TextBlockParam{{Text: system, CacheControl: anthropic.NewCacheControlEphemeralParam()}},
		}
	}
	usage := func(p anthropic.MessageNewParams) anthropic.Usage {
		t.Helper()
		msg, err := stream(t, c, p)
		if err != nil {
			t.Fatal(err)
		}
		return msg.Usage
	}
	u1 := usage(cached(long))
	if u1.CacheCreationInputTokens < int64(len(long)/4) || u1.CacheReadInputTokens != 0 || u1.InputTokens != 10 {
		t.Errorf("first usage = %+v, want cache creation of the prefix", u1)
	}
	p := cached(long)
	p.Messages = append(p.Messages, anthropic.NewAssistantMessage(anthropic.NewTextBlock("hello")), user("again"))
	u2 := usage(p)
	if u2.CacheReadInputTokens != u1.CacheCreationInputTokens || u2.CacheCreationInputTokens != 0 {
		t.Errorf("second usage = %+v, want a cache read of %d", u2, u1.CacheCreationInputTokens)
	}
	// Another system prompt: the tools are still cached, the rest is new.
	u3 := usage(cached(long + "Be brief."))
	if u3.CacheReadInputTokens == 0 || u3.CacheReadInputTokens >= u1.CacheCreationInputTokens || u3.CacheCreationInputTokens == 0 {
		t.Errorf("third usage = %+v, want the tools read, the system written", u3)
	}
	// An explicit Usage wins.
	if u4 := usage(cached(long)); u4.CacheReadInputTokens != 3 || u4.InputTokens != 1 || u4.CacheCreationInputTokens != 0 {
		t.Errorf("scripted usage = %+v", u4)
	}
	// No breakpoint: the default usage.
	if u5 := usage(anthropic.MessageNewParams{Model: model, MaxTokens: 100, System: []anthropic.TextBlockParam{{Text: long}}, Messages: []anthropic.MessageParam{user("hi")}}); u5.CacheReadInputTokens != 0 || u5.CacheCreationInputTokens != 0 {
		t.Errorf("usage without breakpoints = %+v", u5)
	}
}

func TestErrorReplies(t *testing.T) {
	srv := New(t, Overloaded(), RateLimited("7"), PromptTooLong(210000, 200000), InvalidRequest("nope"),
		Reply{StreamError: "overloaded_error"}, Reply{StreamError: "api_error"})
	c := client(srv)
	p := anthropic.MessageNewParams{Model: model, MaxTokens: 100, Messages: []anthropic.MessageParam{user("hi")}}
	_, err := c.Messages.New(context.Background(), p)
	wantAPIError(t, err, 529, "overloaded_error", "Overloaded")
	_, err = c.Messages.New(context.Background(), p)
	wantAPIError(t, err, 429, "rate_limit_error", "rate limit")
	var ae *anthropic.Error
	if errors.As(err, &ae); ae.Response.Header.Get("retry-after") != "7" {
		t.Errorf("retry-after = %q", ae.Response.Header.Get("retry-after"))
	}
	_, err = c.Messages.New(context.Background(), p)
	wantAPIError(t, err, 400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")
	_, err = c.Messages.New(context.Background(), p)
	wantAPIError(t, err, 400, "invalid_request_error", "nope")
	// An error event in the stream, after message_start.
	_, err = stream(t, c, p)
	if !errors.As(err, &ae) || ae.Type() != "overloaded_error" || ae.Message != "Overloaded" {
		t.Errorf("stream error = %v", err)
	}
	// The same error without a stream is its HTTP status.
	_, err = c.Messages.New(context.Background(), p)
	wantAPIError(t, err, 500, "api_error", "Internal server error")
	// Past the script's end.
	_, err = c.Messages.New(context.Background(), p)
	wantAPIError(t, err, 400, "invalid_request_error", "anthropictest: script exhausted")
}

func TestStreamErrorEvent(t *testing.T) {
	srv := New(t, Reply{StreamError: "overloaded_error", Text: "never"})
	evs := events(t, srv, streamBody)
	if got := names(evs); got != "message_start error" {
		t.Fatalf("events = %s", got)
	}
	if e := evs[1].data["error"].(map[string]any); e["type"] != "overloaded_error" || e["message"] != "Overloaded" {
		t.Errorf("error event = %v", evs[1].data)
	}
}

func TestCut(t *testing.T) {
	const args = `{"text":"a b c d e f"}`
	srv := New(t, Reply{Text: "Counting.", ToolCalls: []Call{{Name: "word_count", Args: args}, {Name: "word_count", Args: `{}`}}, Cut: true},
		Reply{Text: "abcdefgh", Cut: true})
	evs := events(t, srv, streamBody)
	got := names(evs)
	if strings.Contains(got, "message_delta") || strings.Contains(got, "message_stop") ||
		!strings.Contains(got, "text_delta content_block_stop content_block_start input_json_delta") || !strings.HasSuffix(got, "input_json_delta") {
		t.Fatalf("events = %s", got)
	}
	var sent string
	for _, e := range evs {
		if d, ok := e.data["delta"].(map[string]any); ok && d["type"] == "input_json_delta" {
			sent += d["partial_json"].(string)
		}
	}
	if sent != args[:len(args)/2] {
		t.Errorf("input sent = %q, want the first half of %q", sent, args)
	}
	evs = events(t, srv, streamBody)
	var text string
	for _, e := range evs {
		if d, ok := e.data["delta"].(map[string]any); ok && d["type"] == "text_delta" {
			text += d["text"].(string)
		}
	}
	if text != "abcd" || strings.Contains(names(evs), "content_block_stop") {
		t.Errorf("cut text = %q, events %s", text, names(evs))
	}
}

func TestStall(t *testing.T) {
	gone := make(chan struct{})
	srv := New(t, Reply{Text: "Thinking about it", Stall: true, Gone: gone})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newClient(srv).Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: model, MaxTokens: 100, Messages: []anthropic.MessageParam{user("hi")}})
	var msg anthropic.Message
	for s.Next() {
		msg.Accumulate(s.Current())
		if len(msg.Content) == 1 && msg.Content[0].Text == "Thinking about it" {
			cancel()
		}
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("Gone not closed after the client went away")
	}
	if msg.StopReason != "" {
		t.Errorf("stop reason %q sent during a stall", msg.StopReason)
	}
}

func TestHoldAndCheck(t *testing.T) {
	started, hold := make(chan struct{}), make(chan struct{})
	var checked Request
	srv := New(t, Reply{Text: "ok", Started: started, Hold: hold, Delay: time.Millisecond, Header: map[string]string{"x-test": "1"},
		Check: func(t testing.TB, got Request) { checked = got }})
	done := make(chan error)
	go func() {
		_, err := newClient(srv).Messages.New(context.Background(), anthropic.MessageNewParams{Model: model, MaxTokens: 100, Messages: []anthropic.MessageParam{user("hi")}})
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("answered before Started: %v", err)
	}
	select {
	case <-done:
		t.Fatal("answered during Hold")
	case <-time.After(5 * time.Millisecond):
	}
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if checked.Model != string(model) || checked.Messages[0].Content[0].Text != "hi" {
		t.Errorf("Check got %+v", checked)
	}
}

func TestRawReplies(t *testing.T) {
	recorded := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_x\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"raw\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":1}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	srv := New(t, Reply{Events: recorded}, Reply{Status: 503, Body: `{"type":"error","error":{"type":"api_error","message":"odd"},"request_id":"req_1"}`}, Reply{Text: "x", StopReason: "max_tokens"})
	c := client(srv)
	p := anthropic.MessageNewParams{Model: model, MaxTokens: 100, Messages: []anthropic.MessageParam{user("hi")}}
	msg, err := stream(t, c, p)
	if err != nil || msg.Content[0].Text != "raw" || msg.StopReason != "max_tokens" {
		t.Errorf("events reply = %s, %v", msg.RawJSON(), err)
	}
	_, err = c.Messages.New(context.Background(), p)
	wantAPIError(t, err, 503, "api_error", "odd")
	res, err := c.Messages.New(context.Background(), p)
	if err != nil || res.StopReason != "max_tokens" {
		t.Errorf("reply = %v, %v", res, err)
	}
}

func TestConcurrent(t *testing.T) {
	const n = 8
	srv := New(t)
	for range n {
		srv.Add(Reply{Thinking: "t", Text: "ok"})
	}
	c := client(srv)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			s := c.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{Model: model, MaxTokens: 2000, Thinking: anthropic.ThinkingConfigParamOfEnabled(1024), Messages: []anthropic.MessageParam{user("hi")}})
			defer s.Close()
			var msg anthropic.Message
			for s.Next() {
				if err := msg.Accumulate(s.Current()); err != nil {
					t.Error(err)
				}
			}
			if s.Err() != nil || len(msg.Content) != 2 || msg.Content[1].Text != "ok" {
				t.Errorf("reply %s, %v", msg.RawJSON(), s.Err())
			}
		})
	}
	wg.Wait()
	if got := len(srv.Requests()); got != n {
		t.Errorf("%d requests, want %d", got, n)
	}
	srv.Close()
	if _, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: model, MaxTokens: 1, Messages: []anthropic.MessageParam{user("hi")}}); err == nil {
		t.Error("request after Close succeeded")
	}
}

package loop

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

// This file holds the test doubles: a scripted Chat Completions server that
// records what it receives, and Go-function tools in a real registry.

// wireRequest is a request body as the server decodes it.
type wireRequest struct {
	Model         string        `json:"model"`
	Messages      []wireMessage `json:"messages"`
	Tools         []wireTool    `json:"tools"`
	Stream        bool          `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	ParallelToolCalls *bool    `json:"parallel_tool_calls"`
	Temperature       *float64 `json:"temperature"`
}

type wireMessage struct {
	Role       string         `json:"role"`
	Content    *string        `json:"content"`
	ToolCalls  []wireToolCall `json:"tool_calls"`
	ToolCallID *string        `json:"tool_call_id"`
}

type wireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type wireTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// received is one request the server got.
type received struct {
	Body   wireRequest
	Raw    []byte
	Header http.Header
}

// step answers one request. It may inspect what was received.
type step func(t *testing.T, w http.ResponseWriter, r *http.Request, got received)

// scriptServer answers requests with its steps, in order.
type scriptServer struct {
	t     *testing.T
	srv   *httptest.Server
	mu    sync.Mutex
	steps []step
	got   []received
}

func newServer(t *testing.T, steps ...step) *scriptServer {
	t.Helper()
	s := &scriptServer{t: t, steps: steps}
	s.srv = httptest.NewServer(http.HandlerFunc(s.handle))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *scriptServer) handle(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body wireRequest
	if err := json.Unmarshal(raw, &body); err != nil {
		s.t.Errorf("server: request body is not JSON: %v\n%s", err, raw)
	}
	if r.URL.Path != "/v1/chat/completions" {
		s.t.Errorf("server: path %q", r.URL.Path)
	}
	got := received{Body: body, Raw: raw, Header: r.Header.Clone()}
	s.mu.Lock()
	n := len(s.got)
	s.got = append(s.got, got)
	var st step
	if n < len(s.steps) {
		st = s.steps[n]
	}
	s.mu.Unlock()
	if st == nil {
		s.t.Errorf("server: unexpected request %d: %s", n+1, raw)
		http.Error(w, `{"error":{"message":"no more steps"}}`, http.StatusTeapot)
		return
	}
	st(s.t, w, r, got)
}

// requests returns what the server received so far.
func (s *scriptServer) requests() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.got...)
}

func (s *scriptServer) url() string { return s.srv.URL + "/v1" }

// cycle returns a Cycle talking to s.
func (s *scriptServer) cycle(t *testing.T, cfg Config) *Cycle {
	t.Helper()
	cfg.BaseURL = s.url()
	if cfg.Model == "" {
		cfg.Model = "test-model"
	}
	if cfg.APIKey == "" {
		cfg.APIKey = "sk-test"
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// --- replies ---

type callSpec struct{ id, name, args string }

// jsonReply answers with a non-streamed completion.
func jsonReply(content string, finish string, calls ...callSpec) step {
	return func(t *testing.T, w http.ResponseWriter, r *http.Request, got received) {
		msg := map[string]any{"role": "assistant", "content": content}
		if content == "" {
			msg["content"] = nil
		}
		if len(calls) > 0 {
			var tcs []map[string]any
			for _, c := range calls {
				tc := map[string]any{"type": "function", "function": map[string]any{"name": c.name, "arguments": c.args}}
				if c.id != "" {
					tc["id"] = c.id
				}
				tcs = append(tcs, tc)
			}
			msg["tool_calls"] = tcs
		}
		writeJSON(w, map[string]any{
			"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": got.Body.Model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
			"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
		})
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// sseFile answers with testdata/<name>, a raw event stream.
func sseFile(name string) step {
	return func(t *testing.T, w http.ResponseWriter, r *http.Request, got received) {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Errorf("fixture: %v", err)
			http.Error(w, "no fixture", 500)
			return
		}
		if !got.Body.Stream {
			t.Errorf("request for %s is not a stream request", name)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(data)
	}
}

// sseChunks answers with the given chunk JSON objects as data lines, then
// [DONE]. Each chunk is flushed on its own.
func sseChunks(chunks ...string) step {
	return func(t *testing.T, w http.ResponseWriter, r *http.Request, got received) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range chunks {
			fmt.Fprintf(w, "data: %s\n\n", c)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
}

// textChunk is a streamed text delta.
func textChunk(text string) string {
	b, _ := json.Marshal(text)
	return `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":` + string(b) + `},"finish_reason":null}]}`
}

// stopChunk ends a streamed reply.
const stopChunk = `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`

// streamText answers with a streamed text reply.
func streamText(parts ...string) step {
	var chunks []string
	for _, p := range parts {
		chunks = append(chunks, textChunk(p))
	}
	return sseChunks(append(chunks, stopChunk)...)
}

// callChunk is one streamed chunk with one whole tool call at index i.
func callChunk(i int, id, name, args string) string {
	a, _ := json.Marshal(args)
	return fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":%d,"id":%q,"type":"function","function":{"name":%q,"arguments":%s}}]},"finish_reason":null}]}`, i, id, name, a)
}

const toolCallsFinishChunk = `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`

// status answers with an HTTP error.
func status(code int, body string, headers ...string) step {
	return func(t *testing.T, w http.ResponseWriter, r *http.Request, got received) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

// expect wraps a step with checks on what was received.
func expect(check func(t *testing.T, got received), then step) step {
	return func(t *testing.T, w http.ResponseWriter, r *http.Request, got received) {
		check(t, got)
		then(t, w, r, got)
	}
}

// --- tools ---

// funcTool is a registry.Tool backed by a Go function.
type funcTool struct {
	name   string
	desc   string
	params string
	fn     func(ctx context.Context, args json.RawMessage) (json.RawMessage, error)
}

func (f *funcTool) Name() string        { return f.name }
func (f *funcTool) Description() string { return f.desc }
func (f *funcTool) Parameters() json.RawMessage {
	if f.params == "" {
		return json.RawMessage(`{"type":"object"}`)
	}
	return json.RawMessage(f.params)
}
func (f *funcTool) Permissions() []permission.Permission { return nil }
func (f *funcTool) Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	return f.fn(ctx, args)
}

// wordCount counts the words of {"text": "..."}.
func wordCount() *funcTool {
	return &funcTool{
		name:   "word_count",
		desc:   "Count the words of a text",
		params: `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`,
		fn: func(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
			var in struct{ Text string }
			if err := json.Unmarshal(args, &in); err != nil {
				return nil, err
			}
			return json.Marshal(map[string]int{"words": len(strings.Fields(in.Text))})
		},
	}
}

// recorder is a tool that records its calls and answers {"ok":<n>}.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (rc *recorder) tool(name string) *funcTool {
	return &funcTool{name: name, desc: "records calls", fn: func(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		rc.calls = append(rc.calls, name+" "+string(args))
		return json.RawMessage(fmt.Sprintf(`{"ok":%d}`, len(rc.calls))), nil
	}}
}

func (rc *recorder) got() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.calls...)
}

func newRegistry(t *testing.T, tools ...registry.Tool) *registry.Registry {
	t.Helper()
	reg := registry.New()
	for _, tl := range tools {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

// --- assertions on the wire ---

// roles returns the roles of the messages received, as "system,user,...".
func roles(msgs []wireMessage) string {
	var rs []string
	for _, m := range msgs {
		rs = append(rs, m.Role)
	}
	return strings.Join(rs, ",")
}

// checkWireHistory asserts the received history is valid to send: every
// assistant call has a non-empty id, type function and JSON arguments,
// and is followed by exactly one tool message with its id.
func checkWireHistory(t *testing.T, msgs []wireMessage) {
	t.Helper()
	var open map[string]bool
	for i, m := range msgs {
		switch m.Role {
		case "assistant":
			if len(open) > 0 {
				t.Errorf("message %d: assistant before answers to %v", i, open)
			}
			open = map[string]bool{}
			for _, c := range m.ToolCalls {
				if c.ID == "" {
					t.Errorf("message %d: tool call with empty id", i)
				}
				if c.Type != "function" {
					t.Errorf("message %d: tool call type %q", i, c.Type)
				}
				if !json.Valid([]byte(c.Function.Arguments)) {
					t.Errorf("message %d: arguments %q not JSON", i, c.Function.Arguments)
				}
				if open[c.ID] {
					t.Errorf("message %d: duplicate id %q", i, c.ID)
				}
				open[c.ID] = true
			}
			if m.Content == nil && len(m.ToolCalls) == 0 {
				t.Errorf("message %d: assistant without content or calls", i)
			}
		case "tool":
			if m.ToolCallID == nil || !open[*m.ToolCallID] {
				t.Errorf("message %d: tool message for no open call", i)
			} else {
				delete(open, *m.ToolCallID)
			}
		default:
			if len(open) > 0 {
				t.Errorf("message %d: %s before answers to %v", i, m.Role, open)
			}
		}
	}
	if len(open) > 0 {
		t.Errorf("history ends with unanswered calls %v", open)
	}
}

func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

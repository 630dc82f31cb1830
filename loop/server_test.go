package loop

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

// This file holds the test doubles: replies of chattest's scripted Chat
// Completions server (which records what it receives), and Go-function
// tools in a real registry.

// received is one request the server got.
type received = chattest.Request

// step is one scripted reply.
type step = chattest.Reply

// call is a tool call of a non-streamed reply; an empty id is left out.
func call(id, name, args string) chattest.Call { return chattest.Call{ID: id, Name: name, Args: args} }

func newServer(t *testing.T, steps ...step) *chattest.Server {
	t.Helper()
	return chattest.New(t, steps...)
}

// newCycle returns a Cycle talking to srv (model "test-model", key
// "sk-test") through the Chat Completions adapter.
func newCycle(t *testing.T, srv *chattest.Server, cfg Config) *Cycle {
	t.Helper()
	return newCycleWith(t, srv, TestProviderConfig{}, cfg)
}

// newCycleWith is newCycle with provider settings.
func newCycleWith(t *testing.T, srv *chattest.Server, pc TestProviderConfig, cfg Config) *Cycle {
	t.Helper()
	pc.BaseURL = srv.URL
	if pc.Model == "" {
		pc.Model = "test-model"
	}
	if pc.APIKey == "" {
		pc.APIKey = "sk-test"
	}
	p, err := NewTestProvider(pc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Provider = p
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// offline is a provider for Cycles that make no request (model "m").
func offline(t *testing.T) Provider {
	t.Helper()
	p, err := NewTestProvider(TestProviderConfig{BaseURL: "http://127.0.0.1:1/v1", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// --- replies ---

// jsonReply answers with a completion (streamed if the request asks for
// a stream); content "" is sent as null.
func jsonReply(content string, finish string, calls ...chattest.Call) step {
	return step{Text: content, Finish: finish, ToolCalls: calls}
}

// sseFile answers with testdata/<name>, a raw event stream, and checks
// that the request asked for a stream.
func sseFile(name string) step {
	data, err := os.ReadFile(filepath.Join("testdata", name))
	return step{Events: string(data), Check: func(t testing.TB, got received) {
		if err != nil {
			t.Errorf("fixture: %v", err)
		}
		if !got.Stream {
			t.Errorf("request for %s is not a stream request", name)
		}
	}}
}

// sseChunks answers with the given chunk JSON objects as data lines, then
// [DONE]. Each chunk is flushed on its own.
func sseChunks(chunks ...string) step { return step{Chunks: chunks} }

var (
	textChunk            = chattest.TextChunk
	callChunk            = chattest.CallChunk
	stopChunk            = chattest.FinishChunk("stop")
	toolCallsFinishChunk = chattest.FinishChunk("tool_calls")
)

// streamText answers with a streamed text reply.
func streamText(parts ...string) step {
	var chunks []string
	for _, p := range parts {
		chunks = append(chunks, textChunk(p))
	}
	return sseChunks(append(chunks, stopChunk)...)
}

// status answers with an HTTP error; headers are name, value pairs.
func status(code int, body string, headers ...string) step {
	h := map[string]string{}
	for i := 0; i+1 < len(headers); i += 2 {
		h[headers[i]] = headers[i+1]
	}
	return step{Status: code, Body: body, Header: h}
}

// expect adds checks on what was received to a reply.
func expect(check func(t testing.TB, got received), then step) step {
	then.Check = check
	return then
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
func roles(msgs []chattest.Message) string {
	var rs []string
	for _, m := range msgs {
		rs = append(rs, m.Role)
	}
	return strings.Join(rs, ",")
}

// checkWireHistory asserts the received history is valid to send: every
// assistant call has a non-empty id, type function and JSON arguments,
// and is followed by exactly one tool message with its id.
func checkWireHistory(t testing.TB, msgs []chattest.Message) {
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
			if !open[m.ToolCallID] {
				t.Errorf("message %d: tool message for no open call", i)
			} else {
				delete(open, m.ToolCallID)
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

// Package chattest is a scripted OpenAI-compatible Chat Completions server
// for tests: it answers each request with the next Reply of its script (as
// an SSE stream when the request asks for one, else as JSON), and records
// every request so tests can assert what the client sent.
//
//	srv := chattest.New(t,
//		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_1", Name: "word_count", Args: `{"text":"a b"}`}}},
//		chattest.Reply{Text: "There are 2 words."},
//	)
//	// base URL: srv.URL (it serves /chat/completions and /v1/chat/completions)
package chattest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Request is what the client sent.
type Request struct {
	Model    string    `json:"model"`
	Messages []Message `json:"messages"`
	Tools    []Tool    `json:"tools"`
	Stream   bool      `json:"stream"`
	Raw      []byte    `json:"-"`
	Auth     string    `json:"-"` // the Authorization header
}

// Message is one message of a request.
type Message struct {
	Role       string     `json:"role"`
	Content    *string    `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls"`
	ToolCallID string     `json:"tool_call_id"`
}

// ToolCall is a tool call in an assistant message of a request.
type ToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Tool is a tool definition of a request.
type Tool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// Call is a tool call in a scripted reply.
type Call struct{ ID, Name, Args string }

// Reply is one scripted answer.
type Reply struct {
	Text      string
	ToolCalls []Call
	// Status, if not 0 or 200, answers with this HTTP status and Body.
	Status int
	Body   string
	// Hold, if set, delays the answer until it is closed (or the client
	// goes away).
	Hold <-chan struct{}
	// Started, if set, is closed when the request arrives.
	Started chan<- struct{}
}

// Server is the scripted server. It is safe for concurrent use.
type Server struct {
	URL string // base URL for the client (no /v1 suffix needed)
	srv *httptest.Server

	mu      sync.Mutex
	script  []Reply
	reqs    []Request
	servedN int
}

// New starts a server with a script; it stops when the test ends.
func New(t testing.TB, script ...Reply) *Server {
	s := &Server{script: script}
	s.srv = httptest.NewServer(http.HandlerFunc(s.handle))
	s.URL = s.srv.URL + "/v1"
	t.Cleanup(s.srv.Close)
	return s
}

// Add appends replies to the script.
func (s *Server) Add(r ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, r...)
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/chat/completions") || r.Method != http.MethodPost {
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	var req Request
	if err := json.Unmarshal(raw, &req); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	req.Raw, req.Auth = raw, r.Header.Get("Authorization")
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	var rep Reply
	ok := s.servedN < len(s.script)
	if ok {
		rep = s.script[s.servedN]
		s.servedN++
	}
	s.mu.Unlock()
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"message":"chattest: script exhausted","type":"invalid_request_error"}}`)
		return
	}
	if rep.Started != nil {
		close(rep.Started)
	}
	if rep.Hold != nil {
		select {
		case <-rep.Hold:
		case <-r.Context().Done():
			return
		}
	}
	if rep.Status != 0 && rep.Status != http.StatusOK {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.Status)
		io.WriteString(w, rep.Body)
		return
	}
	if req.Stream {
		writeSSE(w, rep)
		return
	}
	writeJSON(w, rep)
}

func toolCallsJSON(calls []Call, withIndex bool) []map[string]any {
	var out []map[string]any
	for i, c := range calls {
		m := map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Args}}
		if withIndex {
			m["index"] = i
		}
		out = append(out, m)
	}
	return out
}

func finish(rep Reply) string {
	if len(rep.ToolCalls) > 0 {
		return "tool_calls"
	}
	return "stop"
}

func writeJSON(w http.ResponseWriter, rep Reply) {
	msg := map[string]any{"role": "assistant", "content": rep.Text}
	if len(rep.ToolCalls) > 0 {
		msg["tool_calls"] = toolCallsJSON(rep.ToolCalls, false)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-test", "object": "chat.completion", "created": 1, "model": "test",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish(rep)}},
		"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
	})
}

func writeSSE(w http.ResponseWriter, rep Reply) {
	w.Header().Set("Content-Type", "text/event-stream")
	fl, _ := w.(http.Flusher)
	chunk := func(delta map[string]any, fin any, usage any) {
		c := map[string]any{"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1, "model": "test",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": fin}}}
		if usage != nil {
			c["choices"] = []any{}
			c["usage"] = usage
		}
		b, _ := json.Marshal(c)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if fl != nil {
			fl.Flush()
		}
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil, nil)
	// Text in a few pieces, to exercise streaming.
	for _, part := range splitN(rep.Text, 3) {
		chunk(map[string]any{"content": part}, nil, nil)
	}
	if len(rep.ToolCalls) > 0 {
		chunk(map[string]any{"tool_calls": toolCallsJSON(rep.ToolCalls, true)}, nil, nil)
	}
	chunk(map[string]any{}, finish(rep), nil)
	chunk(nil, nil, map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
	io.WriteString(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
}

func splitN(s string, n int) []string {
	if s == "" {
		return nil
	}
	var out []string
	size := (len(s) + n - 1) / n
	for len(s) > 0 {
		k := min(size, len(s))
		for k < len(s) && (s[k]&0xC0) == 0x80 { // keep UTF-8 sequences whole
			k++
		}
		out = append(out, s[:k])
		s = s[k:]
	}
	return out
}

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
//
// A default reply can misbehave the way real providers do: Cut ends the
// stream without finish_reason or [DONE] (a tool call mid-arguments), Stall
// keeps it open and silent, Reasoning streams "reasoning_content" deltas
// first, Finish "length" says the answer was cut, and Status 429 with a
// Retry-After Header asks the client to wait.
//
// A Reply can also be exact wire bytes, for tests of the client's parsing:
// Chunks (built with [Chunk], [TextChunk], [CallChunk], [FinishChunk]) are
// streamed one flushed data line each, Events is a whole event stream
// written as is, and Status answers with an HTTP error. Check runs on the
// request before the reply is written.
//
// A request past the end of the script gets a 400 "script exhausted",
// which a test may rely on; it does not fail the test.
package chattest

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/agcore/agrun/internal/testing/scripted"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Request is what the client sent.
type Request struct {
	Model         string    `json:"model"`
	Messages      []Message `json:"messages"`
	Tools         []Tool    `json:"tools"`
	Stream        bool      `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	ParallelToolCalls *bool    `json:"parallel_tool_calls"`
	Temperature       *float64 `json:"temperature"`
	// ResponseFormat is "response_format" as sent (nil if absent).
	ResponseFormat json.RawMessage `json:"response_format"`

	// Received is when the request arrived; Answered when its reply was
	// written (zero until then, and for a refused request): the gap from
	// one's Answered to the next's Received is the client's time between
	// two model requests (benchmarks read it).
	Received time.Time `json:"-"`
	Answered time.Time `json:"-"`

	Raw    []byte      `json:"-"` // the body as sent
	Auth   string      `json:"-"` // the Authorization header
	Header http.Header `json:"-"` // all headers
}

// Message is one message of a request.
type Message struct {
	Role       string     `json:"role"`
	Content    *string    `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls"`
	ToolCallID string     `json:"tool_call_id"`
	// ReasoningContent is an assistant message's "reasoning_content",
	// as DeepSeek wants it back.
	ReasoningContent *string `json:"reasoning_content"`
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

// Call is a tool call in a scripted reply. An empty ID is left out of the
// reply, as some providers do.
type Call struct{ ID, Name, Args string }

// Reply is one scripted answer. By default it is Text and ToolCalls, as a
// stream when the request asks for one, else as a JSON completion whose
// content is null when Text is empty.
type Reply struct {
	Text      string
	ToolCalls []Call
	// Finish, if set, is the finish_reason; by default "tool_calls" when
	// there are ToolCalls, else "stop".
	Finish string
	// Reasoning, if set, is streamed first as "reasoning_content" deltas.
	Reasoning string
	// Usage, if set, replaces the default usage (10 prompt, 5 completion,
	// 15 total tokens).
	Usage *Usage
	// Cut ends a streamed reply early, as a connection that breaks off
	// does: the text and the first half of the tool calls' arguments,
	// then the body ends without finish_reason, usage or [DONE].
	Cut bool

	// Chunks, if set, is the reply instead of Text and ToolCalls: each is
	// the JSON of one chunk, written as a data line and flushed on its own,
	// then "data: [DONE]", whether or not the request asked for a stream.
	Chunks []string
	// Stall, with Chunks, leaves out "data: [DONE]" and keeps the stream
	// open after the last chunk until the client goes away. Without
	// Chunks, a streamed reply sends its text (not its finish_reason) and
	// then stalls the same way.
	Stall bool
	// ChunkEvery, with Chunks, waits this long before each chunk after
	// the first (a model writing at its pace; the client going away ends
	// the wait and the reply).
	ChunkEvery time.Duration
	// Events, if set, is the reply instead: a whole text/event-stream body
	// written as is (a recorded provider stream, say).
	Events string

	// Status, if set, answers with this HTTP status and Body, as JSON
	// (200 with an error object, say, as some proxies send).
	Status int
	Body   string
	// Header is set on the response of any reply (Retry-After, say).
	Header map[string]string

	// Check, if set, is called with the request before the reply is
	// written, to assert what the client sent.
	Check func(t testing.TB, got Request)
	// Started, if set, is closed when the request arrives.
	Started chan<- struct{}
	// Hold, if set, delays the answer until it is closed (or the client
	// goes away).
	Hold <-chan struct{}
	// Delay, if set, delays the answer by this long (or until the client
	// goes away).
	Delay time.Duration
	// Gone, if set, is closed when the client goes away during a Hold, a
	// Delay or a Stall.
	Gone chan<- struct{}
}

// Usage is the token usage of a scripted reply.
type Usage struct {
	PromptTokens, CompletionTokens, TotalTokens int
	CachedTokens, ReasoningTokens               int // sent in the details objects when non-zero
}

func (u *Usage) wire() map[string]any {
	if u == nil {
		return map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
	}
	m := map[string]any{"prompt_tokens": u.PromptTokens, "completion_tokens": u.CompletionTokens, "total_tokens": u.TotalTokens}
	if u.CachedTokens != 0 {
		m["prompt_tokens_details"] = map[string]any{"cached_tokens": u.CachedTokens}
	}
	if u.ReasoningTokens != 0 {
		m["completion_tokens_details"] = map[string]any{"reasoning_tokens": u.ReasoningTokens}
	}
	return m
}

// Server is the scripted server. It is safe for concurrent use.
type Server struct {
	URL string // base URL for the client (no /v1 suffix needed)
	srv *httptest.Server
	t   testing.TB

	mu      sync.Mutex
	script  []Reply
	reqs    []Request
	servedN int
	respond func(Request) Reply
	// thinking: DeepSeek's thinking mode (RequireReasoning): the
	// reasoning sent with each tool call id.
	thinking  bool
	reasoning map[string]string
}

// DeepSeekReasoningError is the body DeepSeek answers (HTTP 400) to a
// request in thinking mode whose assistant tool-call turn lacks the
// reasoning_content it came with.
const DeepSeekReasoningError = `{"error":{"message":"The ` + "`reasoning_content`" + ` in the thinking mode must be passed back to the API.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}`

// RequireReasoning makes the server check requests as DeepSeek's
// thinking mode does: an assistant message whose tool calls came in a
// reply with reasoning must carry that reasoning_content, unchanged,
// in every later request, else 400 DeepSeekReasoningError (the request
// is recorded; it takes no reply from the script).
func (s *Server) RequireReasoning() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.thinking = true
}

// missingReasoning reports whether req drops reasoning a tool-call turn
// came with (RequireReasoning).
func (s *Server) missingReasoning(req *Request) bool {
	if !s.thinking {
		return false
	}
	for _, m := range req.Messages {
		if m.Role != "assistant" {
			continue
		}
		for _, c := range m.ToolCalls {
			want, ok := s.reasoning[c.ID]
			if ok && (m.ReasoningContent == nil || *m.ReasoningContent != want) {
				return true
			}
		}
	}
	return false
}

// New starts a server with a script; it stops when the test ends.
func New(t testing.TB, script ...Reply) *Server {
	s := &Server{script: script, t: t}
	s.srv = httptest.NewServer(http.HandlerFunc(s.handle))
	s.URL = s.srv.URL + "/v1"
	t.Cleanup(s.srv.Close)
	return s
}

// Close stops the server now, so that later requests fail to connect. The
// test's end closes it too.
func (s *Server) Close() { s.srv.Close() }

// Respond answers every request with f's reply instead of the script's
// next: a reply that depends on the request (sessions run at once, each
// answered by where it is). f runs under the server's lock.
func (s *Server) Respond(f func(Request) Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.respond = f
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
	req.Raw, req.Auth, req.Header = raw, r.Header.Get("Authorization"), r.Header.Clone()
	req.Received = time.Now()
	s.mu.Lock()
	n := len(s.reqs)
	s.reqs = append(s.reqs, req)
	refuse := s.missingReasoning(&req)
	var rep Reply
	ok := !refuse && (s.respond != nil || s.servedN < len(s.script))
	switch {
	case ok && s.respond != nil:
		rep = s.respond(req)
	case ok:
		rep = s.script[s.servedN]
		s.servedN++
	}
	if ok && s.thinking && rep.Reasoning != "" {
		if s.reasoning == nil {
			s.reasoning = map[string]string{}
		}
		for _, c := range rep.ToolCalls {
			s.reasoning[c.ID] = rep.Reasoning
		}
	}
	s.mu.Unlock()
	if refuse {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, DeepSeekReasoningError)
		return
	}
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"message":"chattest: script exhausted","type":"invalid_request_error"}}`)
		return
	}
	pace := scripted.Pace{Started: rep.Started, Hold: rep.Hold, Delay: rep.Delay, Gone: rep.Gone}
	pace.Start()
	if rep.Check != nil {
		rep.Check(s.t, req)
	}
	if !pace.Wait(r.Context()) {
		return
	}
	gone := pace.Left
	for k, v := range rep.Header {
		w.Header().Set(k, v)
	}
	switch {
	case rep.Status != 0:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.Status)
		io.WriteString(w, rep.Body)
	case rep.Events != "":
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, rep.Events)
	case rep.Chunks != nil:
		writeChunks(r.Context(), w, rep.Chunks, !rep.Stall, rep.ChunkEvery)
		if rep.Stall {
			<-r.Context().Done()
			gone()
		}
	case req.Stream:
		writeSSE(w, rep)
		if rep.Stall {
			<-r.Context().Done()
			gone()
		}
	default:
		writeJSON(w, rep)
	}
	s.mu.Lock()
	s.reqs[n].Answered = time.Now()
	s.mu.Unlock()
}

// Chunk is the JSON of one streamed chunk with this delta (a JSON object)
// and finish_reason (none if empty).
func Chunk(delta, finish string) string {
	f := "null"
	if finish != "" {
		f = strconv.Quote(finish)
	}
	return `{"id":"chatcmpl-test","object":"chat.completion.chunk","created":1,"model":"test","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + f + `}]}`
}

// TextChunk is a chunk with a text delta.
func TextChunk(text string) string {
	b, _ := json.Marshal(text)
	return Chunk(`{"content":`+string(b)+`}`, "")
}

// CallChunk is a chunk with one whole tool call at index i.
func CallChunk(i int, id, name, args string) string {
	b, _ := json.Marshal([]map[string]any{{"index": i, "id": id, "type": "function", "function": map[string]any{"name": name, "arguments": args}}})
	return Chunk(`{"tool_calls":`+string(b)+`}`, "")
}

// ReasoningChunk is a chunk with a reasoning delta under the field name
// ("reasoning_content" or "reasoning").
func ReasoningChunk(field, text string) string {
	b, _ := json.Marshal(map[string]any{"content": nil, field: text})
	return Chunk(string(b), "")
}

// FinishChunk is a chunk with an empty delta and this finish_reason.
func FinishChunk(finish string) string { return Chunk(`{}`, finish) }

func writeChunks(ctx context.Context, w http.ResponseWriter, chunks []string, done bool, every time.Duration) {
	w.Header().Set("Content-Type", "text/event-stream")
	fl, _ := w.(http.Flusher)
	for i, c := range chunks {
		if i > 0 && every > 0 {
			select {
			case <-time.After(every):
			case <-ctx.Done():
				return
			}
		}
		fmt.Fprintf(w, "data: %s\n\n", c)
		if fl != nil {
			fl.Flush()
		}
	}
	if done {
		io.WriteString(w, "data: [DONE]\n\n")
	}
}

func toolCallsJSON(calls []Call, withIndex bool) []map[string]any {
	var out []map[string]any
	for i, c := range calls {
		m := map[string]any{"type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Args}}
		if c.ID != "" {
			m["id"] = c.ID
		}
		if withIndex {
			m["index"] = i
		}
		out = append(out, m)
	}
	return out
}

func finish(rep Reply) string {
	if rep.Finish != "" {
		return rep.Finish
	}
	if len(rep.ToolCalls) > 0 {
		return "tool_calls"
	}
	return "stop"
}

func writeJSON(w http.ResponseWriter, rep Reply) {
	msg := map[string]any{"role": "assistant", "content": rep.Text}
	if rep.Text == "" {
		msg["content"] = nil
	}
	if len(rep.ToolCalls) > 0 {
		msg["tool_calls"] = toolCallsJSON(rep.ToolCalls, false)
	}
	if rep.Reasoning != "" {
		msg["reasoning_content"] = rep.Reasoning
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-test", "object": "chat.completion", "created": 1, "model": "test",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish(rep)}},
		"usage":   rep.Usage.wire(),
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
	for _, part := range splitN(rep.Reasoning, 2) {
		chunk(map[string]any{"content": nil, "reasoning_content": part}, nil, nil)
	}
	// Text in a few pieces, to exercise streaming.
	for _, part := range splitN(rep.Text, 3) {
		chunk(map[string]any{"content": part}, nil, nil)
	}
	calls := rep.ToolCalls
	if rep.Cut {
		calls = append([]Call(nil), calls...)
		for i := range calls {
			calls[i].Args = calls[i].Args[:len(calls[i].Args)/2]
		}
	}
	if len(calls) > 0 {
		chunk(map[string]any{"tool_calls": toolCallsJSON(calls, true)}, nil, nil)
	}
	if rep.Cut || rep.Stall {
		return
	}
	chunk(map[string]any{}, finish(rep), nil)
	chunk(nil, nil, rep.Usage.wire())
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

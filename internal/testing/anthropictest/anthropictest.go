// Package anthropictest is a scripted Anthropic Messages API server for
// tests: it serves POST /v1/messages, answers each request with the next
// Reply of its script (as server-sent events when the request has
// "stream": true, else as a Message object), and records every request so
// tests can assert what the client sent.
//
//	srv := anthropictest.New(t,
//		anthropictest.Reply{Thinking: "Count the words.", ToolCalls: []anthropictest.Call{{Name: "word_count", Args: `{"text":"a b"}`}}},
//		anthropictest.Reply{Text: "There are 2 words."},
//	)
//	client := anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("k"), option.WithMaxRetries(0))
//	// client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{...})
//
// A stream is what the API documents: message_start, then per content block
// content_block_start, its deltas (text_delta, input_json_delta in a few
// fragments, thinking_delta then signature_delta) and content_block_stop,
// with ping events between, then message_delta (stop_reason and usage) and
// message_stop, each event flushed on its own.
//
// Every request is recorded before it is checked. The server refuses what
// the real API refuses, with the real error body
// ({"type":"error","error":{"type":...,"message":...},"request_id":...}),
// before it takes a reply from the script (a refused request uses none):
//
//   - no API key: 401 authentication_error ("x-api-key header is
//     required"). Any key is taken, in the x-api-key header, or as
//     Authorization: Bearer with anthropic-version 2026-10-21 only (the
//     version whose SDK, v2 of anthropic-sdk-go, sends the key so; with
//     2023-06-01 a Bearer token is not a key). No anthropic-version header,
//     or one that is not a version of the API (2023-01-01, 2023-06-01,
//     2026-10-21): 400;
//   - a body that is not a JSON object; a top-level parameter the API does
//     not know ("foo: Extra inputs are not permitted"); no model; no
//     max_tokens, or one that is not a positive integer; no messages, or
//     none; a message whose role is not user or assistant (a "system"
//     message is taken only by models that take it, claude-opus-4-8, right
//     after a user message); a first message that is not the user's; a
//     message with empty content (but a final assistant one), an empty or
//     blank text block, a final assistant message ending in whitespace;
//     a content block without its required fields;
//   - tool use: a tool_use of an assistant message without a tool_result
//     (the same tool_use_id) at the beginning of the next user message
//     ("messages.N: `tool_use` ids were found without `tool_result` blocks
//     immediately after: ..." or "Did not find N `tool_result` block(s) at
//     the beginning of this message. ..."), a tool_result whose
//     tool_use_id is not a tool_use of the assistant message just before
//     ("unexpected `tool_use_id` found in `tool_result` blocks: ...");
//     consecutive messages of one role count as one turn, as the API
//     combines them;
//   - extended thinking: thinking {"type":"enabled"} with budget_tokens
//     under 1024, or not under max_tokens (unless the request has the
//     interleaved-thinking-2025-05-14 beta); tool_choice any or tool with
//     thinking on; with thinking on (enabled or adaptive) and the request in
//     the middle of a tool-use loop (its last user message only
//     tool_results), the assistant turn the loop belongs to must start with
//     a thinking or redacted_thinking block ("messages.N.content.0.type:
//     Expected `thinking` or `redacted_thinking`, but found `text`. When
//     `thinking` is enabled, a final `assistant` message must start with a
//     thinking block ..."); a thinking block anywhere whose signature, or a
//     redacted_thinking block whose data, is not byte for byte one this
//     server issued ("Invalid `signature` in `thinking` block"); a thinking
//     block of the latest assistant message whose text is not what was
//     issued with its signature; an assistant message with thinking blocks
//     that does not start with one;
//   - tools: a custom tool whose name does not match ^[a-zA-Z0-9_-]{1,64}$,
//     or without input_schema, or whose input_schema type is not "object";
//     two tools of one name; more than 4 blocks (tools, system, content,
//     the top-level cache_control) with cache_control.
//
// Prompt caching is emulated: each cache_control breakpoint (on a tool, a
// system block, a content block, or the top-level one, which marks the last
// content block) stands for the prefix up to it, in the API's order (tools,
// system, messages; the model and, for message breakpoints, the thinking
// parameter are part of it). The first request with a prefix reports it as
// cache_creation_input_tokens, a later one with the same prefix as
// cache_read_input_tokens, each an estimate of the prefix's tokens (its
// bytes over 4). The API's minimum cacheable length and its 20-block
// lookback are not emulated. Without breakpoints the usage is 10 input and
// 5 output tokens; Reply.Usage overrides either.
//
// A default reply can misbehave the way the real API does: Cut breaks the
// stream off in the middle of a tool call's input, Stall keeps it open and
// silent, StreamError sends an error event after message_start, and
// [Overloaded], [RateLimited], [InvalidRequest] and [PromptTooLong] answer
// with the API's error statuses and bodies. A Reply can also be exact wire
// bytes: Events is a whole event stream written as is, Status and Body an
// HTTP answer. Check runs on the request before the reply is written.
//
// A request past the end of the script gets a 400 invalid_request_error
// "anthropictest: script exhausted", which a test may rely on; it does not
// fail the test.
package anthropictest

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"github.com/agcore/agrun/internal/testing/scripted"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

// Request is what the client sent. Fields the body lacks, or has with the
// wrong type, are zero; Raw has the body as sent.
type Request struct {
	Model     string `json:"model"`
	MaxTokens int    `json:"max_tokens"`
	// System is "system" as sent: a string or an array of text blocks (nil
	// if absent).
	System   json.RawMessage `json:"system"`
	Messages []Message       `json:"messages"`
	Tools    []Tool          `json:"tools"`
	// Thinking is "thinking" as sent (nil if absent).
	Thinking json.RawMessage `json:"thinking"`
	Stream   bool            `json:"stream"`
	// ToolChoice is "tool_choice" as sent (nil if absent).
	ToolChoice json.RawMessage `json:"tool_choice"`
	// OutputConfig is "output_config" as sent (nil if absent).
	OutputConfig json.RawMessage `json:"output_config"`

	Raw    []byte      `json:"-"` // the body as sent
	Header http.Header `json:"-"` // all headers
}

// Message is one message of a request. A string content is decoded as one
// text block.
type Message struct {
	Role    string  `json:"role"`
	Content []Block `json:"content"`
}

// UnmarshalJSON decodes a message whose content is a string or an array of
// blocks.
func (m *Message) UnmarshalJSON(b []byte) error {
	var w struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	err := json.Unmarshal(b, &w)
	m.Role, m.Content = w.Role, nil
	switch kind(w.Content) {
	case 's':
		var s string
		json.Unmarshal(w.Content, &s)
		m.Content = []Block{{Type: "text", Text: s}}
	case 'a':
		var raws []json.RawMessage
		json.Unmarshal(w.Content, &raws)
		for _, r := range raws {
			var blk Block
			json.Unmarshal(r, &blk) // keeps what fits, as for the request
			m.Content = append(m.Content, blk)
		}
	}
	return err
}

// Block is one content block of a message, with the fields of every type
// the server reads (the others stay empty).
type Block struct {
	Type string `json:"type"`
	Text string `json:"text"` // text
	// ID, Name and Input are a tool_use's.
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// ToolUseID, Content (as sent: a string or an array of blocks) and
	// IsError are a tool_result's.
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	// Thinking and Signature are a thinking block's, Data a
	// redacted_thinking block's.
	Thinking  string `json:"thinking"`
	Signature string `json:"signature"`
	Data      string `json:"data"`
	// CacheControl is "cache_control" as sent (nil if absent).
	CacheControl json.RawMessage `json:"cache_control"`
}

// Tool is a tool definition of a request.
type Tool struct {
	Type         string          `json:"type"` // "" or "custom" for a client tool
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	CacheControl json.RawMessage `json:"cache_control"`
}

// Call is a tool call (a tool_use block) in a scripted reply. With an empty
// ID the server makes one ("toolu_..."). Args is the JSON input; empty is
// {}.
type Call struct{ ID, Name, Args string }

// Usage is the token usage of a scripted reply.
type Usage struct {
	InputTokens, OutputTokens                      int
	CacheReadInputTokens, CacheCreationInputTokens int
	// ThinkingTokens, if set, is output_tokens_details.thinking_tokens
	// (the part of OutputTokens spent thinking).
	ThinkingTokens int
}

// Reply is one scripted answer. By default it is a Message with the blocks
// Thinking, RedactedThinking, Text and ToolCalls, in that order, streamed
// when the request asks for a stream.
type Reply struct {
	Text      string
	ToolCalls []Call // tool_use blocks after the text
	// Thinking, if set, is a "thinking" block first, streamed as
	// thinking_delta events, then a signature_delta with a signature the
	// server makes up and remembers (the request that passes it back is
	// checked against it).
	Thinking string
	// RedactedThinking adds a "redacted_thinking" block, with data the
	// server makes up and remembers, after Thinking and before the text.
	RedactedThinking bool
	// StopReason, if set, is the stop_reason; by default "tool_use" when
	// there are ToolCalls, else "end_turn".
	StopReason string
	// Usage, if set, replaces the usage: by default 10 input and 5 output
	// tokens, with the cache tokens of the emulated prompt cache.
	Usage *Usage
	// Cut ends a streamed reply early, as a connection that breaks off
	// does: the blocks up to the first tool call and the first half of its
	// input (without tool calls, half of the text; without either, nothing
	// after the thinking blocks), then the body ends without
	// content_block_stop, message_delta or message_stop. A JSON reply is
	// cut to half its bytes.
	Cut bool
	// Stall sends message_start, the thinking blocks and the text (not its
	// content_block_stop), then keeps the stream open and silent until the
	// client goes away. A JSON reply sends nothing until then.
	Stall bool
	// StreamError, if set, is the type of an error sent after
	// message_start as an "event: error"
	// ({"type":"error","error":{"type":StreamError,"message":...}}), which
	// ends the stream. A JSON reply is that error with its HTTP status
	// (529 for overloaded_error).
	StreamError string
	// Events, if set, is the reply instead: a whole text/event-stream body
	// written as is (a recorded stream, say).
	Events string

	// Status, if set, answers with this HTTP status and Body, as JSON.
	Status int
	Body   string
	// Header is set on the response of any reply (retry-after, say).
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

// Overloaded is the API's 529 overloaded_error.
func Overloaded() Reply { return APIError(529, "overloaded_error", "Overloaded") }

// RateLimited is the API's 429 rate_limit_error, with a retry-after header
// of retryAfter seconds unless that is empty.
func RateLimited(retryAfter string) Reply {
	r := APIError(http.StatusTooManyRequests, "rate_limit_error",
		"This request would exceed the rate limit for your organization of 50 requests per minute. "+
			"For details, refer to: https://docs.claude.com/en/api/rate-limits. "+
			"You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later. "+
			"You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase.")
	if retryAfter != "" {
		r.Header = map[string]string{"retry-after": retryAfter}
	}
	return r
}

// InvalidRequest is the API's 400 invalid_request_error with this message.
func InvalidRequest(msg string) Reply {
	return APIError(http.StatusBadRequest, "invalid_request_error", msg)
}

// PromptTooLong is the API's 400 for a prompt over the context window:
// "prompt is too long: N tokens > M maximum".
func PromptTooLong(tokens, max int) Reply {
	return InvalidRequest(fmt.Sprintf("prompt is too long: %d tokens > %d maximum", tokens, max))
}

// APIError answers with an error of the API's shape: this HTTP status and
// {"type":"error","error":{"type":typ,"message":msg},"request_id":...}.
func APIError(status int, typ, msg string) Reply {
	return Reply{Status: status, Body: string(errorBody(typ, msg, newID("req_")))}
}

// Server is the scripted server. It is safe for concurrent use.
type Server struct {
	URL string // base URL for the client; it serves URL + "/v1/messages"
	srv *httptest.Server
	t   testing.TB

	mu       sync.Mutex
	script   []Reply
	reqs     []Request
	servedN  int
	thinking map[string]string // signature -> thinking text issued with it
	redacted map[string]bool   // redacted_thinking data issued
	cache    map[[32]byte]bool // prefixes written to the emulated cache
}

// New starts a server with a script; it stops when the test ends.
func New(t testing.TB, script ...Reply) *Server {
	s := &Server{script: script, t: t, thinking: map[string]string{}, redacted: map[string]bool{}, cache: map[[32]byte]bool{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.handle))
	s.URL = s.srv.URL
	t.Cleanup(s.srv.Close)
	return s
}

// Close stops the server now, so that later requests fail to connect. The
// test's end closes it too.
func (s *Server) Close() { s.srv.Close() }

// Add appends replies to the script.
func (s *Server) Add(r ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, r...)
}

// Requests returns every request received so far, refused ones too, in
// order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// apiErr is a refusal: an HTTP status and the error's type and message.
type apiErr struct {
	status   int
	typ, msg string
}

func invalid(format string, a ...any) *apiErr {
	return &apiErr{http.StatusBadRequest, "invalid_request_error", fmt.Sprintf(format, a...)}
}

func errorBody(typ, msg, reqID string) []byte {
	return marshal(struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
		RequestID string `json:"request_id,omitempty"`
	}{Type: "error", Error: struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}{typ, msg}, RequestID: reqID})
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	req, top, jsonErr := decode(raw)
	req.Raw, req.Header = raw, r.Header.Clone()
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()

	reqID := newID("req_")
	w.Header().Set("request-id", reqID)
	refuse := func(e *apiErr) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(e.status)
		w.Write(errorBody(e.typ, e.msg, reqID))
	}
	switch {
	case r.URL.Path != "/v1/messages":
		refuse(&apiErr{http.StatusNotFound, "not_found_error", "Not Found"})
		return
	case r.Method != http.MethodPost:
		refuse(&apiErr{http.StatusMethodNotAllowed, "invalid_request_error", "Method Not Allowed"})
		return
	}
	if e := checkHeaders(r.Header); e != nil {
		refuse(e)
		return
	}
	if jsonErr != nil {
		refuse(invalid("There was an error parsing the body of your request: %v", jsonErr))
		return
	}
	if e := s.validate(req, top, r.Header); e != nil {
		refuse(e)
		return
	}

	s.mu.Lock()
	var rep Reply
	ok := s.servedN < len(s.script)
	if ok {
		rep = s.script[s.servedN]
		s.servedN++
	}
	s.mu.Unlock()
	if !ok {
		refuse(invalid("anthropictest: script exhausted"))
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
	case rep.StreamError != "" && !req.Stream:
		refuse(&apiErr{errorStatus(rep.StreamError), rep.StreamError, errorMessage(rep.StreamError)})
	default:
		msg := s.message(rep, req, top)
		if req.Stream {
			writeStream(w, rep, msg)
		} else {
			writeJSON(w, rep, msg)
		}
		if rep.Stall {
			<-r.Context().Done()
			gone()
		}
	}
}

var versions = map[string]bool{"2023-01-01": true, "2023-06-01": true, "2026-10-21": true}

// bearerVersion is the API version from which an API key may come as
// Authorization: Bearer (the SDK of that version sends it so).
const bearerVersion = "2026-10-21"

func checkHeaders(h http.Header) *apiErr {
	v := h.Get("anthropic-version")
	if vs := h.Values("anthropic-version"); len(vs) > 1 {
		v = strings.Join(vs, ", ")
	}
	bearer, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	if h.Get("x-api-key") == "" && (v != bearerVersion || !ok || strings.TrimSpace(bearer) == "") {
		return &apiErr{http.StatusUnauthorized, "authentication_error", "x-api-key header is required"}
	}
	if v == "" {
		return invalid("anthropic-version: header is required")
	}
	if !versions[v] {
		return invalid("anthropic-version: %q is not a valid version", v)
	}
	return nil
}

// decode reads the body leniently: every field that decodes is set, so that
// a refused request is recorded with what it has.
func decode(raw []byte) (Request, map[string]json.RawMessage, error) {
	var req Request
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return req, nil, err
	}
	if top == nil {
		return req, nil, fmt.Errorf("the body is null")
	}
	field := func(name string, v any) {
		if b, ok := top[name]; ok {
			json.Unmarshal(b, v)
		}
	}
	raws := func(name string) json.RawMessage {
		if b, ok := top[name]; ok && kind(b) != 'n' {
			return b
		}
		return nil
	}
	field("model", &req.Model)
	var mt float64
	field("max_tokens", &mt)
	if mt == math.Trunc(mt) && math.Abs(mt) < 1<<53 {
		req.MaxTokens = int(mt)
	}
	req.System = raws("system")
	field("messages", &req.Messages)
	if b, ok := top["tools"]; ok {
		var ts []json.RawMessage
		json.Unmarshal(b, &ts)
		for _, t := range ts {
			var tool Tool
			json.Unmarshal(t, &tool)
			req.Tools = append(req.Tools, tool)
		}
	}
	req.Thinking = raws("thinking")
	field("stream", &req.Stream)
	req.ToolChoice = raws("tool_choice")
	req.OutputConfig = raws("output_config")
	return req, top, nil
}

// kind is the JSON type of b: 's'tring, 'a'rray, 'o'bject, 'b'oolean,
// 'n'ull (or absent), or '0' for a number.
func kind(b json.RawMessage) byte {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return 'n'
	}
	switch b[0] {
	case '"':
		return 's'
	case '[':
		return 'a'
	case '{':
		return 'o'
	case 't', 'f':
		return 'b'
	case 'n':
		return 'n'
	}
	return '0'
}

// The top-level parameters of POST /v1/messages.
var params = map[string]bool{
	"model": true, "messages": true, "max_tokens": true, "system": true, "metadata": true,
	"stop_sequences": true, "stream": true, "temperature": true, "top_k": true, "top_p": true,
	"tools": true, "tool_choice": true, "thinking": true, "service_tier": true, "container": true,
	"context_management": true, "mcp_servers": true, "output_config": true, "output_format": true,
	"inference_geo": true, "speed": true, "cache_control": true, "diagnostics": true,
}

var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

const thinkingDocs = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"

// blockRef is a content block and where the request has it.
type blockRef struct {
	msg, idx int
	b        *Block
}

// turn is a run of consecutive messages of one role, which the API combines
// into one turn.
type turn struct {
	role   string
	first  int // index of its first message
	blocks []blockRef
}

func (t turn) onlyToolResults() bool {
	for _, r := range t.blocks {
		if r.b.Type != "tool_result" {
			return false
		}
	}
	return len(t.blocks) > 0
}

func (s *Server) validate(req Request, top map[string]json.RawMessage, h http.Header) *apiErr {
	keys := make([]string, 0, len(top))
	for k := range top {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !params[k] {
			return invalid("%s: Extra inputs are not permitted", k)
		}
	}

	switch b := top["model"]; kind(b) {
	case 'n':
		return invalid("model: Field required")
	case 's':
		if req.Model == "" {
			return invalid("model: String should have at least 1 character")
		}
	default:
		return invalid("model: Input should be a valid string")
	}

	switch b := top["max_tokens"]; kind(b) {
	case 'n':
		return invalid("max_tokens: Field required")
	case '0':
		var f float64
		json.Unmarshal(b, &f)
		if f != math.Trunc(f) {
			return invalid("max_tokens: Input should be a valid integer, got a number with a fractional part")
		}
		if f < 1 {
			return invalid("max_tokens: Input should be greater than or equal to 1")
		}
	default:
		return invalid("max_tokens: Input should be a valid integer")
	}

	if b, ok := top["stream"]; ok && kind(b) != 'b' && kind(b) != 'n' {
		return invalid("stream: Input should be a valid boolean")
	}
	if k := kind(top["system"]); k != 'n' && k != 's' && k != 'a' {
		return invalid("system: Input should be a valid list")
	}

	// Messages: their shape, then the rules between them.
	var rawMsgs []json.RawMessage
	switch b := top["messages"]; kind(b) {
	case 'n':
		return invalid("messages: Field required")
	case 'a':
		json.Unmarshal(b, &rawMsgs)
	default:
		return invalid("messages: Input should be a valid list")
	}
	if len(rawMsgs) == 0 {
		return invalid("messages: at least one message is required")
	}
	for i, rm := range rawMsgs {
		if e := checkMessageShape(i, rm, req.Model); e != nil {
			return e
		}
	}
	msgs := req.Messages
	if msgs[0].Role != "user" {
		return invalid(`messages: first message must use the "user" role`)
	}
	for i, m := range msgs {
		if m.Role == "system" && msgs[i-1].Role != "user" {
			return invalid("messages.%d: a `system` message must immediately follow a `user` message", i)
		}
	}

	if e := checkTools(top["tools"]); e != nil {
		return e
	}

	// cache_control breakpoints.
	n := 0
	for _, t := range req.Tools {
		if kind(t.CacheControl) != 'n' {
			n++
		}
	}
	for _, b := range systemBlocks(req.System) {
		if kind(b["cache_control"]) != 'n' {
			n++
		}
	}
	for _, m := range msgs {
		for _, b := range m.Content {
			if kind(b.CacheControl) != 'n' {
				n++
			}
			if b.Type == "tool_result" && kind(b.Content) == 'a' {
				var inner []struct {
					CacheControl json.RawMessage `json:"cache_control"`
				}
				json.Unmarshal(b.Content, &inner)
				for _, ib := range inner {
					if kind(ib.CacheControl) != 'n' {
						n++
					}
				}
			}
		}
	}
	if kind(top["cache_control"]) != 'n' {
		n++
	}
	if n > 4 {
		return invalid("A maximum of 4 blocks with cache_control may be provided. Found %d.", n)
	}

	// Content: not empty, no empty text.
	last := len(msgs) - 1
	for i, m := range msgs {
		if len(m.Content) == 0 && !(i == last && m.Role == "assistant") {
			return invalid("messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
		}
		for _, b := range m.Content {
			if b.Type != "text" {
				continue
			}
			if b.Text == "" {
				return invalid("messages: text content blocks must be non-empty")
			}
			if strings.TrimSpace(b.Text) == "" {
				return invalid("messages: text content blocks must contain non-whitespace text")
			}
		}
	}
	if m := msgs[last]; m.Role == "assistant" && len(m.Content) > 0 {
		if b := m.Content[len(m.Content)-1]; b.Type == "text" {
			if r, _ := utf8.DecodeLastRuneInString(b.Text); unicode.IsSpace(r) {
				return invalid("messages: final assistant content cannot end with trailing whitespace")
			}
		}
	}

	// Turns: consecutive messages of one role are one turn; system
	// messages stand outside them.
	var turns []turn
	for i := range msgs {
		m := &msgs[i]
		if m.Role == "system" {
			continue
		}
		if len(turns) == 0 || turns[len(turns)-1].role != m.Role {
			turns = append(turns, turn{role: m.Role, first: i})
		}
		t := &turns[len(turns)-1]
		for j := range m.Content {
			t.blocks = append(t.blocks, blockRef{i, j, &m.Content[j]})
		}
	}
	if e := checkToolPairs(turns); e != nil {
		return e
	}

	// Thinking blocks passed back.
	lastAssistant := -1
	for i, m := range msgs {
		if m.Role == "assistant" {
			lastAssistant = i
		}
	}
	s.mu.Lock()
	e := s.checkThinkingBlocks(msgs, lastAssistant)
	s.mu.Unlock()
	if e != nil {
		return e
	}

	// The thinking parameter.
	thinkingOn := false
	if k := kind(req.Thinking); k != 'n' {
		var th struct {
			Type         string          `json:"type"`
			BudgetTokens json.RawMessage `json:"budget_tokens"`
		}
		if k != 'o' || json.Unmarshal(req.Thinking, &th) != nil {
			return invalid("thinking: Input should be a valid dictionary or object to extract fields from")
		}
		switch th.Type {
		case "enabled":
			thinkingOn = true
			if kind(th.BudgetTokens) == 'n' {
				return invalid("thinking.enabled.budget_tokens: Field required")
			}
			var budget float64
			if kind(th.BudgetTokens) != '0' || json.Unmarshal(th.BudgetTokens, &budget) != nil || budget != math.Trunc(budget) {
				return invalid("thinking.enabled.budget_tokens: Input should be a valid integer")
			}
			if budget < 1024 {
				return invalid("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
			}
			if budget >= float64(req.MaxTokens) && !hasBeta(h, "interleaved-thinking-2025-05-14") {
				return invalid("`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at %s#max-tokens-and-context-window-size", thinkingDocs)
			}
		case "adaptive":
			thinkingOn = true
		case "disabled", "between_tools":
		case "":
			return invalid("thinking: Unable to extract tag using discriminator 'type'")
		default:
			return invalid("thinking: Input tag '%s' found using 'type' does not match any of the expected tags: 'adaptive', 'disabled', 'enabled'", th.Type)
		}
	}
	if thinkingOn && kind(req.ToolChoice) == 'o' {
		var tc struct{ Type string }
		json.Unmarshal(req.ToolChoice, &tc)
		if tc.Type == "any" || tc.Type == "tool" {
			return invalid("Thinking may not be enabled when tool_choice forces tool use.")
		}
	}
	if thinkingOn {
		if e := checkTurnStartsWithThinking(turns); e != nil {
			return e
		}
	}
	return nil
}

func hasBeta(h http.Header, beta string) bool {
	for _, v := range h.Values("anthropic-beta") {
		for _, b := range strings.Split(v, ",") {
			if strings.TrimSpace(b) == beta {
				return true
			}
		}
	}
	return false
}

// checkMessageShape checks one message's fields and its blocks' required
// fields.
func checkMessageShape(i int, rm json.RawMessage, model string) *apiErr {
	if kind(rm) != 'o' {
		return invalid("messages.%d: Input should be a valid dictionary or object to extract fields from", i)
	}
	var m map[string]json.RawMessage
	json.Unmarshal(rm, &m)
	var role string
	switch kind(m["role"]) {
	case 'n':
		return invalid("messages.%d.role: Field required", i)
	case 's':
		json.Unmarshal(m["role"], &role)
	}
	switch role {
	case "user", "assistant":
	case "system":
		if !strings.HasPrefix(model, "claude-opus-4-8") {
			return invalid("messages.%d: role 'system' is not supported on this model", i)
		}
	default:
		return invalid("messages.%d.role: Input should be 'user' or 'assistant'", i)
	}
	content := m["content"]
	switch kind(content) {
	case 'n':
		return invalid("messages.%d.content: Field required", i)
	case 's':
		return nil
	case 'a':
	default:
		return invalid("messages.%d.content: Input should be a valid list", i)
	}
	var blocks []json.RawMessage
	json.Unmarshal(content, &blocks)
	for j, rb := range blocks {
		at := fmt.Sprintf("messages.%d.content.%d", i, j)
		if kind(rb) != 'o' {
			return invalid("%s: Input should be a valid dictionary or object to extract fields from", at)
		}
		var b map[string]json.RawMessage
		json.Unmarshal(rb, &b)
		var typ string
		if kind(b["type"]) != 's' {
			return invalid("%s: Unable to extract tag using discriminator 'type'", at)
		}
		json.Unmarshal(b["type"], &typ)
		if role == "system" && typ != "text" {
			return invalid("%s.type: Input should be 'text'", at)
		}
		need := map[string][]string{
			"text":              {"text"},
			"tool_use":          {"id", "name", "input"},
			"tool_result":       {"tool_use_id"},
			"thinking":          {"thinking", "signature"},
			"redacted_thinking": {"data"},
		}[typ]
		for _, f := range need {
			v, ok := b[f]
			if !ok || kind(v) == 'n' {
				return invalid("%s.%s.%s: Field required", at, typ, f)
			}
			want := byte('s')
			if f == "input" {
				want = 'o'
			}
			if kind(v) != want {
				if want == 'o' {
					return invalid("%s.%s.%s: Input should be a valid dictionary", at, typ, f)
				}
				return invalid("%s.%s.%s: Input should be a valid string", at, typ, f)
			}
		}
	}
	return nil
}

func checkTools(raw json.RawMessage) *apiErr {
	switch kind(raw) {
	case 'n':
		return nil
	case 'a':
	default:
		return invalid("tools: Input should be a valid list")
	}
	var tools []json.RawMessage
	json.Unmarshal(raw, &tools)
	names := map[string]bool{}
	for i, rt := range tools {
		if kind(rt) != 'o' {
			return invalid("tools.%d: Input should be a valid dictionary or object to extract fields from", i)
		}
		var t map[string]json.RawMessage
		json.Unmarshal(rt, &t)
		var typ, name string
		json.Unmarshal(t["type"], &typ)
		json.Unmarshal(t["name"], &name)
		if typ == "" || typ == "custom" {
			at := fmt.Sprintf("tools.%d.custom", i)
			switch kind(t["name"]) {
			case 'n':
				return invalid("%s.name: Field required", at)
			case 's':
			default:
				return invalid("%s.name: Input should be a valid string", at)
			}
			if !toolName.MatchString(name) {
				return invalid("%s.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'", at)
			}
			switch kind(t["input_schema"]) {
			case 'n':
				return invalid("%s.input_schema: Field required", at)
			case 'o':
			default:
				return invalid("%s.input_schema: Input should be a valid dictionary", at)
			}
			var schema map[string]json.RawMessage
			json.Unmarshal(t["input_schema"], &schema)
			var st string
			if kind(schema["type"]) == 'n' {
				return invalid("%s.input_schema.type: Field required", at)
			}
			if json.Unmarshal(schema["type"], &st) != nil || st != "object" {
				return invalid("%s.input_schema.type: Input should be 'object'", at)
			}
		}
		if name != "" {
			if names[name] {
				return invalid("tools: Tool names must be unique.")
			}
			names[name] = true
		}
	}
	return nil
}

// checkToolPairs checks that every tool_use is answered by a tool_result at
// the beginning of the next user turn, and every tool_result answers a
// tool_use of the assistant turn just before.
func checkToolPairs(turns []turn) *apiErr {
	const answer = "Each `tool_use` block must have a corresponding `tool_result` block in the next message."
	for k, t := range turns {
		if t.role == "assistant" {
			if k == len(turns)-1 {
				if uses := toolUses(t); len(uses) > 0 {
					return invalid("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. %s",
						uses[0].msg, ids(uses), answer)
				}
			}
			continue
		}
		var uses []blockRef
		if k > 0 {
			uses = toolUses(turns[k-1])
		}
		known := map[string]bool{}
		for _, u := range uses {
			known[u.b.ID] = true
		}
		for _, r := range t.blocks {
			if r.b.Type == "tool_result" && !known[r.b.ToolUseID] {
				return invalid("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. "+
					"Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", r.msg, r.idx, r.b.ToolUseID)
			}
		}
		if len(uses) == 0 {
			continue
		}
		leading, answered, later := 0, map[string]bool{}, false
		for _, r := range t.blocks {
			if r.b.Type != "tool_result" {
				break
			}
			leading++
			answered[r.b.ToolUseID] = true
		}
		for _, r := range t.blocks[leading:] {
			later = later || r.b.Type == "tool_result"
		}
		var missing []blockRef
		for _, u := range uses {
			if !answered[u.b.ID] {
				missing = append(missing, u)
			}
		}
		if len(missing) == 0 {
			continue
		}
		if leading == 0 || later {
			return invalid("messages.%d: Did not find %d `tool_result` block(s) at the beginning of this message. "+
				"Messages following `tool_use` blocks must begin with a matching number of `tool_result` blocks.", t.first, len(uses))
		}
		return invalid("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. %s",
			missing[0].msg, ids(missing), answer)
	}
	return nil
}

func toolUses(t turn) []blockRef {
	var out []blockRef
	for _, r := range t.blocks {
		if r.b.Type == "tool_use" {
			out = append(out, r)
		}
	}
	return out
}

func ids(refs []blockRef) string {
	var s []string
	for _, r := range refs {
		s = append(s, r.b.ID)
	}
	return strings.Join(s, ", ")
}

func isThinking(typ string) bool { return typ == "thinking" || typ == "redacted_thinking" }

// checkThinkingBlocks checks the thinking blocks of assistant messages
// against what this server issued. s.mu is held.
func (s *Server) checkThinkingBlocks(msgs []Message, lastAssistant int) *apiErr {
	for i, m := range msgs {
		if m.Role != "assistant" || len(m.Content) == 0 {
			continue
		}
		has := false
		for j, b := range m.Content {
			switch b.Type {
			case "thinking":
				has = true
				text, ok := s.thinking[b.Signature]
				if !ok {
					return invalid("messages.%d.content.%d: Invalid `signature` in `thinking` block", i, j)
				}
				if i == lastAssistant && text != b.Thinking {
					return invalid("messages.%d.content.%d: `thinking` or `redacted_thinking` blocks in the latest assistant message cannot be modified. "+
						"These blocks must remain as they were in the original response.", i, j)
				}
			case "redacted_thinking":
				has = true
				if !s.redacted[b.Data] {
					return invalid("messages.%d.content.%d: Invalid `data` in `redacted_thinking` block", i, j)
				}
			}
		}
		if has && !isThinking(m.Content[0].Type) {
			return invalid("messages.%d.content.0: If an assistant message contains any thinking blocks, the first block must be thinking or redacted_thinking. Found %s.", i, m.Content[0].Type)
		}
	}
	return nil
}

// checkTurnStartsWithThinking applies, with thinking on, the rule that the
// final assistant turn starts with a thinking block: a request that ends in
// a tool-use loop (its last user turn only tool_results, perhaps followed by
// an assistant prefill) continues the assistant turn that began the loop,
// and that turn's first message must start with a thinking or
// redacted_thinking block. A request whose last user turn has anything but
// tool_results starts a new turn, which has no such rule.
func checkTurnStartsWithThinking(turns []turn) *apiErr {
	k := len(turns) - 1
	if turns[k].role == "assistant" {
		k--
	}
	if k < 1 || !turns[k].onlyToolResults() {
		return nil
	}
	start := k - 1
	for start >= 2 && turns[start-1].onlyToolResults() {
		start -= 2
	}
	first := turns[start].blocks[0]
	if isThinking(first.b.Type) {
		return nil
	}
	return invalid("messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. "+
		"When `thinking` is enabled, a final `assistant` message must start with a thinking block "+
		"(preceeding the lastmost set of `tool_use` and `tool_result` blocks). "+
		"We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. "+
		"Please consult our documentation at %s", first.msg, first.b.Type, thinkingDocs)
}

func systemBlocks(raw json.RawMessage) []map[string]json.RawMessage {
	switch kind(raw) {
	case 's':
		var s string
		json.Unmarshal(raw, &s)
		return []map[string]json.RawMessage{{"type": json.RawMessage(`"text"`), "text": marshal(s)}}
	case 'a':
		var bs []map[string]json.RawMessage
		json.Unmarshal(raw, &bs)
		return bs
	}
	return nil
}

// cacheUsage emulates the prompt cache for a request: the prefixes up to
// its breakpoints are written, and reported as read when already written.
// ok is false without breakpoints.
func (s *Server) cacheUsage(req Request, top map[string]json.RawMessage) (read, created int, ok bool) {
	h := sha256.New()
	size := 0
	type point struct {
		sum    [32]byte
		tokens int
	}
	var points []point
	add := func(block []byte, breakpoint bool) {
		h.Write(block)
		h.Write([]byte{0x1e})
		size += len(block)
		if breakpoint {
			var p point
			copy(p.sum[:], h.Sum(nil))
			p.tokens = max(1, size/4)
			points = append(points, p)
		}
	}
	canon := func(b map[string]json.RawMessage) ([]byte, bool) {
		cc := kind(b["cache_control"]) != 'n'
		delete(b, "cache_control")
		return marshal(b), cc
	}
	h.Write([]byte(req.Model + "\x00"))
	var tools []map[string]json.RawMessage
	json.Unmarshal(top["tools"], &tools)
	for _, t := range tools {
		add(canon(t))
	}
	h.Write([]byte("system\x00"))
	for _, b := range systemBlocks(req.System) {
		add(canon(b))
	}
	h.Write([]byte("messages\x00"))
	h.Write(req.Thinking)
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	json.Unmarshal(top["messages"], &msgs)
	var blocks [][]byte
	var marks []bool
	for _, m := range msgs {
		var bs []map[string]json.RawMessage
		if kind(m.Content) == 's' {
			bs = []map[string]json.RawMessage{{"type": json.RawMessage(`"text"`), "text": m.Content}}
		} else {
			json.Unmarshal(m.Content, &bs)
		}
		for _, b := range bs {
			b["role"] = marshal(m.Role)
			c, cc := canon(b)
			blocks, marks = append(blocks, c), append(marks, cc)
		}
	}
	if len(marks) > 0 && kind(top["cache_control"]) != 'n' {
		marks[len(marks)-1] = true
	}
	for i, b := range blocks {
		add(b, marks[i])
	}
	if len(points) == 0 {
		return 0, 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range points {
		if s.cache[p.sum] {
			read = max(read, p.tokens)
		}
		s.cache[p.sum] = true
	}
	return read, points[len(points)-1].tokens - read, true
}

// The wire shapes of a reply.
type (
	wireUsage struct {
		InputTokens              int            `json:"input_tokens"`
		CacheCreationInputTokens int            `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     int            `json:"cache_read_input_tokens"`
		CacheCreation            *cacheCreation `json:"cache_creation,omitempty"`
		OutputTokens             int            `json:"output_tokens"`
		OutputTokensDetails      *outputDetails `json:"output_tokens_details,omitempty"`
		ServiceTier              string         `json:"service_tier,omitempty"`
	}
	outputDetails struct {
		ThinkingTokens int `json:"thinking_tokens"`
	}
	cacheCreation struct {
		Ephemeral5m int `json:"ephemeral_5m_input_tokens"`
		Ephemeral1h int `json:"ephemeral_1h_input_tokens"`
	}
	wireMessage struct {
		ID           string          `json:"id"`
		Type         string          `json:"type"`
		Role         string          `json:"role"`
		Model        string          `json:"model"`
		Content      []any           `json:"content"`
		StopReason   *string         `json:"stop_reason"`
		StopSequence *string         `json:"stop_sequence"`
		StopDetails  json.RawMessage `json:"stop_details"`
		Usage        wireUsage       `json:"usage"`
	}
	textBlock struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	thinkingBlock struct {
		Type      string `json:"type"`
		Thinking  string `json:"thinking"`
		Signature string `json:"signature"`
	}
	thinkingStart struct {
		Type     string `json:"type"`
		Thinking string `json:"thinking"`
	}
	redactedBlock struct {
		Type string `json:"type"`
		Data string `json:"data"`
	}
	toolUseBlock struct {
		Type  string          `json:"type"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}
)

// reply is a default reply made concrete: its blocks with the server's
// signatures and ids, and its usage.
type reply struct {
	id, model, stop string
	thinking        *thinkingBlock
	redacted        *redactedBlock
	calls           []Call
	usage           wireUsage
}

func (s *Server) message(rep Reply, req Request, top map[string]json.RawMessage) reply {
	m := reply{id: newID("msg_01"), model: req.Model, stop: rep.StopReason}
	if m.stop == "" {
		m.stop = "end_turn"
		if len(rep.ToolCalls) > 0 {
			m.stop = "tool_use"
		}
	}
	if rep.Thinking != "" {
		m.thinking = &thinkingBlock{"thinking", rep.Thinking, randomBase64(150)}
	}
	if rep.RedactedThinking {
		m.redacted = &redactedBlock{"redacted_thinking", randomBase64(240)}
	}
	for _, c := range rep.ToolCalls {
		if c.ID == "" {
			c.ID = newID("toolu_01")
		}
		m.calls = append(m.calls, c)
	}
	s.mu.Lock()
	if m.thinking != nil {
		s.thinking[m.thinking.Signature] = m.thinking.Thinking
	}
	if m.redacted != nil {
		s.redacted[m.redacted.Data] = true
	}
	s.mu.Unlock()

	u := Usage{InputTokens: 10, OutputTokens: 5}
	if read, created, ok := s.cacheUsage(req, top); ok {
		u.CacheReadInputTokens, u.CacheCreationInputTokens = read, created
	}
	if rep.Usage != nil {
		u = *rep.Usage
	}
	m.usage = wireUsage{
		InputTokens:              u.InputTokens,
		CacheCreationInputTokens: u.CacheCreationInputTokens,
		CacheReadInputTokens:     u.CacheReadInputTokens,
		CacheCreation:            &cacheCreation{Ephemeral5m: u.CacheCreationInputTokens},
		OutputTokens:             u.OutputTokens,
		ServiceTier:              "standard",
	}
	if u.ThinkingTokens > 0 {
		m.usage.OutputTokensDetails = &outputDetails{ThinkingTokens: u.ThinkingTokens}
	}
	return m
}

func (m reply) input(c Call) json.RawMessage {
	if strings.TrimSpace(c.Args) == "" {
		return json.RawMessage(`{}`)
	}
	return json.RawMessage(c.Args)
}

func writeJSON(w http.ResponseWriter, rep Reply, m reply) {
	content := []any{}
	if m.thinking != nil {
		content = append(content, *m.thinking)
	}
	if m.redacted != nil {
		content = append(content, *m.redacted)
	}
	if rep.Text != "" {
		content = append(content, textBlock{"text", rep.Text})
	}
	for _, c := range m.calls {
		in := m.input(c)
		if !json.Valid(in) {
			in = marshal(c.Args) // not JSON: sent as a string, which a client must refuse
		}
		content = append(content, toolUseBlock{"tool_use", c.ID, c.Name, in})
	}
	body := marshal(wireMessage{
		ID: m.id, Type: "message", Role: "assistant", Model: m.model, Content: content,
		StopReason: &m.stop, StopDetails: json.RawMessage("null"), Usage: m.usage,
	})
	w.Header().Set("Content-Type", "application/json")
	switch {
	case rep.Stall:
		w.WriteHeader(http.StatusOK)
		flush(w)
	case rep.Cut:
		w.Write(body[:len(body)/2])
	default:
		w.Write(body)
	}
}

func flush(w http.ResponseWriter) {
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
}

func writeStream(w http.ResponseWriter, rep Reply, m reply) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	event := func(name string, data any) {
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, marshal(data))
		flush(w)
	}
	type delta struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
		Delta any    `json:"delta"`
	}
	type start struct {
		Type         string `json:"type"`
		Index        int    `json:"index"`
		ContentBlock any    `json:"content_block"`
	}
	type stop struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}
	startUsage := m.usage
	startUsage.OutputTokens = min(1, m.usage.OutputTokens)
	event("message_start", struct {
		Type    string      `json:"type"`
		Message wireMessage `json:"message"`
	}{"message_start", wireMessage{
		ID: m.id, Type: "message", Role: "assistant", Model: m.model, Content: []any{},
		StopDetails: json.RawMessage("null"), Usage: startUsage,
	}})
	if rep.StreamError != "" {
		event("error", json.RawMessage(errorBody(rep.StreamError, errorMessage(rep.StreamError), "")))
		return
	}
	index, pinged := 0, false
	open := func(block any) {
		event("content_block_start", start{"content_block_start", index, block})
		if !pinged {
			event("ping", struct {
				Type string `json:"type"`
			}{"ping"})
			pinged = true
		}
	}
	closeBlock := func() {
		event("content_block_stop", stop{"content_block_stop", index})
		index++
	}
	if m.thinking != nil {
		open(thinkingStart{"thinking", ""})
		for _, part := range splitN(m.thinking.Thinking, 2) {
			event("content_block_delta", delta{"content_block_delta", index, struct {
				Type     string `json:"type"`
				Thinking string `json:"thinking"`
			}{"thinking_delta", part}})
		}
		event("content_block_delta", delta{"content_block_delta", index, struct {
			Type      string `json:"type"`
			Signature string `json:"signature"`
		}{"signature_delta", m.thinking.Signature}})
		closeBlock()
	}
	if m.redacted != nil {
		open(*m.redacted)
		closeBlock()
	}
	if rep.Text != "" {
		open(textBlock{"text", ""})
		parts := splitN(rep.Text, 3)
		if rep.Cut && len(m.calls) == 0 {
			parts = splitN(rep.Text[:len(rep.Text)/2], 2)
		}
		for _, part := range parts {
			event("content_block_delta", delta{"content_block_delta", index, struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}{"text_delta", part}})
		}
		if rep.Stall || (rep.Cut && len(m.calls) == 0) {
			return
		}
		closeBlock()
	}
	if rep.Stall || (rep.Cut && len(m.calls) == 0) {
		return
	}
	for _, c := range m.calls {
		open(toolUseBlock{"tool_use", c.ID, c.Name, json.RawMessage(`{}`)})
		args := c.Args
		if rep.Cut {
			args = args[:len(args)/2]
		}
		jsonDelta := func(s string) {
			event("content_block_delta", delta{"content_block_delta", index, struct {
				Type        string `json:"type"`
				PartialJSON string `json:"partial_json"`
			}{"input_json_delta", s}})
		}
		jsonDelta("")
		for _, part := range splitN(args, 3) {
			jsonDelta(part)
		}
		if rep.Cut {
			return
		}
		closeBlock()
	}
	event("message_delta", struct {
		Type  string `json:"type"`
		Delta struct {
			StopReason   string          `json:"stop_reason"`
			StopSequence *string         `json:"stop_sequence"`
			StopDetails  json.RawMessage `json:"stop_details"`
		} `json:"delta"`
		Usage wireUsage `json:"usage"`
	}{Type: "message_delta", Delta: struct {
		StopReason   string          `json:"stop_reason"`
		StopSequence *string         `json:"stop_sequence"`
		StopDetails  json.RawMessage `json:"stop_details"`
	}{m.stop, nil, json.RawMessage("null")}, Usage: wireUsage{
		InputTokens:              m.usage.InputTokens,
		CacheCreationInputTokens: m.usage.CacheCreationInputTokens,
		CacheReadInputTokens:     m.usage.CacheReadInputTokens,
		OutputTokens:             m.usage.OutputTokens,
		OutputTokensDetails:      m.usage.OutputTokensDetails,
	}})
	event("message_stop", struct {
		Type string `json:"type"`
	}{"message_stop"})
}

// errorStatus is the HTTP status of an error type.
func errorStatus(typ string) int {
	switch typ {
	case "invalid_request_error":
		return http.StatusBadRequest
	case "authentication_error":
		return http.StatusUnauthorized
	case "billing_error":
		return http.StatusPaymentRequired
	case "permission_error":
		return http.StatusForbidden
	case "not_found_error":
		return http.StatusNotFound
	case "request_too_large":
		return http.StatusRequestEntityTooLarge
	case "rate_limit_error":
		return http.StatusTooManyRequests
	case "overloaded_error":
		return 529
	}
	return http.StatusInternalServerError
}

// errorMessage is the message the API sends with an error type, where it
// is known.
func errorMessage(typ string) string {
	switch typ {
	case "overloaded_error":
		return "Overloaded"
	case "api_error":
		return "Internal server error"
	case "rate_limit_error":
		return "Rate limited"
	}
	return typ
}

// marshal encodes v as the API does, leaving <, > and & literal.
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// newID is prefix and random base62 characters, 24 after a 4-character
// prefix as the API's ids have ("toolu_01" + 22).
func newID(prefix string) string {
	n := 24
	if i := strings.IndexByte(prefix, '_'); i >= 0 {
		n -= len(prefix) - i - 1
	}
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = base62[int(b[i])%len(base62)]
	}
	return prefix + string(b)
}

func randomBase64(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
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

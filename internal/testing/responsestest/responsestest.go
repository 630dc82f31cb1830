// Package responsestest is a scripted OpenAI Responses API server for
// tests: it serves POST /v1/responses, answers each request with the next
// Reply of its script (as server-sent events when the request has
// "stream": true, else as a Response object), and records every request so
// tests can assert what the client sent.
//
//	srv := responsestest.New(t,
//		responsestest.Reply{Reasoning: "Count the words.", ToolCalls: []responsestest.Call{{Name: "word_count", Args: `{"text":"a b"}`}}},
//		responsestest.Reply{Text: "There are 2 words."},
//	)
//	client := responses.NewResponseService(option.WithBaseURL(srv.URL), option.WithAPIKey("k"))
//	// client.NewStreaming(ctx, responses.ResponseNewParams{...})
//
// Every request is recorded before it is checked. The server refuses what
// the real API refuses, with the real error body
// ({"error":{"message":...,"type":"invalid_request_error","param":...,"code":...}}),
// before it takes a reply from the script (a refused request uses none):
//
//   - no Authorization: Bearer header: 401, "You didn't provide an API
//     key. ..." (any key is taken; [InvalidAPIKey] is the 401 for a bad
//     one);
//   - a body that is not JSON; a parameter the API does not know ("Unknown
//     parameter: 'input[0].foo'.", unknown_parameter) at the top level, in
//     an input item, or in a function tool; a value of the wrong type for a
//     parameter the server reads ("Invalid type for 'store': expected a
//     boolean, but got a string instead.", invalid_type); max_output_tokens
//     below 16; an include value the API does not know; a text.format of
//     an unknown type, or a json_schema one without name or schema;
//   - no model, no input (missing_required_parameter); an input item of an
//     unknown type; a message without content, or with a role other than
//     user, assistant, system or developer (invalid_value), or with content
//     parts of the other side (input_text in an assistant message,
//     output_text in a user one); a function_call without call_id, name or
//     arguments (a string); a function_call_output without call_id or
//     output; a reasoning item without summary, or without both id and
//     encrypted_content; an item_reference without id; a function tool
//     without name or parameters, or whose name does not match
//     ^[a-zA-Z0-9_-]{1,64}$;
//   - conversation state, as the real API keeps it (store is true unless
//     the request says false): a previous_response_id this server did not
//     store ("Previous response with id 'resp_x' not found.",
//     previous_response_not_found); an item id given twice in the
//     conversation (previous responses and input); a function_call_output
//     whose function_call is not earlier in the conversation, or a
//     function_call given with the item id of one this server emitted but
//     another call_id ("No tool call found for function call output with
//     call_id call_x."; a function_call without an item id is the
//     client's own, as the real API takes it); a function_call of the
//     conversation with no function_call_output after it ("No tool output
//     found for function call call_x.");
//   - reasoning items: one with encrypted_content that is not, byte for
//     byte, what this server issued for that item
//     (invalid_encrypted_content); one without encrypted_content when the
//     request has store false, or whose item was not stored ("Item with id
//     'rs_x' not found. Items are not persisted when `store` is set to
//     false. ..."); one not followed, in the input, by the item (the same
//     id) that followed it in the output ("Item 'rs_x' of type 'reasoning'
//     was provided without its required following item."); and a
//     function_call whose id is that following item, sent without its
//     reasoning item before it ("Item 'fc_x' of type 'function_call' was
//     provided without its required 'reasoning' item: 'rs_x'."); an
//     item_reference to an item this server did not store.
//
// Hosted tools, other input item types and conversations (the
// "conversation" parameter) are not simulated: a request using them gets a
// 400 whose message starts with "responsestest:". Only POST /v1/responses
// is served (retrieving, deleting or cancelling a response is not); any
// other path or method gets the API's 404 "Invalid URL (GET /v1/...)".
//
// A default reply is Reasoning, Text and ToolCalls, as output items in
// that order: a reasoning item (its summary streamed in
// response.reasoning_summary_text.delta events, and, when the request
// includes "reasoning.encrypted_content", an encrypted_content the server
// invents and remembers), an assistant message (its text streamed in a few
// response.output_text.delta events) and function calls (their arguments
// streamed in fragments). A stream starts with response.created and
// response.in_progress and ends with response.completed, whose response
// carries the whole output and the usage. It can misbehave the way real
// servers do: Cut ends the stream before the end (in the middle of the
// first function call's arguments), Stall keeps it open and silent after
// the text deltas, Status "incomplete" ends it with response.incomplete,
// and Failed with response.failed. [RateLimited] and [ContextTooLong] are
// the real HTTP errors.
//
// A Reply can also be exact wire bytes: Events is a whole event stream
// written as is, and HTTPStatus answers with an HTTP error. Check runs on
// the request before the reply is written.
//
// The output of a reply that completes (or ends incomplete) is remembered:
// its call ids, item ids and encrypted contents for later requests, and,
// unless the request had store false, the response for
// previous_response_id. A raw, cut, stalled or failed reply is not.
//
// A request past the end of the script gets a 400 "script exhausted",
// which a test may rely on; it does not fail the test.
package responsestest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/agcore/agrun/internal/testing/scripted"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Request is what the client sent, decoded as far as it could be (a
// field of the wrong type is left zero; Raw has it as sent). Each field is
// the request parameter of that name (model, input, instructions, ...).
type Request struct {
	Model string
	// Input is the input items; an input given as a string is one user
	// message whose Content is that JSON string.
	Input              []Item
	Instructions       string
	Tools              []Tool
	ToolChoice         json.RawMessage // "tool_choice" as sent (nil if absent)
	Stream             bool
	Store              *bool // nil if absent (the API then stores)
	Include            []string
	PreviousResponseID string
	Reasoning          json.RawMessage // "reasoning" as sent (nil if absent)
	Text               json.RawMessage // "text" as sent, with its "format" (nil if absent)
	ParallelToolCalls  *bool
	MaxOutputTokens    *int

	Raw    []byte      // the body as sent
	Auth   string      // the Authorization header
	Header http.Header // all headers

	top map[string]json.RawMessage
	raw []map[string]json.RawMessage // the input items as sent
}

// Item is one input item of a request. Type is as sent, or "message" for
// an item with a role and no type, or "item_reference" for one with
// neither.
type Item struct {
	Type    string
	Role    string          // message
	Content json.RawMessage // message: a string or an array of parts, as sent
	ID      string          // any item that has one
	CallID  string          // function_call, function_call_output
	Name    string          // function_call
	// Arguments is a function_call's arguments.
	Arguments string
	// Output is a function_call_output's output: the string, or the JSON
	// of an array of content parts.
	Output string
	// Summary is a reasoning item's summary as sent.
	Summary json.RawMessage
	// EncryptedContent is a reasoning item's encrypted_content ("" if
	// absent or null).
	EncryptedContent string
	Status           string
}

// Tool is a tool definition of a request.
type Tool struct {
	Type, Name, Description string
	Parameters              json.RawMessage
	Strict                  *bool
}

// Call is a function call in a scripted reply. ID is its call_id; an
// empty one is made up ("call_..."). The item's id is always made up
// ("fc_...").
type Call struct{ ID, Name, Args string }

// Usage is the token usage of a scripted reply.
type Usage struct{ InputTokens, OutputTokens, CachedTokens, ReasoningTokens int }

// APIErr is the error of a response that failed.
type APIErr struct{ Code, Message string }

// Reply is one scripted answer. By default it is Reasoning, Text and
// ToolCalls, as a stream when the request asks for one, else as a Response
// object.
type Reply struct {
	Text      string
	ToolCalls []Call
	// Reasoning, if set, makes a reasoning item ("rs_...") first in the
	// output, whose summary it is (sent when the request asks for
	// summaries: reasoning.summary); when the request includes
	// "reasoning.encrypted_content" the item carries an encrypted_content
	// the server makes up and later checks.
	Reasoning string
	// Usage, if set, replaces the default usage (10 input, 5 output, 15
	// total tokens); the total is input plus output.
	Usage *Usage
	// Status, if set, is the final status of the response instead of
	// "completed". "incomplete" ends a stream with response.incomplete,
	// with IncompleteReason ("max_output_tokens" if empty) as
	// incomplete_details.reason, and marks the message incomplete; any
	// other status ends it with response.completed.
	Status           string
	IncompleteReason string
	// Cut ends a reply early, as a connection that breaks off does: a
	// stream sends the reasoning, the text and half the first function
	// call's arguments (or the text deltas only, when there is no call),
	// then the body ends without response.completed; a JSON reply sends
	// half its body.
	Cut bool
	// Stall sends response.created, response.in_progress and, when there
	// is Text, the reasoning and the text deltas, then keeps the stream
	// open and silent until the client goes away. A JSON reply sends
	// nothing until then.
	Stall bool
	// Failed, if set, ends the stream with response.failed, its response
	// (status "failed") carrying this error, after the output; a JSON reply
	// is that response.
	Failed *APIErr

	// Events, if set, is the reply instead: a whole text/event-stream body
	// written as is (a recorded stream, say), whether or not the request
	// asked for a stream.
	Events string
	// HTTPStatus, if set, answers with this HTTP status and Body, as
	// JSON (see [RateLimited] and [ContextTooLong]).
	HTTPStatus int
	Body       string
	// Header is set on the response of any reply (retry-after, say).
	Header map[string]string

	// Check, if set, is called with the request before the reply is
	// written, to assert what the client sent.
	Check func(t testing.TB, got Request)
	// Started, if set, is closed when the request is taken to be
	// answered.
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

// RateLimited is the API's 429 for a tokens-per-minute limit, with a
// retry-after header of retryAfter (none if empty; the real API does not
// always send one) and its x-ratelimit-* headers.
func RateLimited(retryAfter string) Reply {
	wait := "1s"
	if n, err := strconv.ParseFloat(retryAfter, 64); err == nil {
		wait = strconv.FormatFloat(n, 'f', -1, 64) + "s"
	}
	h := map[string]string{
		"x-ratelimit-limit-tokens":     "30000",
		"x-ratelimit-remaining-tokens": "0",
		"x-ratelimit-reset-tokens":     wait,
	}
	if retryAfter != "" {
		h["retry-after"] = retryAfter
	}
	msg := "Rate limit reached for gpt-4o in organization org-responsestest on tokens per min (TPM): Limit 30000, Used 30000, Requested 1200. Please try again in " + wait + ". Visit https://platform.openai.com/account/rate-limits to learn more."
	return Reply{HTTPStatus: http.StatusTooManyRequests, Header: h,
		Body: string(errBody(msg, "tokens", "", "rate_limit_exceeded"))}
}

// ContextTooLong is the API's 400 for an input longer than the model's
// context window.
func ContextTooLong() Reply {
	return Reply{HTTPStatus: http.StatusBadRequest, Body: string(errBody(
		"Your input exceeds the context window of this model. Please adjust your input and try again.",
		"invalid_request_error", "input", "context_length_exceeded"))}
}

// InvalidAPIKey is the API's 401 for an API key it does not know.
func InvalidAPIKey(key string) Reply {
	shown := key
	if len(key) > 8 {
		shown = key[:3] + strings.Repeat("*", len(key)-7) + key[len(key)-4:]
	}
	return Reply{HTTPStatus: http.StatusUnauthorized, Body: string(errBody(
		"Incorrect API key provided: "+shown+". You can find your API key at https://platform.openai.com/account/api-keys.",
		"invalid_request_error", "", "invalid_api_key"))}
}

// Server is the scripted server. It is safe for concurrent use.
type Server struct {
	URL string // base URL for the client, ending in /v1
	srv *httptest.Server
	t   testing.TB

	mu      sync.Mutex
	script  []Reply
	reqs    []Request
	servedN int
	items   map[string]*issued // output items, by id
	byEnc   map[string]string  // encrypted content -> reasoning item id
	calls   map[string]bool    // call ids emitted
	stored  map[string][]ctxItem
}

// issued is an output item the server sent in a response it remembers.
type issued struct {
	typ, callID string
	enc         string // reasoning: the encrypted content issued, if any
	next        string // reasoning: the id of the item after it in the output
	reasoning   string // the item right after a reasoning item: that item's id
	stored      bool
}

// ctxItem is one item of a conversation, as the pairing rules see it.
type ctxItem struct{ typ, id, callID string }

// New starts a server with a script; it stops when the test ends.
func New(t testing.TB, script ...Reply) *Server {
	s := &Server{script: script, t: t,
		items: map[string]*issued{}, byEnc: map[string]string{}, calls: map[string]bool{}, stored: map[string][]ctxItem{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.handle))
	s.URL = s.srv.URL + "/v1"
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

// Requests returns the requests received so far, refused ones included.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// apiErr is an error answer of the API.
type apiErr struct {
	status                    int
	message, typ, param, code string
}

func errBody(message, typ, param, code string) []byte {
	orNull := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": message, "type": typ, "param": orNull(param), "code": orNull(code)}})
	return b
}

func invalid(param, code, format string, a ...any) *apiErr {
	return &apiErr{status: http.StatusBadRequest, message: fmt.Sprintf(format, a...), typ: "invalid_request_error", param: param, code: code}
}

func (e *apiErr) write(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	w.Write(errBody(e.message, e.typ, e.param, e.code))
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if (r.URL.Path != "/v1/responses" && r.URL.Path != "/responses") || r.Method != http.MethodPost {
		(&apiErr{status: http.StatusNotFound, message: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path), typ: "invalid_request_error"}).write(w)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	req, perr := decode(raw)
	req.Raw, req.Auth, req.Header = raw, r.Header.Get("Authorization"), r.Header.Clone()
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()

	if tok, ok := strings.CutPrefix(req.Auth, "Bearer "); !ok || strings.TrimSpace(tok) == "" {
		(&apiErr{status: http.StatusUnauthorized, typ: "invalid_request_error", message: "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if you're accessing the API from your browser and are prompted for a username and password. You can obtain an API key from https://platform.openai.com/account/api-keys."}).write(w)
		return
	}
	if perr == nil {
		perr = check(&req)
	}
	if perr != nil {
		perr.write(w)
		return
	}
	s.mu.Lock()
	conv, verr := s.converse(&req)
	if verr != nil {
		s.mu.Unlock()
		verr.write(w)
		return
	}
	var rep Reply
	ok := s.servedN < len(s.script)
	if ok {
		rep = s.script[s.servedN]
		s.servedN++
	}
	s.mu.Unlock()
	if !ok {
		invalid("", "", "responsestest: script exhausted").write(w)
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
	case rep.HTTPStatus != 0:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.HTTPStatus)
		io.WriteString(w, rep.Body)
		return
	case rep.Events != "":
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, rep.Events)
		return
	}
	b := build(&req, rep)
	if !rep.Cut && !rep.Stall && rep.Failed == nil {
		s.remember(&req, b, conv)
	}
	if req.Stream {
		if b.stream(w, r.Context()) {
			gone()
		}
		return
	}
	body, _ := json.Marshal(b.object(true))
	w.Header().Set("Content-Type", "application/json")
	switch {
	case rep.Stall:
		<-r.Context().Done()
		gone()
	case rep.Cut:
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body[:len(body)/2])
	default:
		w.Write(body)
	}
}

// decode decodes the body as far as it can; the error is for a body that
// is not a JSON object.
func decode(raw []byte) (Request, *apiErr) {
	var req Request
	if err := json.Unmarshal(raw, &req.top); err != nil || req.top == nil {
		return req, invalid("", "", "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble figuring out how to fix this, please contact us through our help center at help.openai.com.)")
	}
	t := req.top
	json.Unmarshal(t["model"], &req.Model)
	json.Unmarshal(t["instructions"], &req.Instructions)
	json.Unmarshal(t["stream"], &req.Stream)
	json.Unmarshal(t["include"], &req.Include)
	json.Unmarshal(t["previous_response_id"], &req.PreviousResponseID)
	if isType(t["store"], "boolean") {
		json.Unmarshal(t["store"], &req.Store)
	}
	if isType(t["parallel_tool_calls"], "boolean") {
		json.Unmarshal(t["parallel_tool_calls"], &req.ParallelToolCalls)
	}
	if isType(t["max_output_tokens"], "integer") {
		json.Unmarshal(t["max_output_tokens"], &req.MaxOutputTokens)
	}
	req.Reasoning, req.Text, req.ToolChoice = present(t["reasoning"]), present(t["text"]), present(t["tool_choice"])
	var tools []map[string]json.RawMessage
	json.Unmarshal(t["tools"], &tools)
	for _, m := range tools {
		var tl Tool
		json.Unmarshal(m["type"], &tl.Type)
		json.Unmarshal(m["name"], &tl.Name)
		json.Unmarshal(m["description"], &tl.Description)
		json.Unmarshal(m["strict"], &tl.Strict)
		tl.Parameters = present(m["parameters"])
		req.Tools = append(req.Tools, tl)
	}
	in := t["input"]
	switch kindOf(in) {
	case "string":
		req.raw = []map[string]json.RawMessage{{"role": json.RawMessage(`"user"`), "content": in}}
	case "array":
		var items []json.RawMessage
		json.Unmarshal(in, &items)
		for _, it := range items {
			var m map[string]json.RawMessage
			json.Unmarshal(it, &m)
			req.raw = append(req.raw, m) // nil for an item that is not an object
		}
	}
	for _, m := range req.raw {
		var it Item
		json.Unmarshal(m["type"], &it.Type)
		json.Unmarshal(m["role"], &it.Role)
		json.Unmarshal(m["id"], &it.ID)
		json.Unmarshal(m["call_id"], &it.CallID)
		json.Unmarshal(m["name"], &it.Name)
		json.Unmarshal(m["arguments"], &it.Arguments)
		json.Unmarshal(m["encrypted_content"], &it.EncryptedContent)
		json.Unmarshal(m["status"], &it.Status)
		it.Content, it.Summary = present(m["content"]), present(m["summary"])
		if o := present(m["output"]); o != nil {
			if json.Unmarshal(o, &it.Output) != nil {
				it.Output = string(o)
			}
		}
		if it.Type == "" && m != nil {
			it.Type = "item_reference"
			if _, ok := m["role"]; ok {
				it.Type = "message"
			}
		}
		req.Input = append(req.Input, it)
	}
	return req, nil
}

// present is raw, or nil when it is absent or null.
func present(raw json.RawMessage) json.RawMessage {
	if kindOf(raw) == "" || kindOf(raw) == "null" {
		return nil
	}
	return raw
}

// kindOf is the JSON type of raw as the API's errors name it ("" if
// absent).
func kindOf(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	if bytes.ContainsAny(raw, ".eE") {
		return "decimal"
	}
	return "integer"
}

func isType(raw json.RawMessage, kind string) bool { return kindOf(raw) == kind }

func article(kind string) string {
	if kind == "null" {
		return "null"
	}
	if strings.IndexByte("aeiou", kind[0]) >= 0 {
		return "an " + kind
	}
	return "a " + kind
}

// typed checks that a parameter, if present and not null, is of kind.
func typed(param string, raw json.RawMessage, kind string) *apiErr {
	k := kindOf(raw)
	if k == "" || k == "null" || k == kind || (kind == "decimal" && k == "integer") {
		return nil
	}
	want := article(kind)
	if kind == "decimal" {
		want = "a number"
	}
	return invalid(param, "invalid_type", "Invalid type for '%s': expected %s, but got %s instead.", param, want, article(k))
}

func missing(param string) *apiErr {
	return invalid(param, "missing_required_parameter", "Missing required parameter: '%s'.", param)
}

func unknown(prefix string, m map[string]json.RawMessage, known ...string) *apiErr {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		found := false
		for _, kn := range known {
			found = found || k == kn
		}
		if !found {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			return invalid(p, "unknown_parameter", "Unknown parameter: '%s'.", p)
		}
	}
	return nil
}

// supported is the API's list of values: 'a', 'b', and 'c'.
func supported(vals ...string) string {
	q := make([]string, len(vals))
	for i, v := range vals {
		q[i] = "'" + v + "'"
	}
	if len(q) < 3 {
		return strings.Join(q, " and ")
	}
	return strings.Join(q[:len(q)-1], ", ") + ", and " + q[len(q)-1]
}

func badValue(param, got string, vals ...string) *apiErr {
	return invalid(param, "invalid_value", "Invalid value: '%s'. Supported values are: %s.", got, supported(vals...))
}

var (
	topParams = []string{"model", "input", "instructions", "tools", "tool_choice", "stream", "stream_options", "store", "include",
		"previous_response_id", "reasoning", "text", "parallel_tool_calls", "max_output_tokens", "max_tool_calls", "temperature",
		"top_p", "top_logprobs", "truncation", "metadata", "user", "safety_identifier", "prompt_cache_key", "prompt_cache_retention",
		"prompt_cache_options", "service_tier", "background", "conversation", "prompt", "context_management", "moderation",
		"access_programs", "image"}
	includes = []string{"code_interpreter_call.outputs", "computer_call_output.output.image_url", "file_search_call.results",
		"message.input_image.image_url", "message.output_text.logprobs", "reasoning.encrypted_content",
		"web_search_call.action.sources", "web_search_call.results"}
	itemParams = map[string][]string{
		"message":              {"type", "role", "content", "id", "status", "phase"},
		"function_call":        {"type", "id", "call_id", "name", "arguments", "status", "namespace", "async", "caller"},
		"function_call_output": {"type", "id", "call_id", "output", "status", "name", "namespace", "caller"},
		"reasoning":            {"type", "id", "summary", "encrypted_content", "content", "status"},
		"item_reference":       {"type", "id"},
	}
	// realItemTypes are the API's other input item types, not simulated.
	realItemTypes = []string{"file_search_call", "computer_call", "computer_call_output", "web_search_call", "tool_search_call",
		"tool_search_output", "additional_tools", "configuration_update", "compaction", "image_generation_call",
		"code_interpreter_call", "local_shell_call", "local_shell_call_output", "shell_call", "shell_call_output",
		"apply_patch_call", "apply_patch_call_output", "mcp_list_tools", "mcp_approval_request", "mcp_approval_response",
		"mcp_call", "custom_tool_call_output", "custom_tool_call", "compaction_trigger", "program", "program_output"}
	functionToolParams = []string{"type", "name", "description", "parameters", "strict", "async", "defer_loading",
		"allowed_callers", "output_schema"}
	toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)
)

// check is what the API checks of a request on its own.
func check(req *Request) *apiErr {
	t := req.top
	for _, c := range []struct{ param, kind string }{
		{"model", "string"}, {"instructions", "string"}, {"stream", "boolean"}, {"store", "boolean"},
		{"previous_response_id", "string"}, {"parallel_tool_calls", "boolean"}, {"max_output_tokens", "integer"},
		{"include", "array"}, {"tools", "array"}, {"reasoning", "object"}, {"text", "object"}, {"metadata", "object"},
		{"temperature", "decimal"}, {"top_p", "decimal"}, {"stream_options", "object"},
	} {
		if e := typed(c.param, t[c.param], c.kind); e != nil {
			return e
		}
	}
	if e := unknown("", t, topParams...); e != nil {
		return e
	}
	if present(t["model"]) == nil || req.Model == "" {
		return missing("model")
	}
	if present(t["conversation"]) != nil {
		return invalid("conversation", "", "responsestest: conversations are not simulated")
	}
	if req.MaxOutputTokens != nil && *req.MaxOutputTokens < 16 {
		return invalid("max_output_tokens", "integer_below_min_value", "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got %d instead.", *req.MaxOutputTokens)
	}
	var inc []json.RawMessage
	json.Unmarshal(t["include"], &inc)
	for i, v := range inc {
		p := fmt.Sprintf("include[%d]", i)
		if e := typed(p, v, "string"); e != nil {
			return e
		}
		var s string
		json.Unmarshal(v, &s)
		if !contains(includes, s) {
			return badValue(p, s, includes...)
		}
	}
	if e := checkText(req.Text); e != nil {
		return e
	}
	if e := checkTools(t["tools"]); e != nil {
		return e
	}
	switch k := kindOf(t["input"]); k {
	case "", "null":
		return missing("input")
	case "string", "array":
	default:
		return invalid("input", "invalid_type", "Invalid type for 'input': expected one of a string or array of input items, but got %s instead.", article(k))
	}
	var items []json.RawMessage
	json.Unmarshal(t["input"], &items)
	for i := range req.raw {
		if e := checkItem(i, items, req.raw[i], req.Input[i]); e != nil {
			return e
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func checkText(text json.RawMessage) *apiErr {
	var t map[string]json.RawMessage
	json.Unmarshal(text, &t)
	f := present(t["format"])
	if f == nil {
		return nil
	}
	if e := typed("text.format", f, "object"); e != nil {
		return e
	}
	var m map[string]json.RawMessage
	json.Unmarshal(f, &m)
	var typ string
	json.Unmarshal(m["type"], &typ)
	switch typ {
	case "":
		return missing("text.format.type")
	case "text", "json_object":
	case "json_schema":
		if present(m["name"]) == nil {
			return missing("text.format.name")
		}
		if present(m["schema"]) == nil {
			return missing("text.format.schema")
		}
	default:
		return badValue("text.format.type", typ, "text", "json_schema", "json_object")
	}
	return nil
}

func checkTools(raw json.RawMessage) *apiErr {
	var tools []json.RawMessage
	json.Unmarshal(raw, &tools)
	for i, tr := range tools {
		p := fmt.Sprintf("tools[%d]", i)
		if e := typed(p, tr, "object"); e != nil {
			return e
		}
		var m map[string]json.RawMessage
		json.Unmarshal(tr, &m)
		var typ string
		if e := typed(p+".type", m["type"], "string"); e != nil {
			return e
		}
		json.Unmarshal(m["type"], &typ)
		if typ == "" {
			return missing(p + ".type")
		}
		if typ != "function" {
			return invalid(p+".type", "", "responsestest: tools of type '%s' are not simulated (only 'function' is)", typ)
		}
		if present(m["name"]) == nil {
			return missing(p + ".name")
		}
		if e := typed(p+".name", m["name"], "string"); e != nil {
			return e
		}
		var name string
		json.Unmarshal(m["name"], &name)
		switch {
		case name == "":
			return invalid(p+".name", "empty_string", "Invalid '%s.name': empty string. Expected a string with minimum length 1, but got an empty string instead.", p)
		case len(name) > 64:
			return invalid(p+".name", "string_above_max_length", "Invalid '%s.name': string too long. Expected a string with maximum length 64, but got a string with length %d instead.", p, len(name))
		case !toolName.MatchString(name):
			return invalid(p+".name", "invalid_value", "Invalid '%s.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.", p)
		}
		if _, ok := m["parameters"]; !ok {
			return missing(p + ".parameters")
		}
		for _, c := range []struct{ k, kind string }{{"parameters", "object"}, {"description", "string"}, {"strict", "boolean"}} {
			if e := typed(p+"."+c.k, m[c.k], c.kind); e != nil {
				return e
			}
		}
		if e := unknown(p, m, functionToolParams...); e != nil {
			return e
		}
	}
	return nil
}

func checkItem(i int, items []json.RawMessage, m map[string]json.RawMessage, it Item) *apiErr {
	p := fmt.Sprintf("input[%d]", i)
	if m == nil {
		return invalid(p, "invalid_type", "Invalid type for '%s': expected an object, but got %s instead.", p, article(kindOf(items[i])))
	}
	for _, k := range []string{"type", "role", "id", "call_id", "name", "arguments", "status", "encrypted_content"} {
		if e := typed(p+"."+k, m[k], "string"); e != nil {
			return e
		}
	}
	known, ok := itemParams[it.Type]
	if !ok {
		if contains(realItemTypes, it.Type) {
			return invalid(p+".type", "", "responsestest: input items of type '%s' are not simulated", it.Type)
		}
		var types []string
		for k := range itemParams {
			types = append(types, k)
		}
		sort.Strings(types)
		return badValue(p+".type", it.Type, append(types, realItemTypes...)...)
	}
	switch it.Type {
	case "message":
		if present(m["role"]) == nil {
			return missing(p + ".role")
		}
		roles := []string{"assistant", "system", "developer", "user"}
		if !contains(roles, it.Role) {
			return badValue(p+".role", it.Role, roles...)
		}
		if present(m["content"]) == nil {
			return missing(p + ".content")
		}
		switch k := kindOf(m["content"]); k {
		case "string":
		case "array":
			var parts []json.RawMessage
			json.Unmarshal(m["content"], &parts)
			kinds := []string{"input_text", "input_image", "input_file"}
			if it.Role == "assistant" {
				kinds = []string{"output_text", "refusal"}
			}
			for j, pr := range parts {
				pp := fmt.Sprintf("%s.content[%d]", p, j)
				if e := typed(pp, pr, "object"); e != nil {
					return e
				}
				var part struct {
					Type string `json:"type"`
				}
				json.Unmarshal(pr, &part)
				if part.Type == "" {
					return missing(pp + ".type")
				}
				if !contains(kinds, part.Type) {
					return badValue(pp, part.Type, kinds...)
				}
			}
		default:
			return invalid(p+".content", "invalid_type", "Invalid type for '%s.content': expected one of a string or array of input content items, but got %s instead.", p, article(k))
		}
	case "function_call":
		for _, k := range []string{"call_id", "name", "arguments"} {
			if present(m[k]) == nil {
				return missing(p + "." + k)
			}
		}
	case "function_call_output":
		if present(m["call_id"]) == nil {
			return missing(p + ".call_id")
		}
		if present(m["output"]) == nil {
			return missing(p + ".output")
		}
		if k := kindOf(m["output"]); k != "string" && k != "array" {
			return invalid(p+".output", "invalid_type", "Invalid type for '%s.output': expected one of a string or array of output content items, but got %s instead.", p, article(k))
		}
	case "reasoning":
		if _, ok := m["summary"]; !ok {
			return missing(p + ".summary")
		}
		if e := typed(p+".summary", m["summary"], "array"); e != nil {
			return e
		}
		if it.ID == "" && it.EncryptedContent == "" {
			return missing(p + ".id")
		}
	case "item_reference":
		if it.ID == "" {
			return missing(p + ".id")
		}
	}
	return unknown(p, m, known...)
}

// converse checks a request against the conversation state (s.mu held)
// and returns the conversation it continues: the previous response's
// conversation, then the input.
func (s *Server) converse(req *Request) ([]ctxItem, *apiErr) {
	storing := req.Store == nil || *req.Store
	var conv []ctxItem
	if id := req.PreviousResponseID; id != "" {
		prev, ok := s.stored[id]
		if !ok {
			return nil, invalid("previous_response_id", "previous_response_not_found", "Previous response with id '%s' not found.", id)
		}
		conv = append(conv, prev...)
	}
	start := len(conv)
	notPersisted := func(id string) *apiErr {
		return invalid("input", "", "Item with id '%s' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input.", id)
	}
	for _, it := range req.Input {
		c := ctxItem{typ: it.Type, id: it.ID, callID: it.CallID}
		if it.Type == "item_reference" {
			iss, ok := s.items[it.ID]
			switch {
			case !ok:
				return nil, invalid("input", "", "Item with id '%s' not found.", it.ID)
			case !iss.stored:
				return nil, notPersisted(it.ID)
			}
			c.typ, c.callID = iss.typ, iss.callID
		}
		conv = append(conv, c)
	}
	seen := map[string]bool{}
	for _, c := range conv {
		if c.id == "" {
			continue
		}
		if seen[c.id] {
			return nil, invalid("input", "", "Duplicate item found with id %s. Remove duplicate items from your input and try again.", c.id)
		}
		seen[c.id] = true
	}
	before := func(i int, typ, id, callID string) bool { // an item of conv before i
		for _, c := range conv[:i] {
			if c.typ == typ && (id == "" || c.id == id) && (callID == "" || c.callID == callID) {
				return true
			}
		}
		return false
	}
	for j, it := range req.Input {
		i := start + j
		switch conv[i].typ {
		case "reasoning":
			id := it.ID
			var iss *issued
			if it.Type == "reasoning" && it.EncryptedContent != "" {
				if id == "" {
					id = s.byEnc[it.EncryptedContent]
				}
				iss = s.items[id]
				conv[i].id = id
				if iss == nil || iss.typ != "reasoning" || iss.enc != it.EncryptedContent {
					e := it.EncryptedContent
					if len(e) > 8 {
						e = e[:4] + "..." + e[len(e)-4:]
					}
					return nil, invalid("", "invalid_encrypted_content", "The encrypted content %s could not be verified. Reason: Encrypted content could not be decrypted or parsed.", e)
				}
			} else {
				iss = s.items[id]
				switch {
				case it.Type == "reasoning" && !storing:
					return nil, notPersisted(id)
				case iss == nil:
					return nil, invalid("input", "", "Item with id '%s' not found.", id)
				case !iss.stored:
					return nil, notPersisted(id)
				}
			}
			if iss.next != "" && (j+1 >= len(req.Input) || conv[i+1].id != iss.next) {
				return nil, invalid("input", "", "Item '%s' of type 'reasoning' was provided without its required following item.", id)
			}
		case "function_call":
			iss := s.items[conv[i].id]
			if iss != nil && iss.reasoning != "" && !before(i, "reasoning", iss.reasoning, "") {
				return nil, invalid("input", "", "Item '%s' of type 'function_call' was provided without its required 'reasoning' item: '%s'.", conv[i].id, iss.reasoning)
			}
			// A call given with the id of one this server emitted must be
			// that call; one without an id is the client's own.
			if iss != nil && iss.callID != conv[i].callID {
				return nil, invalid("input", "", "No tool call found for function call output with call_id %s.", conv[i].callID)
			}
		case "function_call_output":
			cid := conv[i].callID
			if !before(i, "function_call", "", cid) {
				return nil, invalid("input", "", "No tool call found for function call output with call_id %s.", cid)
			}
		}
	}
	for i, c := range conv {
		if c.typ != "function_call" {
			continue
		}
		answered := false
		for _, d := range conv[i+1:] {
			answered = answered || (d.typ == "function_call_output" && d.callID == c.callID)
		}
		if !answered {
			return nil, invalid("input", "", "No tool output found for function call %s.", c.callID)
		}
	}
	return conv, nil
}

// remember keeps what a response sent for later requests (s.mu not held).
func (s *Server) remember(req *Request, b *built, conv []ctxItem) {
	s.mu.Lock()
	defer s.mu.Unlock()
	storing := req.Store == nil || *req.Store
	prev := ""
	for i, it := range b.items {
		iss := &issued{typ: it.kind, callID: it.call.ID, enc: it.enc, stored: storing, reasoning: prev}
		prev = ""
		if it.kind == "reasoning" {
			prev = it.id
			if i+1 < len(b.items) {
				iss.next = b.items[i+1].id
			}
			if it.enc != "" {
				s.byEnc[it.enc] = it.id
			}
		}
		if it.kind == "function_call" {
			s.calls[it.call.ID] = true
		}
		s.items[it.id] = iss
		conv = append(conv, ctxItem{typ: it.kind, id: it.id, callID: it.call.ID})
	}
	if storing {
		s.stored[b.id] = conv
	}
}

// built is a response made from a Reply.
type built struct {
	req     *Request
	rep     Reply
	id      string
	created int64
	items   []*outItem
	obfus   bool
}

type outItem struct {
	kind, id string
	summary  string // reasoning
	enc      string // reasoning
	text     string // message
	call     Call   // function_call (ID filled in)
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func build(req *Request, rep Reply) *built {
	b := &built{req: req, rep: rep, id: "resp_" + randHex(24), created: time.Now().Unix(), obfus: true}
	var so struct {
		IncludeObfuscation *bool `json:"include_obfuscation"`
	}
	json.Unmarshal(req.top["stream_options"], &so)
	if so.IncludeObfuscation != nil {
		b.obfus = *so.IncludeObfuscation
	}
	if rep.Reasoning != "" {
		// The reasoning's summary is sent only when asked for
		// (reasoning.summary), as the API does; the item is there anyway.
		var rs struct {
			Summary *string `json:"summary"`
		}
		json.Unmarshal(req.Reasoning, &rs)
		summary := ""
		if rs.Summary != nil && *rs.Summary != "" {
			summary = rep.Reasoning
		}
		it := &outItem{kind: "reasoning", id: "rs_" + randHex(24), summary: summary}
		if contains(req.Include, "reasoning.encrypted_content") {
			raw := make([]byte, 94)
			rand.Read(raw)
			it.enc = "gAAAAAB" + base64.URLEncoding.EncodeToString(raw)
		}
		b.items = append(b.items, it)
	}
	if rep.Text != "" {
		b.items = append(b.items, &outItem{kind: "message", id: "msg_" + randHex(24), text: rep.Text})
	}
	for _, c := range rep.ToolCalls {
		if c.ID == "" {
			c.ID = "call_" + randHex(12)
		}
		b.items = append(b.items, &outItem{kind: "function_call", id: "fc_" + randHex(24), call: c})
	}
	return b
}

func (b *built) status() string {
	switch {
	case b.rep.Failed != nil:
		return "failed"
	case b.rep.Status != "":
		return b.rep.Status
	}
	return "completed"
}

// wire is the item as output_item.added (done false) or .done shows it.
func (it *outItem) wire(done bool, status string) map[string]any {
	st := "in_progress"
	if done {
		st = "completed"
		if status == "incomplete" {
			st = "incomplete"
		}
	}
	switch it.kind {
	case "reasoning":
		m := map[string]any{"id": it.id, "type": "reasoning", "summary": []any{}}
		if done {
			m["summary"] = []any{map[string]any{"type": "summary_text", "text": it.summary}}
			if it.enc != "" {
				m["encrypted_content"] = it.enc
			}
		}
		return m
	case "message":
		m := map[string]any{"id": it.id, "type": "message", "status": st, "role": "assistant", "content": []any{}}
		if done {
			m["content"] = []any{textPart(it.text)}
		}
		return m
	}
	args := ""
	if done {
		args = it.call.Args
	}
	if st == "incomplete" {
		st = "completed"
	}
	return map[string]any{"id": it.id, "type": "function_call", "status": st, "call_id": it.call.ID, "name": it.call.Name, "arguments": args}
}

func textPart(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

func orDefault(raw json.RawMessage, def any) any {
	if raw = present(raw); raw != nil {
		return raw
	}
	return def
}

// object is the Response object, as the first events (final false) or the
// last event and a JSON reply (final true) show it.
func (b *built) object(final bool) map[string]any {
	t := b.req.top
	store := true
	if b.req.Store != nil {
		store = *b.req.Store
	}
	o := map[string]any{
		"id": b.id, "object": "response", "created_at": b.created, "status": "in_progress",
		"background": false, "error": nil, "incomplete_details": nil,
		"instructions":         orDefault(t["instructions"], nil),
		"max_output_tokens":    orDefault(t["max_output_tokens"], nil),
		"max_tool_calls":       orDefault(t["max_tool_calls"], nil),
		"model":                b.req.Model,
		"output":               []any{},
		"parallel_tool_calls":  orDefault(t["parallel_tool_calls"], true),
		"previous_response_id": orDefault(t["previous_response_id"], nil),
		"prompt_cache_key":     orDefault(t["prompt_cache_key"], nil),
		"reasoning":            orDefault(t["reasoning"], map[string]any{"effort": nil, "summary": nil}),
		"safety_identifier":    orDefault(t["safety_identifier"], nil),
		"service_tier":         orDefault(t["service_tier"], "auto"),
		"store":                store,
		"temperature":          orDefault(t["temperature"], 1.0),
		"text":                 orDefault(t["text"], map[string]any{"format": map[string]any{"type": "text"}}),
		"tool_choice":          orDefault(t["tool_choice"], "auto"),
		"tools":                orDefault(t["tools"], []any{}),
		"top_p":                orDefault(t["top_p"], 1.0),
		"truncation":           orDefault(t["truncation"], "disabled"),
		"usage":                nil,
		"user":                 orDefault(t["user"], nil),
		"metadata":             orDefault(t["metadata"], map[string]any{}),
	}
	if !final {
		return o
	}
	st := b.status()
	o["status"] = st
	out := []any{}
	for _, it := range b.items {
		out = append(out, it.wire(true, st))
	}
	o["output"] = out
	u := b.rep.Usage
	if u == nil {
		u = &Usage{InputTokens: 10, OutputTokens: 5}
	}
	o["usage"] = map[string]any{
		"input_tokens": u.InputTokens, "input_tokens_details": map[string]any{"cached_tokens": u.CachedTokens},
		"output_tokens": u.OutputTokens, "output_tokens_details": map[string]any{"reasoning_tokens": u.ReasoningTokens},
		"total_tokens": u.InputTokens + u.OutputTokens,
	}
	if st == "incomplete" {
		reason := b.rep.IncompleteReason
		if reason == "" {
			reason = "max_output_tokens"
		}
		o["incomplete_details"] = map[string]any{"reason": reason}
	}
	if f := b.rep.Failed; f != nil {
		o["error"] = map[string]any{"code": f.Code, "message": f.Message}
	}
	return o
}

// stream writes the reply as events; true if it stalled and the client
// went away.
func (b *built) stream(w http.ResponseWriter, ctx context.Context) bool {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl, _ := w.(http.Flusher)
	seq := 0
	send := func(typ string, fields map[string]any) {
		rest, _ := json.Marshal(fields)
		head, _ := json.Marshal(typ)
		data := fmt.Sprintf(`{"type":%s,"sequence_number":%d`, head, seq)
		if len(rest) > 2 {
			data += "," + string(rest[1:])
		} else {
			data += "}"
		}
		seq++
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, data)
		if fl != nil {
			fl.Flush()
		}
	}
	delta := func(m map[string]any) map[string]any {
		if b.obfus {
			m["obfuscation"] = randHex(4)[:2+seq%6]
		}
		return m
	}
	stall := func() bool {
		<-ctx.Done()
		return true
	}
	send("response.created", map[string]any{"response": b.object(false)})
	send("response.in_progress", map[string]any{"response": b.object(false)})
	if b.rep.Stall && b.rep.Text == "" {
		return stall()
	}
	st := b.status()
	for i, it := range b.items {
		item := func(m map[string]any) map[string]any {
			m["item_id"], m["output_index"] = it.id, i
			return m
		}
		send("response.output_item.added", map[string]any{"output_index": i, "item": it.wire(false, st)})
		switch it.kind {
		case "reasoning":
			if it.summary == "" {
				break // no summary asked for: the item alone
			}
			send("response.reasoning_summary_part.added", item(map[string]any{"summary_index": 0, "part": map[string]any{"type": "summary_text", "text": ""}}))
			for _, d := range splitN(it.summary, 2) {
				send("response.reasoning_summary_text.delta", item(delta(map[string]any{"summary_index": 0, "delta": d})))
			}
			send("response.reasoning_summary_text.done", item(map[string]any{"summary_index": 0, "text": it.summary}))
			send("response.reasoning_summary_part.done", item(map[string]any{"summary_index": 0, "part": map[string]any{"type": "summary_text", "text": it.summary}}))
		case "message":
			send("response.content_part.added", item(map[string]any{"content_index": 0, "part": textPart("")}))
			for _, d := range splitN(it.text, 3) {
				send("response.output_text.delta", item(delta(map[string]any{"content_index": 0, "delta": d, "logprobs": []any{}})))
			}
			if b.rep.Stall {
				return stall()
			}
			if b.rep.Cut && len(b.rep.ToolCalls) == 0 {
				return false
			}
			send("response.output_text.done", item(map[string]any{"content_index": 0, "text": it.text, "logprobs": []any{}}))
			send("response.content_part.done", item(map[string]any{"content_index": 0, "part": textPart(it.text)}))
		case "function_call":
			args := it.call.Args
			if b.rep.Cut {
				args = args[:len(args)/2]
			}
			for _, d := range splitN(args, 3) {
				send("response.function_call_arguments.delta", item(delta(map[string]any{"delta": d})))
			}
			if b.rep.Cut {
				return false
			}
			send("response.function_call_arguments.done", item(map[string]any{"arguments": args}))
		}
		send("response.output_item.done", map[string]any{"output_index": i, "item": it.wire(true, st)})
	}
	if b.rep.Cut {
		return false
	}
	switch {
	case b.rep.Failed != nil:
		send("response.failed", map[string]any{"response": b.object(true)})
	case st == "incomplete":
		send("response.incomplete", map[string]any{"response": b.object(true)})
	default:
		send("response.completed", map[string]any{"response": b.object(true)})
	}
	return false
}

// splitN splits s into about n pieces, keeping UTF-8 sequences whole.
func splitN(s string, n int) []string {
	if s == "" {
		return nil
	}
	var out []string
	size := (len(s) + n - 1) / n
	for len(s) > 0 {
		k := min(size, len(s))
		for k < len(s) && (s[k]&0xC0) == 0x80 {
			k++
		}
		out = append(out, s[:k])
		s = s[k:]
	}
	return out
}

// Package geminitest is a scripted Gemini API server for tests: it speaks
// generativelanguage.googleapis.com v1beta generateContent and
// streamGenerateContent (as server-sent events with alt=sse, else as a JSON
// array), answers each request with the next Reply of its script, and
// records every request so tests can assert what the client sent.
//
//	srv := geminitest.New(t,
//		geminitest.Reply{ToolCalls: []geminitest.Call{{Name: "word_count", Args: `{"text":"a b"}`}}, Signatures: true},
//		geminitest.Reply{Text: "There are 2 words."},
//	)
//	client, _ := genai.NewClient(ctx, &genai.ClientConfig{
//		APIKey: "k", Backend: genai.BackendGeminiAPI,
//		HTTPOptions: genai.HTTPOptions{BaseURL: srv.URL},
//	})
//	// client.Models.GenerateContent(ctx, "gemini-3-pro-preview", ...)
//
// Every request to a generate method is recorded before it is checked.
// The server refuses what the real API refuses, with the real error body
// ({"error":{"code":400,"message":...,"status":"INVALID_ARGUMENT"}}), before
// it takes a reply from the script (a refused request uses none):
//
//   - no API key (neither an x-goog-api-key header nor a key query
//     parameter): 403 PERMISSION_DENIED;
//   - a body the API's JSON parser would not take: a field unknown to the
//     request, a content, a part, a function call or response, a function
//     declaration, the generation or the thinking config; a value of the
//     wrong type; a thought signature that is not base64; a part with two
//     kinds of data;
//   - no contents, a content without parts, a part without data, a role
//     other than "user" or "model", a function call or response without a
//     name, a function declaration with an invalid name, both parameters
//     and parametersJsonSchema, a response MIME type the API does not
//     allow;
//   - a function call turn not right after a user turn (or a function
//     response turn), a function response turn not right after a function
//     call turn, a function response turn whose number of function
//     responses is not the number of function calls of that call turn, or
//     one that answers no call of that turn (same name, and the same id
//     when the call had one);
//   - thought signatures, as Gemini 3 checks them: a signature this server
//     did not issue, or one sent back on another part than the one it came
//     on, is "Corrupted"; and when a model turn of the current turn (the
//     model turns after the last user content that is not only function
//     responses) is one this server sent with a signature, its first
//     function call must carry that signature, byte for byte, or the
//     request fails with the Gemini 3 "missing a thought_signature"
//     error. The documented dummy signatures
//     "skip_thought_signature_validator" and
//     "context_engineering_is_the_way_to_go" pass.
//
// A default reply is Text and ToolCalls, as a stream when the request is a
// streamGenerateContent: a thought summary (Thought) first, the text in a
// few chunks, the function calls whole in one chunk, and finishReason and
// the full usageMetadata on the last chunk. It can misbehave the way real
// servers do: Cut ends the stream before the chunk with the finishReason,
// Stall sends the first chunk and then nothing until the client leaves,
// and Status answers with an HTTP error ([ResourceExhausted],
// [Unavailable], [Internal], [InvalidArgument], [TooManyTokens]). Events is
// a whole event stream written as is. Check runs on the request before the
// reply is written.
//
// A request past the end of the script gets a 400 "script exhausted" in
// the API's error shape, which a test may rely on; it does not fail the
// test.
package geminitest

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"github.com/agcore/agrun/internal/testing/scripted"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Request is what the client sent. Model, Stream, Raw, Header and Query are
// set for every request to a generate method; the decoded fields are set
// as far as the body could be decoded.
type Request struct {
	Model  string // the model of the path, as "gemini-3-pro-preview" in models/gemini-3-pro-preview:generateContent
	Stream bool   // streamGenerateContent, not generateContent

	Contents []Content
	// SystemInstruction, Tools, ToolConfig and GenerationConfig are the
	// request's fields as sent (nil if absent).
	SystemInstruction json.RawMessage
	Tools             json.RawMessage
	ToolConfig        json.RawMessage
	GenerationConfig  json.RawMessage

	Raw    []byte      // the body as sent
	Header http.Header // all headers
	Query  url.Values  // the query parameters (alt=sse, key, ...)
}

// Content is one content of a request.
type Content struct {
	Role  string // as sent: "user", "model" or "" (which the API takes as "user")
	Parts []Part
}

// Part is one part of a content. The API's other kinds of data
// (inlineData, fileData, ...) are accepted but not decoded: see
// Request.Raw.
type Part struct {
	Text    string
	Thought bool
	// ThoughtSignature is the thoughtSignature as sent: base64 text ("" if
	// absent).
	ThoughtSignature string
	FunctionCall     *FunctionCall
	FunctionResponse *FunctionResponse
}

// FunctionCall is a functionCall part of a request.
type FunctionCall struct {
	ID, Name string
	Args     json.RawMessage // as sent (nil if absent)
}

// FunctionResponse is a functionResponse part of a request.
type FunctionResponse struct {
	ID, Name string
	Response json.RawMessage // as sent (nil if absent)
}

// Call is a function call in a scripted reply. Args is its arguments, a
// JSON object ("" is {}). An empty ID is left out of the reply, as the
// Gemini API usually does.
type Call struct{ ID, Name, Args string }

// Usage is the token usage of a scripted reply. The total is computed:
// prompt + candidates + thoughts (cached tokens are part of the prompt).
// Cached and thoughts counts are sent only when non-zero, as the API does.
type Usage struct {
	PromptTokens, CandidatesTokens, CachedTokens, ThoughtsTokens int
}

// Reply is one scripted answer. By default it is Thought, Text and
// ToolCalls, as a stream for streamGenerateContent, else as one JSON
// GenerateContentResponse.
type Reply struct {
	Text      string
	ToolCalls []Call
	// Thought, if set, is a thought summary: a part {"text":...,
	// "thought":true} before the others (streamed in its own chunks).
	Thought string
	// Signatures, as Gemini 3 does, attaches a thoughtSignature (bytes the
	// server makes up and remembers, see [Server.Signatures]) to the first
	// functionCall part, or, without calls, to the last part (in a stream:
	// to an empty text part on the last chunk). The server then requires
	// it back on that part: see the package doc.
	Signatures bool
	// FinishReason is the candidate's finishReason; by default "STOP",
	// which Gemini sends also with function calls.
	FinishReason string
	// Usage, if set, replaces the default usage (10 prompt, 5 candidates,
	// 15 total tokens).
	Usage *Usage
	// Cut ends a streamed reply before the chunk with the finishReason
	// (which, with calls, is the chunk with the calls), as a connection
	// that breaks off does. It has no effect on generateContent.
	Cut bool
	// Stall sends the first chunk of a streamed reply (without
	// finishReason) and then nothing until the client goes away; on
	// generateContent it sends nothing at all.
	Stall bool
	// Events, if set, is the reply instead: a whole text/event-stream body
	// written as is (a recorded stream, say), whatever the method.
	Events string

	// Status, if set, answers with this HTTP status and Body, as JSON (see
	// [ResourceExhausted] and the others for the API's real bodies).
	Status int
	Body   string
	// Header is set on the response of any reply.
	Header map[string]string

	// Check, if set, is called with the request before the reply is
	// written, to assert what the client sent. A refused request takes no
	// reply, so its Check does not run.
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

// ResourceExhausted is the API's 429 for a request over quota, with its
// QuotaFailure, Help and RetryInfo details (a retryDelay of 1s here, to
// keep tests fast; the real one is often tens of seconds).
func ResourceExhausted() Reply {
	return Reply{Status: http.StatusTooManyRequests, Body: errorBody(http.StatusTooManyRequests, "RESOURCE_EXHAUSTED",
		"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.",
		[]any{
			map[string]any{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []any{map[string]any{
				"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
				"quotaId":     "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
			}}},
			map[string]any{"@type": "type.googleapis.com/google.rpc.Help", "links": []any{map[string]any{
				"description": "Learn more about Gemini API quotas",
				"url":         "https://ai.google.dev/gemini-api/docs/rate-limits",
			}}},
			map[string]any{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"},
		})}
}

// Unavailable is the API's 503 for an overloaded model.
func Unavailable() Reply {
	return Reply{Status: http.StatusServiceUnavailable, Body: errorBody(http.StatusServiceUnavailable, "UNAVAILABLE",
		"The model is overloaded. Please try again later.", nil)}
}

// Internal is the API's 500.
func Internal() Reply {
	return Reply{Status: http.StatusInternalServerError, Body: errorBody(http.StatusInternalServerError, "INTERNAL",
		"An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting", nil)}
}

// InvalidArgument is a 400 INVALID_ARGUMENT with this message.
func InvalidArgument(msg string) Reply {
	return Reply{Status: http.StatusBadRequest, Body: errorBody(http.StatusBadRequest, "INVALID_ARGUMENT", msg, nil)}
}

// TooManyTokens is the API's 400 for a prompt of n tokens over the model's
// max.
func TooManyTokens(n, max int) Reply {
	return InvalidArgument(fmt.Sprintf("The input token count (%d) exceeds the maximum number of tokens allowed (%d).", n, max))
}

// errorBody is an error response as the API writes it: indented, HTML not
// escaped, a trailing newline.
func errorBody(code int, status, msg string, details []any) string {
	e := map[string]any{"code": code, "message": msg, "status": status}
	if details != nil {
		e["details"] = details
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	enc.Encode(map[string]any{"error": e})
	return b.String()
}

// The API's messages.
const (
	msgNoKey          = "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API."
	msgRole           = "Please use a valid role: user, model."
	msgCallTurn       = "Please ensure that function call turn comes immediately after a user turn or after a function response turn."
	msgResponseTurn   = "Please ensure that function response turn comes immediately after a function call turn."
	msgResponseCount  = "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn."
	msgInvalid        = "Request contains an invalid argument."
	msgCorrupted      = "Corrupted thought signature."
	msgMissingSigFmt  = "Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:%s` , position %d. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
	msgFunctionName   = "Invalid function name. Must start with a letter or an underscore. Must be alphameric (a-z, A-Z, 0-9), underscores (_), dots (.), colons (:), or dashes (-), with a maximum length of 64."
	msgMimeType       = "allowed mimetypes are `text/plain`, `application/json`, `application/xml`, `application/yaml` and `text/x.enum`."
	msgScriptExhaust  = "geminitest: script exhausted"
	protoTypePrefix   = "type.googleapis.com/google.ai.generativelanguage.v1beta."
	structType        = "type.googleapis.com/google.protobuf.Struct"
	defaultFinish     = "STOP"
	defaultPrompt     = 10
	defaultCandidates = 5
)

// Sentinels are the dummy thought signatures the API documents as passing
// its check, as sent (the JSON string).
var sentinels = map[string]bool{"skip_thought_signature_validator": true, "context_engineering_is_the_way_to_go": true}

// Server is the scripted server. It is safe for concurrent use.
type Server struct {
	URL string // base URL for the client, as http://127.0.0.1:PORT (the client appends /v1beta/models/...)
	srv *httptest.Server
	t   testing.TB

	mu     sync.Mutex
	script []Reply
	reqs   []Request
	served int
	n      uint64            // signatures and response ids made
	issued [][]byte          // signatures, in order
	sigs   map[string]string // signature bytes -> the key of its part (callKey, or "" for a text part)
	turns  map[string]map[string]bool
}

// New starts a server with a script; it stops when the test ends.
func New(t testing.TB, script ...Reply) *Server {
	s := &Server{script: script, t: t, sigs: map[string]string{}, turns: map[string]map[string]bool{}}
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

// Requests returns the requests received so far, refused ones included.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Signatures returns the thought signatures the server has sent so far, in
// order.
func (s *Server) Signatures() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]byte, len(s.issued))
	for i, b := range s.issued {
		out[i] = append([]byte(nil), b...)
	}
	return out
}

func writeError(w http.ResponseWriter, code int, status, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(code)
	io.WriteString(w, errorBody(code, status, msg, nil))
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1beta/models/")
	model, method, _ := strings.Cut(rest, ":")
	if !ok || model == "" || strings.Contains(model, "/") || (method != "generateContent" && method != "streamGenerateContent") || r.Method != http.MethodPost {
		writeError(w, http.StatusNotFound, "NOT_FOUND", "geminitest: no such method: "+r.Method+" "+r.URL.Path)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	req := Request{Model: model, Stream: method == "streamGenerateContent", Raw: raw, Header: r.Header.Clone(), Query: r.URL.Query()}
	p := parse(&req)

	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	key := r.Header.Get("x-goog-api-key")
	if key == "" {
		key = req.Query.Get("key")
	}
	msg := ""
	switch {
	case key == "":
		s.mu.Unlock()
		writeError(w, http.StatusForbidden, "PERMISSION_DENIED", msgNoKey)
		return
	case len(p.jsonErrs) > 0:
		msg = strings.Join(p.jsonErrs, "\n")
	case len(p.fieldErrs) > 0:
		msg = "* " + strings.Join(p.fieldErrs, "\n* ") + "\n"
	default:
		if msg = p.turns(); msg == "" {
			msg = s.checkSignatures(p)
		}
	}
	if msg != "" {
		s.mu.Unlock()
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", msg)
		return
	}
	var rep Reply
	ok = s.served < len(s.script)
	if ok {
		rep = s.script[s.served]
		s.served++
	}
	var sig []byte
	if ok && rep.Signatures && rep.Status == 0 && rep.Events == "" {
		sig = s.issue(rep)
	}
	s.n++
	respID := responseID(s.n)
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", msgScriptExhaust)
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
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		w.WriteHeader(rep.Status)
		io.WriteString(w, rep.Body)
		return
	case rep.Events != "":
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, rep.Events)
		return
	}
	chunks := s.render(rep, sig, model, respID, req.Stream)
	if !req.Stream {
		if rep.Stall {
			<-r.Context().Done()
			gone()
			return
		}
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		b, _ := json.MarshalIndent(chunks[0], "", "  ")
		w.Write(append(b, '\n'))
		return
	}
	if rep.Stall {
		chunks = chunks[:1]
		chunks[0].Candidates[0].FinishReason = ""
		chunks[0].UsageMetadata = interimUsage(rep.Usage)
	} else if rep.Cut {
		chunks = chunks[:len(chunks)-1]
	}
	fl, _ := w.(http.Flusher)
	sse := req.Query.Get("alt") == "sse"
	if sse {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Disposition", "attachment")
	} else {
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		io.WriteString(w, "[")
	}
	for i, c := range chunks {
		b, _ := json.Marshal(c)
		switch {
		case sse:
			fmt.Fprintf(w, "data: %s\r\n\r\n", b)
		case i > 0:
			fmt.Fprintf(w, ",\r\n%s", b)
		default:
			w.Write(b)
		}
		if fl != nil {
			fl.Flush()
		}
	}
	if rep.Stall {
		<-r.Context().Done()
		gone()
		return
	}
	if !sse && !rep.Cut {
		io.WriteString(w, "]")
	}
}

// responseID is a responseId, unique per response, in the API's style.
func responseID(n uint64) string {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, n)
	rand.Read(b[8:])
	return base64.RawURLEncoding.EncodeToString(b)
}

// issue makes up the signature of a reply and remembers where it goes. The
// caller holds s.mu.
func (s *Server) issue(rep Reply) []byte {
	s.n++
	sig := make([]byte, 40)
	copy(sig, "\x12\x2egt")
	binary.BigEndian.PutUint64(sig[4:], s.n)
	rand.Read(sig[12:])
	s.issued = append(s.issued, sig)
	if len(rep.ToolCalls) == 0 {
		s.sigs[string(sig)] = ""
		return sig
	}
	s.sigs[string(sig)] = callKey(rep.ToolCalls[0].Name, argsOf(rep.ToolCalls[0].Args))
	fp := s.fingerprint(rep.ToolCalls)
	if s.turns[fp] == nil {
		s.turns[fp] = map[string]bool{}
	}
	s.turns[fp][string(sig)] = true
	return sig
}

func argsOf(a string) json.RawMessage {
	if strings.TrimSpace(a) == "" {
		return json.RawMessage("{}")
	}
	return json.RawMessage(a)
}

// canon is a JSON value in one spelling (object keys sorted, no spaces).
func canon(raw json.RawMessage) string {
	var v any
	if len(bytes.TrimSpace(raw)) == 0 || json.Unmarshal(raw, &v) != nil || v == nil {
		return "{}"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// callKey names a function call by what the client must send back: its
// name and arguments (not its id, which a client may add).
func callKey(name string, args json.RawMessage) string { return name + "\x00" + canon(args) }

func (s *Server) fingerprint(calls []Call) string {
	var keys []string
	for _, c := range calls {
		keys = append(keys, callKey(c.Name, argsOf(c.Args)))
	}
	return strings.Join(keys, "\x01")
}

// wire types of a response.
type (
	wireResp struct {
		Candidates    []wireCand `json:"candidates"`
		UsageMetadata *wireUsage `json:"usageMetadata,omitempty"`
		ModelVersion  string     `json:"modelVersion"`
		ResponseID    string     `json:"responseId"`
	}
	wireCand struct {
		Content      wireContent `json:"content"`
		FinishReason string      `json:"finishReason,omitempty"`
		Index        int         `json:"index"`
	}
	wireContent struct {
		Parts []wirePart `json:"parts"`
		Role  string     `json:"role"`
	}
	wirePart struct {
		Text             *string   `json:"text,omitempty"`
		Thought          bool      `json:"thought,omitempty"`
		FunctionCall     *wireCall `json:"functionCall,omitempty"`
		ThoughtSignature []byte    `json:"thoughtSignature,omitempty"`
	}
	wireCall struct {
		ID   string          `json:"id,omitempty"`
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	}
	wireUsage struct {
		PromptTokenCount        int            `json:"promptTokenCount"`
		CandidatesTokenCount    int            `json:"candidatesTokenCount,omitempty"`
		TotalTokenCount         int            `json:"totalTokenCount"`
		CachedContentTokenCount int            `json:"cachedContentTokenCount,omitempty"`
		PromptTokensDetails     []wireModality `json:"promptTokensDetails,omitempty"`
		ThoughtsTokenCount      int            `json:"thoughtsTokenCount,omitempty"`
	}
	wireModality struct {
		Modality   string `json:"modality"`
		TokenCount int    `json:"tokenCount"`
	}
)

func (u *Usage) wire() *wireUsage {
	if u == nil {
		u = &Usage{PromptTokens: defaultPrompt, CandidatesTokens: defaultCandidates}
	}
	return &wireUsage{
		PromptTokenCount:        u.PromptTokens,
		CandidatesTokenCount:    u.CandidatesTokens,
		TotalTokenCount:         u.PromptTokens + u.CandidatesTokens + u.ThoughtsTokens,
		CachedContentTokenCount: u.CachedTokens,
		ThoughtsTokenCount:      u.ThoughtsTokens,
		PromptTokensDetails:     []wireModality{{"TEXT", u.PromptTokens}},
	}
}

// interimUsage is the usage of a chunk before the last: the prompt only.
func interimUsage(u *Usage) *wireUsage {
	w := u.wire()
	return &wireUsage{PromptTokenCount: w.PromptTokenCount, TotalTokenCount: w.PromptTokenCount, PromptTokensDetails: w.PromptTokensDetails}
}

func text(s string) *string { return &s }

// render is a reply as the API would send it: one response for
// generateContent, else its chunks (the last with the finishReason).
func (s *Server) render(rep Reply, sig []byte, model, id string, stream bool) []wireResp {
	finish := rep.FinishReason
	if finish == "" {
		finish = defaultFinish
	}
	var calls []wirePart
	for _, c := range rep.ToolCalls {
		args := argsOf(c.Args)
		if !json.Valid(args) {
			s.t.Errorf("geminitest: Call %s: Args %q is not JSON", c.Name, c.Args)
			args = json.RawMessage("{}")
		}
		calls = append(calls, wirePart{FunctionCall: &wireCall{ID: c.ID, Name: c.Name, Args: args}})
	}
	if len(calls) > 0 {
		calls[0].ThoughtSignature = sig
	}
	resp := func(parts []wirePart, last bool) wireResp {
		r := wireResp{Candidates: []wireCand{{Content: wireContent{Parts: parts, Role: "model"}}}, ModelVersion: model, ResponseID: id}
		if last {
			r.Candidates[0].FinishReason = finish
			r.UsageMetadata = rep.Usage.wire()
		} else {
			r.UsageMetadata = interimUsage(rep.Usage)
		}
		return r
	}
	if !stream {
		var parts []wirePart
		if rep.Thought != "" {
			parts = append(parts, wirePart{Text: text(rep.Thought), Thought: true})
		}
		if rep.Text != "" || len(calls) == 0 {
			parts = append(parts, wirePart{Text: text(rep.Text)})
		}
		parts = append(parts, calls...)
		if len(calls) == 0 {
			parts[len(parts)-1].ThoughtSignature = sig
		}
		return []wireResp{resp(parts, true)}
	}
	var parts [][]wirePart
	for _, t := range splitN(rep.Thought, 2) {
		parts = append(parts, []wirePart{{Text: text(t), Thought: true}})
	}
	for _, t := range splitN(rep.Text, 3) {
		parts = append(parts, []wirePart{{Text: text(t)}})
	}
	switch {
	case len(calls) > 0:
		parts = append(parts, calls)
	case sig != nil:
		parts = append(parts, []wirePart{{Text: text(""), ThoughtSignature: sig}})
	case rep.Text == "":
		parts = append(parts, []wirePart{{Text: text("")}})
	}
	var out []wireResp
	for i, p := range parts {
		out = append(out, resp(p, i == len(parts)-1))
	}
	return out
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

// The fields the API's JSON parser knows, camelCase (it takes snake_case
// too), as google.golang.org/genai sends them to the Gemini API.
var (
	knownTop = set("model", "contents", "tools", "toolConfig", "safetySettings", "systemInstruction", "generationConfig",
		"cachedContent", "serviceTier", "store", "labels", "continuationToken")
	knownContent  = set("role", "parts")
	knownPart     = set("text", "inlineData", "functionCall", "functionResponse", "fileData", "executableCode", "codeExecutionResult", "toolCall", "toolResponse", "thought", "thoughtSignature", "videoMetadata", "partMetadata", "mediaResolution", "audioTranscription", "mediaProcessing", "speechMetadata")
	partData      = []string{"text", "inlineData", "functionCall", "functionResponse", "fileData", "executableCode", "codeExecutionResult", "toolCall", "toolResponse"}
	knownCall     = set("id", "name", "args")
	knownResponse = set("id", "name", "response", "parts", "willContinue", "scheduling")
	knownDecl     = set("name", "description", "behavior", "parameters", "parametersJsonSchema", "response", "responseJsonSchema")
	knownGen      = set("stopSequences", "responseMimeType", "responseSchema", "responseJsonSchema", "responseModalities", "candidateCount", "maxOutputTokens",
		"temperature", "topP", "topK", "seed", "presencePenalty", "frequencyPenalty", "responseLogprobs", "logprobs", "enableEnhancedCivicAnswers",
		"speechConfig", "thinkingConfig", "imageConfig", "mediaResolution", "audioTranscriptionConfig", "enableAffectiveDialog")
	knownThinking  = set("includeThoughts", "thinkingBudget", "thinkingLevel")
	thinkingLevels = set("THINKING_LEVEL_UNSPECIFIED", "MINIMAL", "LOW", "MEDIUM", "HIGH")
	mimeTypes      = set("text/plain", "application/json", "application/xml", "application/yaml", "text/x.enum")
	functionName   = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}$`)
)

func set(names ...string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

// camel is a proto field name in JSON's spelling: function_call is
// functionCall.
func camel(k string) string {
	if !strings.Contains(k, "_") || strings.HasPrefix(k, "_") {
		return k
	}
	parts := strings.Split(k, "_")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}

// parsed is a request body as the API's parser sees it.
type parsed struct {
	jsonErrs  []string // the parser's, first
	fieldErrs []string // the field checks', without "* "
	contents  []content
}

type content struct {
	role  string // "user" or "model" ("" is "user")
	parts []part
}

type part struct {
	Part
	sig      []byte
	sentinel bool
}

func (p *parsed) badJSON(format string, a ...any) {
	p.jsonErrs = append(p.jsonErrs, fmt.Sprintf(format, a...))
}

func (p *parsed) bad(path, msg string) {
	p.fieldErrs = append(p.fieldErrs, "GenerateContentRequest."+path+": "+msg)
}

func (p *parsed) badValue(at, typ string, raw json.RawMessage) {
	p.badJSON("Invalid value at '%s' (%s), %s", at, typ, bytes.TrimSpace(raw))
}

// object decodes a JSON object of these known fields, with keys in
// camelCase and null values left out; unknown fields are errors at at.
func (p *parsed) object(raw json.RawMessage, at, typ string, known map[string]bool) (map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		if at == "" {
			p.badJSON("Invalid JSON payload received. %s", jsonProblem(err))
		} else {
			p.badValue(at, typ, raw)
		}
		return nil, false
	}
	out := map[string]json.RawMessage{}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := m[k]
		ck := camel(k)
		if known != nil && !known[ck] {
			if at == "" {
				p.badJSON("Invalid JSON payload received. Unknown name %q: Cannot find field.", k)
			} else {
				p.badJSON("Invalid JSON payload received. Unknown name %q at '%s': Cannot find field.", k, at)
			}
			continue
		}
		if string(bytes.TrimSpace(v)) == "null" {
			continue
		}
		out[ck] = v
	}
	return out, true
}

func jsonProblem(err error) string {
	if err == nil {
		return "Expected an object."
	}
	return "Unexpected token."
}

func (p *parsed) array(raw json.RawMessage, at string) ([]json.RawMessage, bool) {
	var a []json.RawMessage
	if err := json.Unmarshal(raw, &a); err != nil {
		p.badJSON("Invalid JSON payload received. Unknown name %q at '%s': Proto field is not repeating, cannot start list.", at, at)
		return nil, false
	}
	return a, true
}

func (p *parsed) str(raw json.RawMessage, at string) string {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		p.badValue(at, "TYPE_STRING", raw)
	}
	return s
}

func (p *parsed) boolean(raw json.RawMessage, at string) bool {
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		p.badValue(at, "TYPE_BOOL", raw)
	}
	return b
}

// integer takes a JSON number or a string of one, as proto JSON does.
func (p *parsed) integer(raw json.RawMessage, at string) {
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		if _, err := strconv.ParseInt(n.String(), 10, 32); err == nil {
			return
		}
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if _, err := strconv.ParseInt(s, 10, 32); err == nil {
			return
		}
	}
	p.badValue(at, "TYPE_INT32", raw)
}

// parse decodes req.Raw into req and into what the checks need.
func parse(req *Request) *parsed {
	p := &parsed{}
	raw := req.Raw
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	top, ok := p.object(raw, "", "GenerateContentRequest", knownTop)
	if !ok {
		return p
	}
	req.SystemInstruction, req.Tools, req.ToolConfig, req.GenerationConfig = top["systemInstruction"], top["tools"], top["toolConfig"], top["generationConfig"]
	if raw, ok := top["contents"]; ok {
		if list, ok := p.array(raw, "contents"); ok {
			for i, c := range list {
				p.content(req, c, i)
			}
		}
	}
	if len(p.contents) == 0 && len(p.jsonErrs) == 0 {
		p.bad("contents", "contents is not specified")
	}
	if raw, ok := top["systemInstruction"]; ok {
		p.object(raw, "system_instruction", protoTypePrefix+"Content", knownContent)
	}
	if raw, ok := top["tools"]; ok {
		p.tools(raw)
	}
	if raw, ok := top["generationConfig"]; ok {
		p.generationConfig(raw)
	}
	return p
}

func (p *parsed) content(req *Request, raw json.RawMessage, i int) {
	at := fmt.Sprintf("contents[%d]", i)
	m, ok := p.object(raw, at, protoTypePrefix+"Content", knownContent)
	if !ok {
		return
	}
	var c Content
	if r, ok := m["role"]; ok {
		c.Role = p.str(r, at+".role")
	}
	in := content{role: c.Role}
	var list []json.RawMessage
	if r, ok := m["parts"]; ok {
		list, _ = p.array(r, at+".parts")
	}
	if len(list) == 0 {
		p.bad(at+".parts", "contents.parts must not be empty.")
	}
	for j, r := range list {
		pt := p.part(r, fmt.Sprintf("%s.parts[%d]", at, j))
		c.Parts = append(c.Parts, pt.Part)
		in.parts = append(in.parts, pt)
	}
	req.Contents = append(req.Contents, c)
	p.contents = append(p.contents, in)
}

func (p *parsed) part(raw json.RawMessage, at string) part {
	var pt part
	m, ok := p.object(raw, at, protoTypePrefix+"Part", knownPart)
	if !ok {
		return pt
	}
	var data []string
	for _, k := range partData {
		if _, ok := m[k]; ok {
			data = append(data, k)
		}
	}
	if len(data) > 1 {
		p.badJSON("Invalid JSON payload received. Oneof field 'data' is already set. Cannot set '%s'", data[1])
	}
	if r, ok := m["text"]; ok {
		pt.Text = p.str(r, at+".text")
	}
	if r, ok := m["thought"]; ok {
		pt.Thought = p.boolean(r, at+".thought")
	}
	if r, ok := m["thoughtSignature"]; ok {
		pt.ThoughtSignature = p.str(r, at+".thought_signature")
		if sentinels[pt.ThoughtSignature] {
			pt.sentinel = true
		} else if b, ok := decode64(pt.ThoughtSignature); ok {
			pt.sig = b
		} else {
			p.badJSON("Invalid value at '%s.thought_signature' (TYPE_BYTES), Base64 decoding failed for %q", at, pt.ThoughtSignature)
		}
	}
	if r, ok := m["functionCall"]; ok {
		pt.FunctionCall = &FunctionCall{}
		if f, ok := p.object(r, at+".function_call", protoTypePrefix+"FunctionCall", knownCall); ok {
			if v, ok := f["id"]; ok {
				pt.FunctionCall.ID = p.str(v, at+".function_call.id")
			}
			if v, ok := f["name"]; ok {
				pt.FunctionCall.Name = p.str(v, at+".function_call.name")
			}
			if v, ok := f["args"]; ok {
				pt.FunctionCall.Args = v
				p.object(v, at+".function_call.args", structType, nil)
			}
		}
		if pt.FunctionCall.Name == "" {
			p.bad(at+".function_call.name", "Name cannot be empty.")
		}
	}
	if r, ok := m["functionResponse"]; ok {
		pt.FunctionResponse = &FunctionResponse{}
		if f, ok := p.object(r, at+".function_response", protoTypePrefix+"FunctionResponse", knownResponse); ok {
			if v, ok := f["id"]; ok {
				pt.FunctionResponse.ID = p.str(v, at+".function_response.id")
			}
			if v, ok := f["name"]; ok {
				pt.FunctionResponse.Name = p.str(v, at+".function_response.name")
			}
			if v, ok := f["response"]; ok {
				pt.FunctionResponse.Response = v
				p.object(v, at+".function_response.response", structType, nil)
			}
		}
		if pt.FunctionResponse.Name == "" {
			p.bad(at+".function_response.name", "Name cannot be empty.")
		}
	}
	if len(data) == 0 && pt.ThoughtSignature == "" {
		p.bad(at+".data", "required oneof field 'data' must have one initialized field")
	}
	return pt
}

// decode64 takes base64 as proto JSON does: standard or URL alphabet,
// padded or not.
func decode64(s string) ([]byte, bool) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, true
		}
	}
	return nil, false
}

func (p *parsed) tools(raw json.RawMessage) {
	list, ok := p.array(raw, "tools")
	if !ok {
		return
	}
	for i, r := range list {
		at := fmt.Sprintf("tools[%d]", i)
		tool, ok := p.object(r, at, protoTypePrefix+"Tool", nil)
		if !ok {
			continue
		}
		decls, ok := tool["functionDeclarations"]
		if !ok {
			continue
		}
		dl, ok := p.array(decls, at+".function_declarations")
		if !ok {
			continue
		}
		for k, d := range dl {
			dat := fmt.Sprintf("%s.function_declarations[%d]", at, k)
			m, ok := p.object(d, dat, protoTypePrefix+"FunctionDeclaration", knownDecl)
			if !ok {
				continue
			}
			var name string
			if v, ok := m["name"]; ok {
				name = p.str(v, dat+".name")
			}
			if !functionName.MatchString(name) {
				p.bad(dat+".name", msgFunctionName)
			}
			if v, ok := m["parameters"]; ok {
				p.object(v, dat+".parameters", protoTypePrefix+"Schema", nil)
				if _, both := m["parametersJsonSchema"]; both {
					p.bad(dat+".parameters_json_schema", "parameters_json_schema and parameters are mutually exclusive.")
				}
			}
		}
	}
}

func (p *parsed) generationConfig(raw json.RawMessage) {
	m, ok := p.object(raw, "generation_config", protoTypePrefix+"GenerationConfig", knownGen)
	if !ok {
		return
	}
	if v, ok := m["responseMimeType"]; ok {
		if mt := p.str(v, "generation_config.response_mime_type"); mt != "" && !mimeTypes[mt] {
			p.bad("generation_config.response_mime_type", msgMimeType)
		}
	}
	v, ok := m["thinkingConfig"]
	if !ok {
		return
	}
	at := "generation_config.thinking_config"
	tc, ok := p.object(v, at, protoTypePrefix+"ThinkingConfig", knownThinking)
	if !ok {
		return
	}
	if v, ok := tc["includeThoughts"]; ok {
		p.boolean(v, at+".include_thoughts")
	}
	if v, ok := tc["thinkingBudget"]; ok {
		p.integer(v, at+".thinking_budget")
	}
	if v, ok := tc["thinkingLevel"]; ok {
		var level string
		var n int
		if json.Unmarshal(v, &level) == nil {
			if !thinkingLevels[strings.ToUpper(level)] {
				p.badValue(at+".thinking_level", protoTypePrefix+"ThinkingConfig.ThinkingLevel", v)
			}
		} else if json.Unmarshal(v, &n) != nil || n < 0 || n >= len(thinkingLevels) {
			p.badValue(at+".thinking_level", protoTypePrefix+"ThinkingConfig.ThinkingLevel", v)
		}
	}
}

func (c content) calls() []part {
	var out []part
	for _, p := range c.parts {
		if p.FunctionCall != nil {
			out = append(out, p)
		}
	}
	return out
}

func (c content) responses() []part {
	var out []part
	for _, p := range c.parts {
		if p.FunctionResponse != nil {
			out = append(out, p)
		}
	}
	return out
}

func (c content) isModel() bool { return c.role == "model" }

// turns checks the roles and the order of function calls and responses,
// and returns the API's message for the first problem.
func (p *parsed) turns() string {
	for _, c := range p.contents {
		if c.role != "" && c.role != "user" && c.role != "model" {
			return msgRole
		}
	}
	for i, c := range p.contents {
		if len(c.calls()) > 0 && c.isModel() {
			if i == 0 || p.contents[i-1].isModel() {
				return msgCallTurn
			}
		}
		resps := c.responses()
		if len(resps) == 0 {
			continue
		}
		if i == 0 || !p.contents[i-1].isModel() || len(p.contents[i-1].calls()) == 0 {
			return msgResponseTurn
		}
		calls := p.contents[i-1].calls()
		if len(resps) != len(calls) {
			return msgResponseCount
		}
		used := make([]bool, len(calls))
	next:
		for _, r := range resps {
			for k, call := range calls {
				fc := call.FunctionCall
				if !used[k] && fc.Name == r.FunctionResponse.Name && (fc.ID == "" || fc.ID == r.FunctionResponse.ID) {
					used[k] = true
					continue next
				}
			}
			return msgInvalid
		}
	}
	return ""
}

// checkSignatures checks the thought signatures the request sends back.
// The caller holds s.mu.
func (s *Server) checkSignatures(p *parsed) string {
	start := -1 // the current turn begins after the last user content that is not only function responses
	for i, c := range p.contents {
		if c.isModel() {
			continue
		}
		for _, pt := range c.parts {
			if pt.FunctionResponse == nil {
				start = i
				break
			}
		}
	}
	for i, c := range p.contents {
		for _, pt := range c.parts {
			if pt.sig == nil {
				continue
			}
			key, ok := s.sigs[string(pt.sig)]
			switch {
			case !ok:
				return msgCorrupted
			case key == "" && (pt.FunctionCall != nil || pt.FunctionResponse != nil):
				return msgCorrupted
			case key != "" && (pt.FunctionCall == nil || callKey(pt.FunctionCall.Name, pt.FunctionCall.Args) != key):
				return msgCorrupted
			}
		}
		calls := c.calls()
		if !c.isModel() || i <= start || len(calls) == 0 {
			continue
		}
		var keys []string
		for _, cp := range calls {
			keys = append(keys, callKey(cp.FunctionCall.Name, cp.FunctionCall.Args))
		}
		want := s.turns[strings.Join(keys, "\x01")]
		if want == nil {
			continue // not a turn this server signed
		}
		first := calls[0]
		switch {
		case first.sentinel:
		case first.ThoughtSignature == "":
			return fmt.Sprintf(msgMissingSigFmt, first.FunctionCall.Name, i+1)
		case !want[string(first.sig)]:
			return msgCorrupted
		}
	}
	return ""
}

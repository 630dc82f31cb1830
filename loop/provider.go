package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/agcore/agrun/registry"
)

// Provider is one model API, as the loop talks to it: it makes one
// request and returns the model's reply. The loop does everything else
// (history, tools, retries, the idle timeout, caps, trimming, schemas),
// so that every API behaves the same. The adapters of this module are
// packages of their own, so that a program links only the SDKs it uses:
// loop/chat (OpenAI Chat Completions: OpenAI, DeepSeek, OpenRouter,
// vLLM, Ollama, ...), loop/responses (OpenAI Responses),
// loop/anthropic (Anthropic Messages) and loop/gemini (Gemini
// generateContent).
//
// A Provider must be safe for concurrent use: the Cycles of a server, or
// of a cluster worker, share one. It keeps no conversation state between
// requests.
type Provider interface {
	// Info describes the provider; it does not change.
	Info() ProviderInfo
	// Request makes one attempt of req, without retrying: the loop
	// retries. The reply is complete only when the API's end marker
	// arrived (finish_reason, message_stop, response.completed, a
	// finishReason); a stream that ends before it is an
	// *IncompleteStreamError, with the reply as far as it came (its
	// Content is kept as an interrupted message when the run was
	// cancelled, never run or saved as complete). Errors: *APIError for
	// what the provider refused (HTTP status, or an error event in the
	// stream), *TransportError when it could not be reached,
	// ErrBadResponse (wrapped) for a reply that cannot be used (not JSON,
	// larger than req.MaxReplyBytes), and ctx's error when ctx ended.
	Request(ctx context.Context, req *Request) (*Reply, error)
}

// ProviderInfo describes a Provider.
type ProviderInfo struct {
	// API is the wire API: "chat", "responses", "anthropic", "gemini"
	// (or a name of the embedder's own). Reasoning is sent back only to
	// the API, endpoint and model that produced it (see Reasoning).
	API string
	// System is the provider as OpenTelemetry's gen_ai.provider.name
	// names it: "openai", "anthropic", "gcp.gemini", "deepseek", ...
	System string
	// Model is the model requested.
	Model string
	// Endpoint is the base URL requests go to, without credentials
	// (server.address and server.port of telemetry come from it).
	Endpoint string
	// StructuredOutput says the API takes a response schema
	// (Request.Schema). Without it, the loop asks for the schema in the
	// system prompt instead (SchemaPrompt).
	StructuredOutput bool
}

// Request is one model request as the loop built it: the messages are
// the ones to send (trimmed to the context window, reasoning of other
// providers removed, an interrupted reply already ending in its note,
// tool-call arguments valid JSON).
type Request struct {
	// System is the system prompt ("" for none).
	System string
	// Messages is the conversation to send, oldest first. Every
	// assistant tool call is answered by a tool message after it.
	Messages []Message
	// Tools are the tools the model may call.
	Tools []registry.Definition
	// Schema, if set, is the JSON Schema the final answer must match
	// (only when ProviderInfo.StructuredOutput).
	Schema *ResponseFormat
	// Stream asks for a streamed reply: OnDelta is then called for every
	// event that arrives (with an empty Delta for events that carry no
	// text), in the goroutine that called Request.
	Stream  bool
	OnDelta func(Delta)
	// Trimmed says Messages is less than the history (trimmed to the
	// context window): a provider that keeps the conversation on its
	// side (Responses with store) must send these messages, not continue
	// from what it keeps, or the request would not shrink.
	Trimmed bool
	// MaxReplyBytes bounds what the reply may make the provider hold:
	// text, reasoning, tool-call names and arguments, opaque reasoning
	// parts, plus an allowance per streamed event (EventCost). Past it
	// the request fails with ErrBadResponse.
	MaxReplyBytes int
}

// EventCost is what a Provider charges against Request.MaxReplyBytes
// for each streamed event, besides the bytes it keeps, so that a stream
// of tiny events is bounded too.
const EventCost = 64

// ResponseFormat is a response schema as Request.Schema sends it.
type ResponseFormat struct {
	Name   string          // "final_answer"
	Schema json.RawMessage // the JSON Schema
	Strict bool            // the schema is in OpenAI's strict subset
}

// Delta is a fragment of a streamed reply: its text, or its readable
// reasoning (shown only with --show-reasoning).
type Delta struct {
	Text      string
	Reasoning string
}

// Reply is a model's answer to one Request.
type Reply struct {
	// ID is the provider's id of the response ("" if it gave none).
	ID string
	// Model is the model the provider says answered.
	Model string
	// Content is the reply's text.
	Content string
	// Calls are the tool calls it asks for, in order (ids may be empty:
	// the loop makes them unique).
	Calls []ToolCall
	// FinishReason in Chat Completions' words: "stop", "length",
	// "tool_calls", "content_filter" (adapters map theirs onto these).
	FinishReason string
	// Usage is the tokens the request cost.
	Usage Usage
	// Reasoning is what must go back with this reply for the model to
	// keep its reasoning across tool calls; nil if none. The loop stamps
	// it with the provider's API, endpoint and model.
	Reasoning *Reasoning
}

// Reasoning is the model's reasoning attached to the assistant message
// it came with. Text is what a person may read (with --show-reasoning);
// Opaque is the adapter's own record of what the API needs back
// (reasoning items with encrypted content, thinking blocks with their
// signatures, thought signatures), sent back unchanged. Both are sent
// back only to the API, endpoint and model that produced them: a
// conversation continued elsewhere keeps the text and tool calls of its
// replies and drops their reasoning.
type Reasoning struct {
	API      string          `json:"api"`
	Endpoint string          `json:"endpoint,omitempty"`
	Model    string          `json:"model,omitempty"`
	Text     string          `json:"text,omitempty"`
	Opaque   json.RawMessage `json:"opaque,omitempty"`
}

// MaxReasoningBytes bounds a reply's Reasoning (Text and Opaque): a
// provider that sends more fails the request with ErrBadResponse.
const MaxReasoningBytes = 4 << 20

// sameSource reports whether reasoning r may be sent to a provider
// described by info.
func (r *Reasoning) sameSource(info ProviderInfo) bool {
	return r != nil && r.API == info.API && r.Endpoint == info.Endpoint && r.Model == info.Model
}

// IncompleteStreamError is a stream that ended before the API's end
// marker: the reply may be cut anywhere, a tool call mid-arguments
// included. It matches ErrIncompleteStream and ErrBadResponse; the loop
// retries it like a 5xx.
type IncompleteStreamError struct {
	// Marker is the end marker that did not arrive ("finish_reason",
	// "message_stop", "response.completed", "finishReason").
	Marker string
	// Empty: the stream carried no event at all.
	Empty bool
	// Err is the read error that ended the stream, if any (a reset
	// connection, say).
	Err error
}

// Error implements error.
func (e *IncompleteStreamError) Error() string {
	msg := fmt.Sprintf("the stream from the provider broke off before the reply was complete (no %s)", e.Marker)
	if e.Empty {
		msg = "the stream from the provider ended without any event"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the read error that ended the stream.
func (e *IncompleteStreamError) Unwrap() error { return e.Err }

// Is reports whether target is ErrIncompleteStream or ErrBadResponse.
func (e *IncompleteStreamError) Is(target error) bool {
	return target == ErrIncompleteStream || target == ErrBadResponse
}

// TransportError is a provider that could not be reached, or a
// connection that broke (KindTransport; retried).
type TransportError struct {
	Err error
	// Status is the HTTP status the provider had answered with before the
	// connection broke (a stream cut in the middle); 0: it never
	// answered (not reached, or the connection broke before a status).
	Status int
}

// Error implements error: "cannot reach provider: …", or for a
// connection that broke after the provider answered, says so.
func (e *TransportError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("the connection to the provider broke during its reply (it had answered %d): %v", e.Status, e.Err)
	}
	return "cannot reach provider: " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *TransportError) Unwrap() error { return e.Err }

// errOpaqueTooLarge is returned (wrapped in ErrBadResponse) for a reply
// whose reasoning is over MaxReasoningBytes.
var errOpaqueTooLarge = errors.New("reasoning too large")

// checkReply bounds what a provider returned and stamps its reasoning.
func checkReply(rep *Reply, info ProviderInfo) error {
	if r := rep.Reasoning; r != nil {
		if len(r.Text)+len(r.Opaque) > MaxReasoningBytes {
			return fmt.Errorf("%w: %w: %d bytes, more than %d", ErrBadResponse, errOpaqueTooLarge, len(r.Text)+len(r.Opaque), MaxReasoningBytes)
		}
		if len(r.Opaque) > 0 && !json.Valid(r.Opaque) {
			return fmt.Errorf("%w: the provider adapter's reasoning is not JSON", ErrBadResponse)
		}
		if r.Text == "" && len(r.Opaque) == 0 {
			rep.Reasoning = nil
		} else {
			r.API, r.Endpoint, r.Model = info.API, info.Endpoint, info.Model
		}
	}
	return nil
}

// retryAfter is the wait the provider asked for with err: its
// retry-after-ms or Retry-After header, else APIError.RetryAfter (what
// an API says in its body, as Gemini's RetryInfo). ok is false when it
// asked for none.
func retryAfter(err error) (time.Duration, bool) {
	var api *APIError
	if !errors.As(err, &api) {
		return 0, false
	}
	if d, ok := headerRetryAfter(api.Header); ok {
		return d, true
	}
	if api.RetryAfter > 0 {
		return api.RetryAfter, true
	}
	return 0, false
}

// shouldRetryHeader is the provider's x-should-retry verdict, if any.
func shouldRetryHeader(h http.Header) (retry, ok bool) {
	switch h.Get("x-should-retry") {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

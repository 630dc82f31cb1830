package loop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/agcore/agrun/internal/textsafe"
)

// Run errors. Every error a Submit method returns matches one of these with
// errors.Is, or is an *APIError (errors.As), a context error
// (errors.Is(err, context.Canceled) or context.DeadlineExceeded, also for
// Config.RequestTimeout), or a failure to reach the provider; KindOf
// tells them apart.
var (
	// ErrMaxTurns: the run made Config.MaxTurns model requests and the last
	// reply still asked for tools. The history keeps every message.
	ErrMaxTurns = errors.New("loop: maximum number of turns reached")
	// ErrRepeatedCall: the model made the same call (same tool, same
	// arguments) in RepeatLimit+1 turns in a row. It was told after
	// RepeatLimit; the repeated turn's calls are answered "cancelled".
	ErrRepeatedCall = errors.New("loop: the model repeated the same tool call")
	// ErrBusy: a Submit method was called while another run of the same
	// Cycle was in progress.
	ErrBusy = errors.New("loop: cycle is busy with another run")
	// ErrBadResponse: the provider's reply could not be used (no choices,
	// an empty stream, a chunk that is not JSON).
	ErrBadResponse = errors.New("loop: unusable response from provider")
	// ErrConsumed: the sequence returned by SubmitStreamWithTools was
	// ranged over a second time.
	ErrConsumed = errors.New("loop: stream already consumed")
)

// RepeatedCallError is the error of a run ended by a repeated call; it
// matches ErrRepeatedCall.
type RepeatedCallError struct {
	Tool      string // the tool's name
	Arguments string // the arguments, as in the last call
	Turns     int    // turns in a row that made the call
}

// Error implements error.
func (e *RepeatedCallError) Error() string {
	return fmt.Sprintf("loop: the model called %s with the same arguments in %d turns in a row; run stopped", e.Tool, e.Turns)
}

// Is reports whether target is ErrRepeatedCall.
func (e *RepeatedCallError) Is(target error) bool { return target == ErrRepeatedCall }

// APIError is a failure reported by the provider: an HTTP error status
// (after openai-go's retries for 408, 409, 429 and 5xx), or an error event
// inside a stream (StatusCode 0), as Groq sends for a failed tool-call
// generation. Message is the provider's own message.
type APIError struct {
	StatusCode int    // HTTP status; 0 for an error event mid-stream
	Type       string // the provider's error type, if it sent one
	Code       string // the provider's error code, if it sent one ("tool_use_failed")
	Message    string // the provider's message (or the start of its body)
	Err        error  // the underlying openai-go error, if any
}

// Error implements error: "loop: provider error <status> (<code>): <message>".
func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString("loop: provider error")
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, " %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	} else {
		b.WriteString(" in stream")
	}
	if e.Code != "" {
		fmt.Fprintf(&b, " (%s)", e.Code)
	} else if e.Type != "" {
		fmt.Fprintf(&b, " (%s)", e.Type)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Unwrap returns the underlying openai-go error.
func (e *APIError) Unwrap() error { return e.Err }

// Kind is the kind of a failed run, as KindOf returns it: a stable string
// for the `{"type":"error","kind":...}` line of `agrun run --json`. Kinds
// are added, never renamed or removed. They are the kinds of a run; a
// failed tool call does not end a run and has a [registry.Kind] instead
// ([ToolExecutionCompleted.ErrorKind]).
type Kind string

// The kinds of a failed run.
const (
	KindMaxTurns     Kind = "max_turns"
	KindRepeatedCall Kind = "repeated_call"
	KindProvider     Kind = "provider"  // *APIError, ErrBadResponse
	KindTransport    Kind = "transport" // the provider could not be reached or the connection broke
	KindCancelled    Kind = "cancelled"
	KindTimeout      Kind = "timeout"
	KindOther        Kind = "other" // ErrBusy, ErrConsumed, ErrInvalidHistory, ...
	// KindContextOverflow: the provider refused the request as too long
	// for the model's context window, also after the loop trimmed it
	// (ErrContextOverflow).
	KindContextOverflow Kind = "context_overflow"
	// KindInvalidOutput: the final answer did not match
	// Config.ResponseSchema, twice (ErrInvalidOutput).
	KindInvalidOutput Kind = "invalid_output"
)

// KindOf classifies an error returned by this package: one of the Kind*
// constants, or "" for nil.
func KindOf(err error) Kind {
	var api *APIError
	var netErr interface{ Timeout() bool }
	if k := requestKind(err); k != "" {
		return k
	}
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrMaxTurns):
		return KindMaxTurns
	case errors.Is(err, ErrRepeatedCall):
		return KindRepeatedCall
	case errors.Is(err, ErrContextOverflow):
		return KindContextOverflow
	case errors.Is(err, ErrInvalidOutput):
		return KindInvalidOutput
	case errors.As(err, &api), errors.Is(err, ErrBadResponse):
		return KindProvider
	case errors.Is(err, context.Canceled):
		return KindCancelled
	case errors.Is(err, context.DeadlineExceeded):
		return KindTimeout
	case errors.Is(err, errTransport), errors.As(err, &netErr):
		return KindTransport
	}
	return KindOther
}

// errTransport marks errors of reaching the provider.
var errTransport = errors.New("transport")

type transportError struct{ err error }

func (e *transportError) Error() string        { return "loop: cannot reach provider: " + e.err.Error() }
func (e *transportError) Unwrap() []error      { return []error{e.err, errTransport} }
func (e *transportError) Is(target error) bool { return target == errTransport }

// maxErrorBody bounds how much of an error body is read for its message.
const maxErrorBody = 64 << 10

// apiErrorFromResponse builds an *APIError from an HTTP error response
// whose body openai-go may have failed to decode (Ollama sends
// {"error":"..."}, vLLM {"message":...}, proxies HTML).
func apiErrorFromResponse(res *http.Response, cause error) *APIError {
	e := &APIError{StatusCode: res.StatusCode, Err: cause}
	if res.Body == nil {
		return e
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	res.Body = io.NopCloser(bytes.NewReader(body))
	e.Type, e.Code, e.Message = parseErrorBody(body)
	return e
}

// parseErrorBody finds the message in the error shapes providers use:
// {"error":{"message","type","code"}}, {"error":"..."}, {"message":...},
// {"detail":...}; anything else is shown as text, shortened.
func parseErrorBody(body []byte) (typ, code, msg string) {
	var v map[string]json.RawMessage
	if json.Unmarshal(body, &v) == nil {
		if raw, ok := v["error"]; ok {
			var obj map[string]json.RawMessage
			if json.Unmarshal(raw, &obj) == nil {
				return jsonText(obj["type"]), jsonText(obj["code"]), firstText(obj["message"], raw)
			}
			return "", "", jsonText(raw)
		}
		if raw, ok := v["message"]; ok {
			return jsonText(v["type"]), jsonText(v["code"]), jsonText(raw)
		}
		if raw, ok := v["detail"]; ok {
			return "", "", jsonText(raw)
		}
	}
	return "", "", textsafe.Truncate(strings.TrimSpace(string(body)), 512)
}

func firstText(raws ...json.RawMessage) string {
	for _, r := range raws {
		if s := jsonText(r); s != "" {
			return s
		}
	}
	return ""
}

// jsonText is a JSON string's value, or any other JSON value's text.
func jsonText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return textsafe.Truncate(string(raw), 512)
}

package loop

import (
	"context"
	"errors"
	"fmt"
	"github.com/agcore/agrun/registry"
	"net/http"
	"strings"
	"time"
)

// Run errors. Every error a Submit method returns matches one of these with
// errors.Is, or is an *APIError (errors.As), a context error
// (errors.Is(err, context.Canceled) or context.DeadlineExceeded, also for
// Config.RequestTimeout), or a failure to reach the provider; KindOf
// tells them apart.
var (
	// ErrMaxTurns: the run made Config.MaxTurns model requests and the last
	// reply still asked for tools. The history keeps every message.
	ErrMaxTurns = errors.New("maximum number of turns reached")
	// ErrRepeatedCall: the model made the same call (same tool, same
	// arguments) in RepeatLimit+1 turns in a row. It was told after
	// RepeatLimit; the repeated turn's calls are answered "cancelled".
	ErrRepeatedCall = errors.New("the model repeated the same tool call")
	// ErrBusy: a Submit method was called while another run of the same
	// Cycle was in progress.
	ErrBusy = errors.New("cycle is busy with another run")
	// ErrBadResponse: the provider's reply could not be used (no choices,
	// an empty stream, a chunk that is not JSON).
	ErrBadResponse = errors.New("unusable response from provider")
	// ErrConsumed: the sequence returned by SubmitStreamWithTools was
	// ranged over a second time.
	ErrConsumed = errors.New("stream already consumed")
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
	return fmt.Sprintf("the model called %s with the same arguments in %d turns in a row; run stopped", e.Tool, e.Turns)
}

// Is reports whether target is ErrRepeatedCall.
func (e *RepeatedCallError) Is(target error) bool { return target == ErrRepeatedCall }

// APIError is a failure reported by the provider: an HTTP error status
// (after the loop's retries for 408, 409, 429 and 5xx), or an error event
// inside a stream (StatusCode 0), as Groq sends for a failed tool-call
// generation and Anthropic for an overload mid-stream. Message is the
// provider's own message.
type APIError struct {
	StatusCode int    // HTTP status; 0 for an error event mid-stream
	Type       string // the provider's error type, if it sent one ("overloaded_error")
	Code       string // the provider's error code, if it sent one ("tool_use_failed")
	Message    string // the provider's message (or the start of its body), cleaned
	// Header is the HTTP response's header (nil for an error event mid
	// stream): the loop reads retry-after-ms, Retry-After and
	// x-should-retry from it.
	Header http.Header
	// RetryAfter is a wait the provider asked for in its body (Gemini's
	// RetryInfo); a header wins over it.
	RetryAfter time.Duration
	Err        error // the SDK's error, if any
}

// Error implements error: "provider error <status> (<code>): <message>".
func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString("provider error")
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

// Unwrap returns the underlying SDK error.
func (e *APIError) Unwrap() error { return e.Err }

// Kind is the kind of a failed run, as KindOf returns it: a stable string
// for the `{"type":"error","kind":...}` line of `agrun run --json`. It is
// the registry's Kind — one vocabulary of kinds across the registry, the
// loop and agrun serve, each string declared once (internal/testing/archtest) —
// with the kinds of a run added here. Kinds are added, never renamed or
// removed. A failed tool call does not end a run and has a registry kind
// instead ([ToolExecutionCompleted.ErrorKind]).
type Kind = registry.Kind

// The kinds of a failed run.
const (
	KindMaxTurns     Kind = "max_turns"
	KindRepeatedCall Kind = "repeated_call"
	KindProvider     Kind = "provider"  // *APIError, ErrBadResponse
	KindTransport    Kind = "transport" // the provider could not be reached or the connection broke
	KindCancelled         = registry.Cancelled
	KindTimeout           = registry.Timeout
	KindOther             = registry.Other // ErrBusy, ErrConsumed, ErrInvalidHistory, ...
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
	var transport *TransportError
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
	case errors.As(err, &transport), errors.As(err, &netErr):
		return KindTransport
	}
	return KindOther
}

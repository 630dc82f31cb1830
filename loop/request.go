package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
)

// Errors of a request and of a run's budgets (see also the list in
// errors.go).
var (
	// ErrIncompleteStream: a stream ended (the connection closed, with or
	// without "data: [DONE]") before the API's end marker arrived
	// (finish_reason, message_stop, response.completed, a finishReason),
	// so the reply may be cut anywhere, a tool call mid-arguments
	// included. Nothing of it is kept or run; the request is retried like
	// a 5xx. It is matched by *IncompleteStreamError, which also matches
	// ErrBadResponse (kind provider).
	ErrIncompleteStream = errors.New("the stream ended before the reply was complete")
	// ErrStreamIdle: no chunk arrived for Config.StreamIdleTimeout. The
	// request is retried; the error is the last attempt's (KindStreamIdle).
	ErrStreamIdle = errors.New("the stream stalled")
	// ErrTokenBudget: the run used Config.MaxTotalTokens tokens and would
	// have made another request (*BudgetError, KindMaxTokens).
	ErrTokenBudget = errors.New("token budget reached")
	// ErrToolCallBudget: the model asked for more tool calls than
	// Config.MaxToolCalls allows in one run (*BudgetError, KindMaxToolCalls).
	ErrToolCallBudget = errors.New("tool call budget reached")
)

// The kinds of a failed run added with the request settings.
const (
	KindStreamIdle   Kind = "stream_idle"    // ErrStreamIdle, after the retries
	KindMaxTokens    Kind = "max_tokens"     // ErrTokenBudget
	KindMaxToolCalls Kind = "max_tool_calls" // ErrToolCallBudget
)

// requestKind is KindOf for the errors of this file, "" for others.
func requestKind(err error) Kind {
	switch {
	case errors.Is(err, ErrTokenBudget):
		return KindMaxTokens
	case errors.Is(err, ErrToolCallBudget):
		return KindMaxToolCalls
	case errors.Is(err, ErrStreamIdle):
		return KindStreamIdle
	}
	return ""
}

// BudgetError ends a run that reached one of its budgets. The history
// keeps every message of the run, and every tool call in it is answered,
// so the session can continue with a new prompt.
type BudgetError struct {
	Budget string // "tokens" (Config.MaxTotalTokens) or "tool_calls" (Config.MaxToolCalls)
	Limit  int64  // the budget
	Used   int64  // what the run used (tool calls: that the model asked for)
}

// Error implements error.
func (e *BudgetError) Error() string {
	if e.Budget == "tokens" {
		return fmt.Sprintf("token budget reached: the run used %d tokens of its %d; run stopped before the next request", e.Used, e.Limit)
	}
	return fmt.Sprintf("tool call budget reached: the model asked for %d tool calls, %d are allowed per run; run stopped", e.Used, e.Limit)
}

// Is reports whether target is ErrTokenBudget or ErrToolCallBudget, as
// Budget says.
func (e *BudgetError) Is(target error) bool {
	if e.Budget == "tokens" {
		return target == ErrTokenBudget
	}
	return target == ErrToolCallBudget
}

// idleError is ErrStreamIdle with its timeout.
type idleError struct{ after time.Duration }

func (e *idleError) Error() string {
	return fmt.Sprintf("the stream from the provider stalled: no data for %s (stream_idle_timeout)", e.after)
}
func (e *idleError) Is(target error) bool { return target == ErrStreamIdle }

// retryBudgetError: a retry would wait longer than MaxRetryWait allows;
// wait is the provider's Retry-After (0: our backoff, with nothing left).
type retryBudgetError struct {
	wait, left time.Duration
	err        error
}

func (e *retryBudgetError) Error() string {
	if e.wait <= 0 {
		return fmt.Sprintf("%v (not retried: the retry wait budget, max_retry_wait, is spent)", e.err)
	}
	return fmt.Sprintf("%v (not retried: the provider asked to wait %s, more than the %s left of the retry wait budget, max_retry_wait)",
		e.err, e.wait.Round(time.Second), e.left.Round(time.Second))
}
func (e *retryBudgetError) Unwrap() error { return e.err }

// Retry says a model request failed in a way that may pass and is being
// retried: the TextDelta and ReasoningDelta events since the last
// TurnComplete (or the run's start) are void, and the reply starts over.
type Retry struct {
	Attempt int           // this retry, from 1
	Max     int           // Config.MaxRetries
	Wait    time.Duration // the wait before the retry (the provider's Retry-After, or the backoff)
	Status  int           // the HTTP status that failed, 0 for a broken or stalled stream or a connection error
	Reason  string        // what failed, e.g. "429 Too Many Requests: slow down"
}

// EventType implements Event.
func (*Retry) EventType() string { return "retry" }

// MarshalJSON gives {"type":"retry","attempt":1,"max":2,"wait_ms":3000,"reason":"429 ..."}.
func (e *Retry) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Type    string `json:"type"`
		Attempt int    `json:"attempt"`
		Max     int    `json:"max"`
		WaitMS  int64  `json:"wait_ms"`
		Reason  string `json:"reason"`
	}{e.EventType(), e.Attempt, e.Max, e.Wait.Milliseconds(), e.Reason})
}

// ReasoningDelta is a fragment of the model's reasoning, streamed beside
// the reply by providers that expose it ("reasoning_content": DeepSeek,
// vLLM, llama.cpp; "reasoning": OpenRouter, Ollama; reasoning summaries,
// thinking blocks, thought summaries). It is not part of the reply's
// text: the history keeps it in Message.Reasoning, to send back to the
// same provider, and it is shown only when asked (--show-reasoning).
type ReasoningDelta struct {
	Text string
}

// EventType implements Event.
func (*ReasoningDelta) EventType() string { return "reasoning_delta" }

// MarshalJSON gives {"type":"reasoning_delta","text":"..."}.
func (e *ReasoningDelta) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}{e.EventType(), e.Text})
}

// RequestInfo describes one model request, retries included, as
// Config.OnRequest receives it; it marshals to
// {"model":...,"usage":{...},"duration_ms":...,"retries":...,"finish_reason":...,"error":...}.
type RequestInfo struct {
	// Model is the model the provider says answered (the configured one
	// if it said none, or the request failed).
	Model string
	// ResponseModel is the model the provider said answered; "" if it
	// named none or the request failed.
	ResponseModel string
	// ResponseID is the provider's id of the response ("" if none or the
	// request failed).
	ResponseID string
	// Start is when the request began (its first attempt).
	Start time.Time
	// Stream says the reply was asked for as a stream.
	Stream bool
	// TimeToFirstChunk is, for a streamed request that succeeded, the
	// time from the start of its last attempt to its first event.
	TimeToFirstChunk time.Duration
	// Usage is the tokens of the attempt that succeeded (zero if the
	// request failed or the provider reported none).
	Usage Usage
	// Duration is the whole request: every attempt and the waits between.
	Duration time.Duration
	// Retries is how many times the request was retried.
	Retries int
	// FinishReason is the provider's finish_reason ("" if the request failed).
	FinishReason string
	// Error is the message of the error that ended the request, "" on
	// success; ErrorKind its kind (KindOf).
	Error     string
	ErrorKind Kind
}

// MarshalJSON gives the form described on RequestInfo; "error" is left out
// on success.
func (i RequestInfo) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Model        string `json:"model"`
		ResponseID   string `json:"response_id,omitempty"`
		Usage        Usage  `json:"usage"`
		DurationMS   int64  `json:"duration_ms"`
		Retries      int    `json:"retries"`
		FinishReason string `json:"finish_reason"`
		Error        string `json:"error,omitempty"`
		ErrorKind    Kind   `json:"error_kind,omitempty"`
	}{i.Model, i.ResponseID, i.Usage, i.Duration.Milliseconds(), i.Retries, i.FinishReason, i.Error, i.ErrorKind})
}

// request makes one model request with the current history, retrying
// what may pass (see retryable) at most Config.MaxRetries times and
// waiting at most Config.MaxRetryWait in all, and reports it to
// Config.OnRequest. On an error, the reply holds what was streamed of the
// last attempt (for an interrupted message).
func (r *runState) request(ctx context.Context, stream bool) (rep Reply, err error) {
	cfg := &r.c.cfg
	start := time.Now()
	var waited, firstChunk time.Duration
	retries := 0
	defer func() {
		if cfg.OnRequest == nil {
			return
		}
		info := RequestInfo{Model: r.c.info.Model, Start: start, Duration: time.Since(start), Retries: retries, Stream: stream}
		if err != nil {
			info.Error, info.ErrorKind = textsafe.Clean(err.Error(), 1024), KindOf(err)
		} else {
			info.ResponseModel, info.ResponseID = rep.Model, rep.ID
			info.Usage, info.FinishReason, info.TimeToFirstChunk = rep.Usage, rep.FinishReason, firstChunk
			if rep.Model != "" {
				info.Model = rep.Model
			}
		}
		cfg.OnRequest(info)
	}()
	for {
		rep, firstChunk, err = r.attempt(ctx, stream)
		if err == nil || ctx.Err() != nil || retries >= cfg.MaxRetries || !retryable(err) {
			return rep, err
		}
		wait, fromServer := retryWait(err, retries)
		if left := cfg.MaxRetryWait - waited; cfg.MaxRetryWait > 0 && wait > left {
			switch {
			case fromServer:
				return rep, &retryBudgetError{wait: wait, left: left, err: err}
			case left <= 0:
				return rep, &retryBudgetError{err: err}
			}
			wait = left // our own backoff just gets shorter
		}
		retries++
		if !r.emit(&Retry{Attempt: retries, Max: cfg.MaxRetries, Wait: wait, Status: retryStatus(err), Reason: retryReason(err)}) {
			return Reply{}, errStopped
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return Reply{}, fmt.Errorf("waiting to retry: %w", ctx.Err())
		case <-t.C:
		}
		waited += wait
	}
}

// retryable reports whether a failed attempt may pass when retried: a
// connection error, a broken or stalled stream, or HTTP 408, 409, 429 or
// 5xx (Anthropic's 529 overload included; an "x-should-retry" header
// overrides the status).
func retryable(err error) bool {
	if errors.Is(err, errStopped) {
		return false
	}
	if errors.Is(err, ErrIncompleteStream) || errors.Is(err, ErrStreamIdle) {
		return true
	}
	var api *APIError
	if errors.As(err, &api) {
		if api.StatusCode == 0 {
			return false // an error event inside a stream: the provider's verdict
		}
		if retry, ok := shouldRetryHeader(api.Header); ok {
			return retry
		}
		s := api.StatusCode
		return s == http.StatusRequestTimeout || s == http.StatusConflict || s == http.StatusTooManyRequests || s >= 500
	}
	var transport *TransportError
	return errors.As(err, &transport)
}

// retryWait is the wait before retry n+1: what the provider asked for
// (fromServer: retryAfter), else a backoff: 0.5 s doubling, at most 8 s,
// minus up to a quarter of jitter (openai-go's).
func retryWait(err error, n int) (wait time.Duration, fromServer bool) {
	if d, ok := retryAfter(err); ok {
		return d, true
	}
	d := min(500*time.Millisecond<<min(n, 10), 8*time.Second)
	return d - time.Duration(rand.Int64N(int64(d/4))), false
}

// headerRetryAfter reads retry-after-ms or Retry-After (seconds or an
// HTTP date).
func headerRetryAfter(h http.Header) (time.Duration, bool) {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && !math.IsInf(ms, 0) {
			return time.Duration(min(ms, float64(math.MaxInt64/2)/1e6) * float64(time.Millisecond)), true
		}
	}
	if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 && !math.IsInf(s, 0) {
			return time.Duration(min(s, float64(math.MaxInt64/2)/1e9) * float64(time.Second)), true
		}
		if t, err := http.ParseTime(v); err == nil {
			return max(time.Until(t), 0), true
		}
	}
	return 0, false
}

func retryStatus(err error) int {
	var api *APIError
	if errors.As(err, &api) {
		return api.StatusCode
	}
	return 0
}

// retryReason is the short text of a retried error for the Retry event:
// "429 Too Many Requests: slow down", "the stream stalled ...".
func retryReason(err error) string {
	var api *APIError
	if errors.As(err, &api) && api.StatusCode != 0 {
		s := strconv.Itoa(api.StatusCode) + " " + http.StatusText(api.StatusCode)
		if api.Message != "" {
			s += ": " + api.Message
		}
		return textsafe.Clean(s, 300)
	}
	return textsafe.Clean(err.Error(), 300)
}

// checkTokenBudget ends the run before another request once it has used
// Config.MaxTotalTokens.
func (r *runState) checkTokenBudget() error {
	limit := r.c.cfg.MaxTotalTokens
	if limit <= 0 {
		return nil
	}
	u := r.c.runUsage() // the run's requests and what Spend counted
	if used := u.total(); used >= limit {
		return &BudgetError{Budget: "tokens", Limit: limit, Used: used}
	}
	return nil
}

// interrupted keeps what the user saw of a reply that a cancellation (or
// a consumer that stopped) cut short: an assistant message marked
// Interrupted, without tool calls.
func (r *runState) interrupted(ctx context.Context, rep Reply, err error) {
	if rep.Content == "" || (ctx.Err() == nil && !errors.Is(err, errStopped)) {
		return
	}
	r.c.appendMessage(Message{Role: RoleAssistant, Content: rep.Content, Interrupted: true})
}

// interruptedNote is appended to the content of an interrupted message
// when it is sent back, so the model knows its reply did not end there.
const interruptedNote = " [interrupted by the user]"

package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agcore/agrun/registry"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"
)

// Defaults for the zero values of Config.
const (
	DefaultBaseURL             = "https://api.openai.com/v1"
	DefaultMaxTurns            = 10
	DefaultMaxToolCallsPerTurn = 32
	// DefaultMaxToolMessageBytes caps each tool message sent to the model
	// (see Config.MaxToolMessageBytes): 32 KiB, about 8–10k tokens.
	DefaultMaxToolMessageBytes = 32 << 10
	DefaultMaxRetries          = 2
	// RepeatLimit is how many turns in a row may make the same call
	// before the model is told; one more ends the run (ErrRepeatedCall).
	RepeatLimit = 3
)

// Config configures a Cycle. The zero value of each field means its
// default; only Model is required.
type Config struct {
	// BaseURL of an OpenAI-compatible Chat Completions API ("/chat/completions"
	// is appended). Default DefaultBaseURL. OPENAI_BASE_URL is not read.
	BaseURL string
	// APIKey is sent as a bearer token; empty sends none (local servers).
	// OPENAI_API_KEY is not read: the caller decides where keys come from.
	APIKey string
	// Model is the model name. Required.
	Model string
	// System is the system prompt, sent first in every request unless the
	// history already starts with a system message. It is configuration,
	// not history: it is not in Messages() and not given to OnMessage, so a
	// resumed session uses the current prompt.
	System string
	// Temperature, if set, is sent as "temperature".
	Temperature *float64
	// MaxTurns bounds the model requests of one run. Default DefaultMaxTurns.
	MaxTurns int
	// ParallelToolCalls, if set, is sent as "parallel_tool_calls" (only in
	// requests that carry tools).
	ParallelToolCalls *bool
	// MaxToolCallsPerTurn bounds the calls run for one reply; further calls
	// are answered with an error tool message and not run. Default
	// DefaultMaxToolCallsPerTurn.
	MaxToolCallsPerTurn int
	// MaxToolMessageBytes caps the content of each tool message the model
	// is sent: a longer result is cut to a valid JSON text showing its head
	// and tail with a note that gives its full size and how to read the
	// rest (a JSON string stays a JSON string, other JSON becomes
	// {"truncated":true,"bytes":N,"head":"...","tail":"...","note":"..."}),
	// and the whole result is kept in Message.FullContent, which the
	// model can page through with the built-in PageToolName tool, offered
	// in the requests of tool runs once a result in the history was cut.
	// A longer error message is cut and ends in "…". The event keeps the
	// whole result. Zero means DefaultMaxToolMessageBytes; negative means
	// no cap; values below 1024 are raised to 1024.
	MaxToolMessageBytes int
	// ToolResultLimit, if set, gives the cap of one tool's messages by
	// name, overriding MaxToolMessageBytes: positive is the cap (raised
	// to 1024), negative no cap, 0 MaxToolMessageBytes. It is called by
	// New (for the history) and from the goroutine running a Submit
	// method, never concurrently by one Cycle.
	ToolResultLimit func(tool string) int
	// ContextWindow is the model's context window in tokens; 0 means
	// unknown. When set, each request is estimated (a third of its bytes,
	// tool definitions included; see doc.go) and, past seven eighths of the window,
	// trimmed in the request only — never in the history: the oldest tool
	// results first (each replaced by a note naming the call and its size,
	// readable again with PageToolName), then whole old turns. Whatever
	// the setting, a request the provider refuses as too long
	// (ErrContextOverflow) is trimmed to a smaller estimate and made once
	// more, and the Cycle keeps that smaller bound.
	ContextWindow int
	// ResponseSchema, if set, is a JSON Schema (its root an object schema,
	// checked like a tool's parameters: registry.CompileSchema) that the
	// final answer must match. It is asked for as SchemaMode says; each
	// final answer is validated with the registry's metered validator
	// (a StructuredOutput event reports it); an answer that does not match
	// is sent back once with the error, a second fails the run with
	// ErrInvalidOutput. Response.Text is then the answer's JSON.
	ResponseSchema json.RawMessage
	// SchemaMode says how ResponseSchema is asked for. Default SchemaAuto.
	SchemaMode SchemaMode
	// RequestTimeout bounds each HTTP attempt, including reading a whole
	// streamed reply (openai-go's WithRequestTimeout). Zero: no bound other
	// than the context.
	RequestTimeout time.Duration
	// MaxRetries is how many times a request that failed with a connection
	// error, 408, 409, 429 or 5xx, a stream that broke off before its
	// finish_reason or a stalled stream is retried, with openai-go's
	// backoff (0.5 s doubling, capped at 8 s) or the server's
	// retry-after-ms / Retry-After. Each retry is a Retry event. The loop
	// retries, not openai-go (its client is built with no retries), so
	// that retries are seen and bounded. Zero means DefaultMaxRetries;
	// negative means none.
	MaxRetries int
	// MaxRetryWait bounds the time one request spends waiting between its
	// retries. A Retry-After longer than what is left of it fails the
	// request at once (the error says so); a backoff longer than that is
	// shortened. Zero means DefaultMaxRetryWait; negative means no bound.
	MaxRetryWait time.Duration
	// StreamIdleTimeout bounds the wait for the first chunk of a streamed
	// reply and between chunks: a stream silent for longer fails with
	// ErrStreamIdle (KindStreamIdle), which is retried. Zero means
	// DefaultStreamIdleTimeout; negative means no bound.
	StreamIdleTimeout time.Duration
	// MaxTotalTokens, if positive, is the run's token budget: once a run
	// has used this many tokens (total_tokens as the provider reports
	// them, summed over its requests), it ends before its next request
	// with a *BudgetError (ErrTokenBudget). A request is never cut short,
	// so a run may end above the budget. Providers that report no usage
	// are not bounded.
	MaxTotalTokens int64
	// MaxToolCalls, if positive, is the run's budget of tool calls: the
	// calls past it are not run (each is answered "not run") and the run
	// ends after that turn with a *BudgetError (ErrToolCallBudget).
	MaxToolCalls int
	// HTTPClient, if set, makes the requests (e.g. for a proxy or tests).
	// Default: one client shared by all Cycles of the process (a clone of
	// http.DefaultTransport that waits at most 10 minutes for response
	// headers), so connections are reused across Cycles.
	HTTPClient *http.Client
	// History, if set, is a saved conversation to continue (see Messages).
	// Its tool messages are cleaned and capped as new ones are (a session
	// saved by an older agrun may hold anything). New checks it: if only the answers to the last tool calls are
	// missing (a session cut short while tools ran), it appends
	// "cancelled" tool messages for them and passes them to OnMessage;
	// any other defect is an ErrInvalidHistory.
	History []Message
	// OnMessage, if set, is called synchronously, in order, with each
	// message appended to the history (the user prompt, each assistant
	// reply, each tool message), from the goroutine running the Submit
	// method. It must not call Submit methods of the same Cycle.
	OnMessage func(Message)
	// Approver, if set, decides which tool calls need a person's yes and
	// gives the decisions (see Approver); a denied call is answered
	// "error (denied_by_user): <reason>" and the run goes on. Nil runs
	// every call without asking.
	Approver Approver
	// OnDecision, if set, is called with every decision about a call
	// (Approver's answers, and calls run because their tool was approved
	// for the session), from the goroutine running the Submit method,
	// before the call runs or is answered.
	OnDecision func(DecisionRecord)
	// ResumePending: if History ends with tool calls left unanswered (a
	// run that stopped with ErrApprovalPending, saved), New keeps them
	// open for ResumeStreamWithTools instead of answering them
	// "cancelled". A Submit method answers them "cancelled" first.
	ResumePending bool
	// OnRequest, if set, is called after each model request (retries
	// included, failed requests too) with what it cost, from the goroutine
	// running the Submit method.
	OnRequest func(RequestInfo)
	// DeferCalls: the calls of a reply that the loop would run through
	// the registry are not run here; the run ends with a
	// *CallsDeferredError listing them (the calls the loop answers itself
	// — unknown tools, calls over a budget, the page tool — are answered
	// as usual), and ResumeStreamWithResults answers them with what they
	// returned where they did run (a cluster's workers: package cluster)
	// and goes on. With an Approver, the calls that need a yes are decided
	// before the run ends, in call order: the approved ones are deferred,
	// the denied ones answered; a decision that would wait
	// (ErrApprovalPending) denies the call.
	DeferCalls bool
}

// defaultHTTPClient is shared by every Cycle without Config.HTTPClient, so
// that cycles reuse connections (openai-go's own default gives each client
// a new transport: a new connection pool per Cycle, never closed). Like
// openai-go's default it bounds the wait for response headers, not bodies.
var defaultHTTPClient = sync.OnceValue(func() *http.Client {
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		t = t.Clone()
		t.ResponseHeaderTimeout = 10 * time.Minute
		return &http.Client{Transport: t}
	}
	return &http.Client{Transport: http.DefaultTransport}
})

// Response is the outcome of a successful run.
type Response struct {
	// Text is the final reply's text.
	Text string
	// FinishReason is the provider's finish_reason for the final reply
	// ("stop" if a non-streamed reply carried none; a stream without one
	// is ErrIncompleteStream). "length" means the answer was cut at the
	// model's output limit.
	FinishReason string
	// Turns is the number of model requests the run made.
	Turns int
	// Usage is the tokens the run used, summed over its requests.
	Usage Usage
}

// Cycle is a conversation with a model that can call tools. Submit methods
// append to its history and must not run concurrently (a second one
// returns ErrBusy); Messages and Usage are safe to call at any time, from
// any goroutine. A Cycle holds no resources that need closing.
type Cycle struct {
	cfg     Config
	client  openai.Client
	running atomic.Bool

	mu      sync.Mutex
	history []Message
	usage   Usage
	ids     *idAllocator

	schema         *responseSchema // compiled Config.ResponseSchema, or nil
	schemaFallback bool            // SchemaAuto fell back to the prompt instruction
	learnedBudget  int             // token budget learnt from a context overflow; 0 none
	lastEstimate   int             // estimated tokens of the last request's messages
	approved       map[string]bool // tool+grant keys approved for the session (approve.go); under mu
	pending        []ToolCall      // calls left open by ErrApprovalPending, for Resume; under mu
}

// New returns a Cycle for cfg. It fails if Model is empty, BaseURL is not
// an http(s) URL, or History is invalid (ErrInvalidHistory); it makes no
// request.
func New(cfg Config) (*Cycle, error) {
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("loop: Config.Model is required")
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	if u, err := url.Parse(cfg.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("loop: Config.BaseURL %q is not an http(s) URL", cfg.BaseURL)
	}
	if cfg.MaxTurns <= 0 {
		cfg.MaxTurns = DefaultMaxTurns
	}
	if cfg.MaxToolCallsPerTurn <= 0 {
		cfg.MaxToolCallsPerTurn = DefaultMaxToolCallsPerTurn
	}
	switch {
	case cfg.MaxToolMessageBytes == 0:
		cfg.MaxToolMessageBytes = DefaultMaxToolMessageBytes
	case cfg.MaxToolMessageBytes < 0:
		cfg.MaxToolMessageBytes = 0 // textsafe: no cap
	case cfg.MaxToolMessageBytes < 1024:
		cfg.MaxToolMessageBytes = 1024
	}
	switch {
	case cfg.MaxRetries == 0:
		cfg.MaxRetries = DefaultMaxRetries
	case cfg.MaxRetries < 0:
		cfg.MaxRetries = 0
	}
	cfg.MaxRetryWait = orDefault(cfg.MaxRetryWait, DefaultMaxRetryWait)
	cfg.StreamIdleTimeout = orDefault(cfg.StreamIdleTimeout, DefaultStreamIdleTimeout)
	opts := []option.RequestOption{
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(cfg.APIKey),
		option.WithMaxRetries(0), // the loop retries: see Config.MaxRetries
	}
	if cfg.RequestTimeout > 0 {
		opts = append(opts, option.WithRequestTimeout(cfg.RequestTimeout))
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = defaultHTTPClient()
	}
	opts = append(opts, option.WithHTTPClient(hc))
	schema, err := compileResponseSchema(cfg.ResponseSchema)
	if err != nil {
		return nil, err
	}
	c := &Cycle{cfg: cfg, schema: schema}
	history := slices.Clone(cfg.History)
	for i := range history {
		history[i].ToolCalls = slices.Clone(history[i].ToolCalls)
		if history[i].Role == RoleTool {
			// A saved session may predate the cleaning and the cap, or
			// have been cut under another cap.
			history[i].Content, history[i].FullContent = toolContent(history[i], c.toolLimit(history[i].Name))
		}
	}
	open, err := repairHistory(history)
	if err != nil {
		return nil, err
	}
	c.cfg.History = nil
	c.client, c.history = openai.NewClient(opts...), history
	c.ids = newIDAllocator(history)
	if cfg.ResumePending && len(open) > 0 {
		c.pending = open // for Resume (approve.go)
		return c, nil
	}
	for _, m := range cancelledTail(open) {
		c.appendMessage(m)
	}
	return c, nil
}

// Messages returns a copy of the whole history, oldest first: user
// prompts, assistant replies (with their tool calls) and tool messages.
// Every assistant tool call is followed by exactly one tool message, also
// after an error or a cancellation, so the history can always be sent
// again (Config.History).
func (c *Cycle) Messages() []Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(c.history)
	for i := range out {
		out[i].ToolCalls = slices.Clone(out[i].ToolCalls)
	}
	return out
}

// Usage returns the tokens used by this Cycle's runs so far (not those of
// a resumed history).
func (c *Cycle) Usage() Usage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.usage
}

// Submit sends prompt without tools and returns the reply. If the model
// asks for tools anyway (a resumed history may make it), each call is
// answered with a not_found tool message and the run goes on.
func (c *Cycle) Submit(ctx context.Context, prompt string) (*Response, error) {
	return c.run(ctx, prompt, nil, nil)
}

// SubmitWithTools sends prompt with reg's tools and runs the tool cycle
// until the model answers without tool calls: each reply's calls run in
// parallel through reg.InvokeAll and their results (or errors, as
// "error (<kind>): <message>") go back to the model in call order. Tool
// errors never end a run; transport and provider errors, cancellation,
// MaxTurns and a repeated call do, and the history stays valid. Requests
// are non-streamed. reg may be nil (no tools).
func (c *Cycle) SubmitWithTools(ctx context.Context, prompt string, reg *registry.Registry) (*Response, error) {
	return c.run(ctx, prompt, reg, nil)
}

// SubmitStreamWithTools is SubmitWithTools over streamed requests, as a
// sequence of events (see Event for their order). A failed run ends the
// sequence with one (nil, err) pair; a successful one simply ends. The run
// happens in the goroutine that ranges over the sequence, so stopping
// early (break) cancels the request in flight and leaves no goroutine
// behind; tool calls already in the history are then answered "cancelled".
// The sequence can be ranged over once; a second range yields ErrConsumed.
// After the sequence ends, Messages holds the run and its last assistant
// message is the final reply.
func (c *Cycle) SubmitStreamWithTools(ctx context.Context, prompt string, reg *registry.Registry) iter.Seq2[Event, error] {
	return eventSeq(func(emit func(Event) bool) error {
		_, err := c.run(ctx, prompt, reg, emit)
		return err
	})
}

// eventSeq is the sequence of the events body emits, ranged over once
// (then ErrConsumed), ending with body's error unless the consumer
// stopped first.
func eventSeq(body func(emit func(Event) bool) error) iter.Seq2[Event, error] {
	var used atomic.Bool
	return func(yield func(Event, error) bool) {
		if used.Swap(true) {
			yield(nil, ErrConsumed)
			return
		}
		stopped := false
		emit := func(e Event) bool {
			if !yield(e, nil) {
				stopped = true
				return false
			}
			return true
		}
		if err := body(emit); err != nil && !stopped {
			yield(nil, err)
		}
	}
}

// errStopped: the consumer of a stream stopped ranging.
var errStopped = errors.New("loop: consumer stopped")

// run is the one tool cycle behind every Submit method. emit is nil for
// the non-streamed methods; it returns false when the consumer stopped.
func (c *Cycle) run(ctx context.Context, prompt string, reg *registry.Registry, emit func(Event) bool) (resp *Response, err error) {
	if !c.running.CompareAndSwap(false, true) {
		return nil, ErrBusy
	}
	defer c.running.Store(false)
	stream := emit != nil
	if emit == nil {
		emit = func(Event) bool { return true }
	}

	r := &runState{c: c, reg: reg, emit: emit}
	defer func() {
		// Whatever ended the run, answer the calls still open (unless
		// they wait for a decision: approve.go).
		r.closeOpen(ctx)
	}()

	c.cancelPending()
	c.appendMessage(Message{Role: RoleUser, Content: prompt})
	return r.turns(ctx, stream)
}

// turns is the tool cycle of a run from its next model request on.
func (r *runState) turns(ctx context.Context, stream bool) (*Response, error) {
	c, emit := r.c, r.emit
	for turn := 1; ; turn++ {
		if turn > c.cfg.MaxTurns {
			return nil, fmt.Errorf("%w (%d)", ErrMaxTurns, c.cfg.MaxTurns)
		}
		if err := r.checkTokenBudget(); err != nil {
			return nil, err
		}
		rep, err := r.requestAdapting(ctx, stream)
		if err != nil {
			r.interrupted(ctx, rep, err)
			return nil, err
		}
		c.ids.fixCalls(rep.Calls)
		c.mu.Lock()
		c.usage.add(rep.Usage)
		c.mu.Unlock()
		r.usage.add(rep.Usage)
		c.appendMessage(Message{Role: RoleAssistant, Content: rep.Content, ToolCalls: rep.Calls})
		r.open = slices.Clone(rep.Calls)

		reason := rep.FinishReason
		switch {
		case len(rep.Calls) > 0:
			reason = "tool_calls"
		case reason == "" || reason == "tool_calls":
			reason = "stop" // "tool_calls" with an empty list of calls
		}
		if !emit(&TurnComplete{Reason: reason, Usage: rep.Usage}) {
			return nil, errStopped
		}
		if len(rep.Calls) == 0 {
			text := rep.Content
			if c.schema != nil {
				out, again, err := r.checkOutput(ctx, rep.Content)
				if err != nil {
					return nil, err
				}
				if again {
					continue
				}
				text = string(out)
			}
			return &Response{Text: text, FinishReason: reason, Turns: turn, Usage: r.usage}, nil
		}
		if err := r.runTools(ctx, rep.Calls); err != nil {
			return nil, err
		}
	}
}

// appendMessage adds m to the history and hands it to OnMessage.
func (c *Cycle) appendMessage(m Message) {
	c.mu.Lock()
	c.history = append(c.history, m)
	c.mu.Unlock()
	if c.cfg.OnMessage != nil {
		m.ToolCalls = slices.Clone(m.ToolCalls)
		c.cfg.OnMessage(m)
	}
}

// runState is one run in progress.
type runState struct {
	c       *Cycle
	reg     *registry.Registry
	emit    func(Event) bool
	usage   Usage
	calls   int            // tool calls the model asked for in this run (Config.MaxToolCalls)
	open    []ToolCall     // calls of the last reply not yet answered
	repeats map[string]int // call signature -> consecutive turns it was made

	schemaRetried bool // a final answer failed the schema and was asked again

	decisions map[string]Decision // given to ResumeStreamWithTools, by call id
	paused    []ApprovalRequest   // calls waiting for a decision (ErrApprovalPending), or deferred
	deferred  bool                // paused holds deferred calls (Config.DeferCalls)
	// supplied answers the calls of this batch instead of the registry
	// (ResumeStreamWithResults), by call id; nil: the registry runs them.
	supplied map[string]registry.Invocation
}

// closeOpen answers the calls still open when a run ends early.
func (r *runState) closeOpen(ctx context.Context) {
	if len(r.open) == 0 {
		return
	}
	if len(r.paused) > 0 && ctx.Err() == nil {
		r.pause()
		return
	}
	why := "the run stopped before the call ran"
	if ctx.Err() != nil {
		why = "the run was cancelled before the call ran"
	}
	for _, call := range r.open {
		r.c.appendMessage(toolMessage(call, errorContent(string(registry.Cancelled), why)))
	}
	r.open = nil
}

// answer appends the tool message of one call (full: the whole result
// when content is cut) and closes it.
func (r *runState) answer(call ToolCall, content, full string) {
	m := toolMessage(call, content)
	m.FullContent = full
	r.c.appendMessage(m)
	for i, o := range r.open {
		if o.ID == call.ID {
			r.open = append(r.open[:i], r.open[i+1:]...)
			break
		}
	}
}

// attempt makes one HTTP attempt of a model request with the current
// history; request retries it. It returns the response (for its headers)
// and, on a failed stream, what was streamed so far.
func (r *runState) attempt(ctx context.Context, stream bool) (reply, *http.Response, error) {
	params := r.c.params(r.reg, stream)
	var httpRes *http.Response
	if !stream {
		cc, err := r.c.client.Chat.Completions.New(ctx, params, option.WithResponseInto(&httpRes))
		if err != nil {
			return reply{}, httpRes, requestError(ctx, httpRes, err)
		}
		if extra, ok := cc.JSON.ExtraFields["error"]; ok && extra.Raw() != "" && extra.Raw() != "null" {
			typ, code, msg := parseErrorBody([]byte(`{"error":` + extra.Raw() + `}`))
			return reply{}, httpRes, &APIError{StatusCode: httpStatus(httpRes), Type: typ, Code: code, Message: msg}
		}
		rep, ok := replyFromCompletion(cc)
		if !ok {
			return reply{}, httpRes, fmt.Errorf("%w: no choices in the reply", ErrBadResponse)
		}
		return rep, httpRes, nil
	}

	// The idle timer cancels the attempt when no chunk comes in time.
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := r.c.cfg.StreamIdleTimeout
	var stalled atomic.Bool
	var timer *time.Timer
	if idle > 0 {
		timer = time.AfterFunc(idle, func() { stalled.Store(true); cancel() })
		defer timer.Stop()
	}
	s := r.c.client.Chat.Completions.NewStreaming(actx, params, option.WithResponseInto(&httpRes))
	defer s.Close()
	var a assembler
	for s.Next() {
		if timer != nil {
			timer.Reset(idle)
		}
		chunk := s.Current()
		if err := a.add(&chunk); err != nil {
			return reply{}, httpRes, err
		}
		for i := range chunk.Choices {
			ch := &chunk.Choices[i]
			if ch.Index != 0 {
				continue
			}
			if len(ch.Delta.JSON.ExtraFields) > 0 {
				if t := reasoningText(ch.Delta.JSON.ExtraFields); t != "" && !r.emit(&ReasoningDelta{Text: t}) {
					return a.result(), httpRes, errStopped
				}
			}
			if d := ch.Delta.Content; d != "" && !r.emit(&TextDelta{Text: d}) {
				return a.result(), httpRes, errStopped
			}
		}
	}
	if err := s.Err(); err != nil {
		if stalled.Load() && ctx.Err() == nil {
			return a.result(), httpRes, &idleError{after: idle}
		}
		var se *ssestream.StreamError
		if errors.As(err, &se) {
			typ, code, msg := parseErrorBody(se.Event.Data)
			return reply{}, httpRes, &APIError{Type: typ, Code: code, Message: msg, Err: err}
		}
		return a.result(), httpRes, requestError(ctx, httpRes, err)
	}
	if a.finish == "" {
		// finish_reason, not [DONE], is the end: every recorded provider
		// sends it, and not all of them send [DONE].
		return a.result(), httpRes, &incompleteError{empty: a.chunks == 0}
	}
	return a.result(), httpRes, nil
}

func httpStatus(res *http.Response) int {
	if res == nil {
		return 0
	}
	return res.StatusCode
}

// requestError turns an openai-go failure into this package's errors.
func requestError(ctx context.Context, res *http.Response, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("loop: request: %w", ctxErr)
	}
	if res != nil && res.StatusCode >= 400 {
		return apiErrorFromResponse(res, err)
	}
	var se *json.SyntaxError
	var ute *json.UnmarshalTypeError
	if errors.As(err, &se) || errors.As(err, &ute) {
		return fmt.Errorf("%w: %w", ErrBadResponse, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// The per-attempt RequestTimeout fired.
		return fmt.Errorf("loop: request timed out: %w", err)
	}
	return &transportError{err: err}
}

// params builds the request from the history.
func (c *Cycle) params(reg *registry.Registry, stream bool) openai.ChatCompletionNewParams {
	c.mu.Lock()
	history := c.history
	c.mu.Unlock()
	p := openai.ChatCompletionNewParams{Model: c.cfg.Model}
	var defs []registry.Definition
	if reg != nil {
		defs = slices.DeleteFunc(reg.Definitions(), func(d registry.Definition) bool {
			return d.Name == PageToolName // reserved for the built-in
		})
	}
	fixed := fixedTokens(c.cfg.System, defs, c.schema)
	budget := c.contextBudget()
	if budget > 0 {
		budget = max(budget-fixed, 1)
	}
	sent, trimmed := fitContext(history, budget)
	c.lastEstimate = fixed + estimateTokens(sent)
	system, sent := c.applySchema(&p, c.cfg.System, sent)
	p.Messages = toParams(system, sent)
	if c.cfg.Temperature != nil {
		p.Temperature = param.NewOpt(*c.cfg.Temperature)
	}
	if reg != nil {
		if trimmed || hasCut(history) {
			defs = append(defs, pageToolDef)
		}
		for _, d := range defs {
			var schema map[string]any
			if err := json.Unmarshal(d.Parameters, &schema); err != nil || schema == nil {
				schema = map[string]any{"type": "object"}
			}
			fd := shared.FunctionDefinitionParam{Name: d.Name, Parameters: schema}
			if d.Description != "" {
				fd.Description = param.NewOpt(d.Description)
			}
			p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fd))
		}
		if len(p.Tools) > 0 && c.cfg.ParallelToolCalls != nil {
			p.ParallelToolCalls = param.NewOpt(*c.cfg.ParallelToolCalls)
		}
	}
	if stream {
		p.StreamOptions.IncludeUsage = param.NewOpt(true)
	}
	return p
}

// toParams converts the history to openai-go's message params. Assistant
// tool calls are built here (not with ToParam, which drops calls without
// "type"), always with type "function" and JSON arguments.
func toParams(system string, history []Message) []openai.ChatCompletionMessageParamUnion {
	out := make([]openai.ChatCompletionMessageParamUnion, 0, len(history)+1)
	if system != "" && (len(history) == 0 || history[0].Role != RoleSystem) {
		out = append(out, openai.SystemMessage(system))
	}
	for _, m := range history {
		switch m.Role {
		case RoleSystem:
			out = append(out, openai.SystemMessage(m.Content))
		case RoleUser:
			out = append(out, openai.UserMessage(m.Content))
		case RoleTool:
			out = append(out, openai.ToolMessage(m.Content, m.ToolCallID))
		case RoleAssistant:
			a := openai.ChatCompletionAssistantMessageParam{}
			if m.Interrupted {
				m.Content = strings.TrimRight(m.Content, " \t\r\n") + interruptedNote
			}
			if m.Content != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = param.NewOpt(m.Content)
			}
			for _, tc := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: wireArguments(tc)},
					},
				})
			}
			out = append(out, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		}
	}
	return out
}

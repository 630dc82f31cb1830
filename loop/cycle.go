package loop

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/registry"
)

// RepeatLimit is how many turns in a row may make the same call before
// the model is told; one more ends the run (ErrRepeatedCall).
const RepeatLimit = 3

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
	info    ProviderInfo // cfg.Provider.Info()
	running atomic.Bool

	mu      sync.Mutex
	history []Message
	usage   Usage
	cur     Usage // the run in progress: its requests' tokens and Spend's
	ids     *idAllocator

	schema         *responseSchema // compiled Config.ResponseSchema, or nil
	schemaFallback bool            // SchemaAuto fell back to the prompt instruction
	learnedBudget  int             // token budget learnt from a context overflow; 0 none
	lastEstimate   int             // estimated tokens of the last request
	approved       map[string]bool // tool+grant keys approved for the session (approve.go); under mu
	pending        []ToolCall      // calls left open by ErrApprovalPending, for Resume; under mu
}

// New returns a Cycle for cfg. It fails if Provider is nil or names no
// model, or History is invalid (ErrInvalidHistory); it makes no request.
func New(cfg Config) (*Cycle, error) {
	if cfg.Provider == nil {
		return nil, errors.New("loop.Config.Provider is required (chat.New, responses.New, anthropic.New or gemini.New)")
	}
	info := cfg.Provider.Info()
	if strings.TrimSpace(info.Model) == "" {
		return nil, errors.New("the provider names no model")
	}
	cfg.Limits = cfg.Limits.withDefaults()
	schema, err := compileResponseSchema(cfg.ResponseSchema)
	if err != nil {
		return nil, err
	}
	c := &Cycle{cfg: cfg, info: info, schema: schema}
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
	c.history = history
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

// Spend counts u, tokens spent for the run in progress outside its own
// model requests (an MCP server's sampling request answered by the
// run's model), in the run: in Config.MaxTotalTokens (checked before its
// next request), the Response's Usage, and Usage. Outside a run it counts
// in Usage only. Safe to call from any goroutine, e.g. from a tool call
// the run is waiting for.
func (c *Cycle) Spend(u Usage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.usage.add(u)
	if c.running.Load() {
		c.cur.add(u)
	}
}

// RunUsage returns the tokens the run in progress has used so far (its
// requests' and Spend's), its budget (Config.MaxTotalTokens; 0: none),
// and whether a run is in progress. Safe to call from any goroutine.
func (c *Cycle) RunUsage() (used Usage, budget int64, running bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running.Load() {
		return Usage{}, c.cfg.MaxTotalTokens, false
	}
	return c.cur, c.cfg.MaxTotalTokens, true
}

// startUsage starts the count of a run (run, resume).
func (c *Cycle) startUsage() {
	c.mu.Lock()
	c.cur = Usage{}
	c.mu.Unlock()
}

// runUsage is the run's count so far.
func (c *Cycle) runUsage() Usage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// Submit sends prompt without tools and returns the reply: Run with
// Turn{Prompt: prompt, Whole: true}, collected. If the model asks for
// tools anyway (a resumed history may make it), each call is answered
// with a not_found tool message and the run goes on.
func (c *Cycle) Submit(ctx context.Context, prompt string) (*Response, error) {
	return c.run(ctx, prompt, nil, nil, false)
}

// SubmitWithTools sends prompt with reg's tools and runs the tool cycle
// until the model answers without tool calls: Run with Turn{Prompt:
// prompt, Tools: reg, Whole: true}, collected. Each reply's calls run in
// parallel through reg.InvokeAll and their results (or errors, as
// "error (<kind>): <message>") go back to the model in call order. Tool
// errors never end a run; transport and provider errors, cancellation,
// MaxTurns and a repeated call do, and the history stays valid. Requests
// are non-streamed. reg may be nil (no tools).
func (c *Cycle) SubmitWithTools(ctx context.Context, prompt string, reg *registry.Registry) (*Response, error) {
	return c.run(ctx, prompt, reg, nil, false)
}

// SubmitStreamWithTools is Run with Turn{Prompt: prompt, Tools: reg}:
// SubmitWithTools over streamed requests, as a sequence of events.
func (c *Cycle) SubmitStreamWithTools(ctx context.Context, prompt string, reg *registry.Registry) iter.Seq2[Event, error] {
	return c.Run(ctx, Turn{Prompt: prompt, Tools: reg})
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
var errStopped = errors.New("consumer stopped")

// run is the one tool cycle behind a prompt (Run and the Submit
// methods). emit returns false when the consumer stopped (nil: no one
// listens); stream asks for streamed replies.
func (c *Cycle) run(ctx context.Context, prompt string, reg *registry.Registry, emit func(Event) bool, stream bool) (resp *Response, err error) {
	if !c.running.CompareAndSwap(false, true) {
		return nil, ErrBusy
	}
	defer c.running.Store(false)
	c.startUsage()
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
		c.cur.add(rep.Usage)
		c.mu.Unlock()
		c.appendMessage(Message{Role: RoleAssistant, Content: rep.Content, ToolCalls: rep.Calls, Reasoning: rep.Reasoning})
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
			return &Response{Text: text, FinishReason: reason, Turns: turn, Usage: c.runUsage()}, nil
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
	calls   int            // tool calls the model asked for in this run (Config.MaxToolCalls)
	open    []ToolCall     // calls of the last reply not yet answered
	repeats map[string]int // call signature -> consecutive turns it was made

	schemaRetried bool // a final answer failed the schema and was asked again

	decisions map[string]Decision // given in Turn.Decisions, by call id
	paused    []ApprovalRequest   // calls waiting for a decision (ErrApprovalPending), or deferred
	deferred  bool                // paused holds deferred calls (Config.DeferCalls)
	undecided []ApprovalRequest   // deferred calls without a decision (Config.DeferDecisions)
	// supplied answers the calls of this batch instead of the registry
	// (Turn.Results), by call id; nil: the registry runs them.
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

// maxReplyBytes bounds what one reply may make the provider hold (text,
// reasoning, names, arguments, plus EventCost per streamed event), so a
// runaway stream fails with ErrBadResponse instead of exhausting memory.
var maxReplyBytes = 64 << 20

// attempt makes one attempt of a model request with the current history;
// request retries it. On a failed stream it returns what was streamed so
// far, and for a streamed one that succeeded the time to its first event.
func (r *runState) attempt(ctx context.Context, stream bool) (Reply, time.Duration, error) {
	c := r.c
	req := c.buildRequest(r.reg, stream)
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	if t := c.cfg.RequestTimeout; t > 0 {
		var cancelT context.CancelFunc
		actx, cancelT = context.WithTimeout(actx, t)
		defer cancelT()
	}
	// The idle timer cancels the attempt when no event comes in time.
	idle := c.cfg.StreamIdleTimeout
	var stalled atomic.Bool
	var timer *time.Timer
	stopped := false
	start := time.Now()
	var first time.Duration
	if stream {
		if idle > 0 {
			timer = time.AfterFunc(idle, func() { stalled.Store(true); cancel() })
			defer timer.Stop()
		}
		req.OnDelta = func(d Delta) {
			if first == 0 {
				first = max(time.Since(start), 1)
			}
			if timer != nil {
				timer.Reset(idle)
			}
			if stopped {
				return
			}
			if d.Reasoning != "" && !r.emit(&ReasoningDelta{Text: d.Reasoning}) ||
				d.Text != "" && !r.emit(&TextDelta{Text: d.Text}) {
				stopped = true
				cancel()
			}
		}
	}
	rep, err := c.cfg.Provider.Request(actx, req)
	var out Reply
	if rep != nil {
		out = *rep
	}
	out.Model, out.ID = textsafe.Clean(out.Model, 200), textsafe.Clean(out.ID, 200)
	switch {
	case stopped:
		return out, first, errStopped
	case err == nil:
	case ctx.Err() != nil:
		return out, first, fmt.Errorf("request: %w", ctx.Err())
	case stalled.Load():
		return out, first, &idleError{after: idle}
	case errors.Is(actx.Err(), context.DeadlineExceeded):
		return out, first, fmt.Errorf("request timed out after %s: %w", c.cfg.RequestTimeout, context.DeadlineExceeded)
	default:
		return out, first, err
	}
	if err := checkReply(&out, c.info); err != nil {
		return Reply{}, first, err
	}
	return out, first, nil
}

// buildRequest builds the next request from the history: the messages
// that fit the context window, the tools, the schema.
func (c *Cycle) buildRequest(reg *registry.Registry, stream bool) *Request {
	pl := c.plan(reg)
	req := &Request{Stream: stream, MaxReplyBytes: maxReplyBytes, Trimmed: pl.trimmed}
	c.mu.Lock()
	c.lastEstimate = pl.estimate
	c.mu.Unlock()
	system, sent := c.applySchema(req, c.cfg.System, pl.sent)
	if len(sent) > 0 && sent[0].Role == RoleSystem {
		system, sent = sent[0].Content, sent[1:] // a history's own system prompt wins
	}
	req.System = system
	req.Messages = wireMessages(sent, c.info)
	if reg != nil {
		defs := pl.defs
		if pl.trimmed || hasCut(pl.history) {
			defs = append(defs, pageToolDef)
		}
		req.Tools = defs
	}
	return req
}

// requestPlan is what the next request would send.
type requestPlan struct {
	history  []Message             // the whole history
	sent     []Message             // what fits the context budget
	trimmed  bool                  // sent is smaller than history
	defs     []registry.Definition // the registry's tools, the page tool left out
	estimate int                   // tokens, everything included
}

// plan fits the history to the context budget.
func (c *Cycle) plan(reg *registry.Registry) requestPlan {
	c.mu.Lock()
	history := c.history
	c.mu.Unlock()
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
	return requestPlan{history: history, sent: sent, trimmed: trimmed, defs: defs, estimate: fixed + estimateTokens(sent)}
}

// wireMessages is the history as a provider is sent it: an interrupted
// reply ends in its note, arguments are valid JSON, and reasoning goes
// only to the provider that produced it.
func wireMessages(history []Message, info ProviderInfo) []Message {
	out := make([]Message, len(history))
	for i, m := range history {
		if m.Role == RoleAssistant {
			if m.Interrupted {
				m.Content = strings.TrimRight(m.Content, " \t\r\n") + interruptedNote
			}
			if len(m.ToolCalls) > 0 {
				calls := make([]ToolCall, len(m.ToolCalls))
				for j, tc := range m.ToolCalls {
					tc.Arguments = wireArguments(tc)
					calls[j] = tc
				}
				m.ToolCalls = calls
			}
			if !m.Reasoning.sameSource(info) {
				m.Reasoning = nil
			}
		}
		m.FullContent = ""
		out[i] = m
	}
	return out
}

package loop

import (
	"context"
	"encoding/json"
	"time"
)

// Config configures a Cycle, in groups: what the provider needs
// (Provider, System); the conversation (History, ResponseSchema,
// SchemaMode); the limits ([Limits]) and the callbacks ([Hooks]); and two
// modes of Run (ResumePending, DeferCalls). Limits and Hooks are
// embedded, so their fields read and assign as Config's own
// (cfg.MaxTurns, cfg.OnMessage = f); only a composite literal names them:
//
//	loop.Config{Provider: p, Limits: loop.Limits{MaxTurns: 8}}
//
// The modes are for runs whose calls are answered later, by a Cycle made
// again from the saved History. [Cycle.Run] is the one entry, and a
// [Turn] without a Prompt answers the calls an earlier run left waiting:
// with Decisions (calls waiting for a person's yes: ErrApprovalPending)
// or with Results (calls that ran elsewhere). DeferCalls makes a run stop
// with its calls waiting instead of running them; ResumePending makes
// New keep the calls the saved History left waiting, for such a Turn.
// Package cluster sets both in each of its model steps, whose calls run
// on the cluster's workers.
//
// The zero value of each field means its default; only Provider is
// required.
type Config struct {
	// Provider is the model API the Cycle talks to: chat.New,
	// responses.New, anthropic.New, gemini.New (packages under loop/), or
	// an embedder's own. Required: New fails without it.
	Provider Provider
	// System is the system prompt, sent first in every request unless the
	// history already starts with a system message. It is configuration,
	// not history: it is not in Messages() and not given to OnMessage, so a
	// resumed session uses the current prompt. Zero: no system prompt.
	System string

	// History, if set, is a saved conversation to continue (see Messages).
	// Its tool messages are cleaned and capped as new ones are (a session
	// saved by an older agrun may hold anything). New checks it: if only
	// the answers to the last tool calls are missing (a session cut short
	// while tools ran), it appends "cancelled" tool messages for them and
	// passes them to OnMessage; any other defect is an ErrInvalidHistory.
	// Nil: a new conversation.
	History []Message
	// ResponseSchema, if set, is a JSON Schema (its root an object schema,
	// checked like a tool's parameters: registry.CompileSchema) that the
	// final answer must match. It is asked for as SchemaMode says; each
	// final answer is validated with the registry's metered validator
	// (a StructuredOutput event reports it); an answer that does not match
	// is sent back once with the error, a second fails the run with
	// ErrInvalidOutput. Response.Text is then the answer's JSON. Nil: the
	// answer is free text.
	ResponseSchema json.RawMessage
	// SchemaMode says how ResponseSchema is asked for. Zero: SchemaAuto.
	SchemaMode SchemaMode

	// Limits bound each run and each of its requests. Zero: every
	// limit's default (see Limits).
	Limits
	// Hooks are the callbacks that see a Cycle's messages, requests and
	// decisions, and the Approver. Zero: no callbacks, and every call runs
	// without asking.
	Hooks

	// ResumePending: if History ends with tool calls left unanswered (a
	// run that stopped with ErrApprovalPending or ErrCallsDeferred,
	// saved), New keeps them open (Pending) for Run with Turn.Decisions or
	// Turn.Results instead of answering them "cancelled". A Turn with a
	// Prompt answers them "cancelled" first. False: New answers them
	// "cancelled".
	ResumePending bool
	// DeferCalls: the calls of a reply that the loop would run through
	// the registry are not run here; the run ends with a
	// *CallsDeferredError listing them (the calls the loop answers itself
	// — unknown tools, calls over a budget, the page tool — are answered
	// as usual), and Run with Turn.Results answers them with what they
	// returned where they did run (a cluster's workers: package cluster)
	// and goes on. With an Approver, the calls that need a yes are decided
	// before the run ends, in call order: the approved ones are deferred,
	// the denied ones answered; a decision that would wait
	// (ErrApprovalPending) denies the call (but see DeferDecisions).
	// False: the registry runs the calls here.
	DeferCalls bool
	// DeferDecisions, with DeferCalls: a call whose decision would wait
	// (ErrApprovalPending) is not denied but deferred undecided, listed
	// in CallsDeferredError.Undecided; whoever runs the deferred calls
	// must get and record its decision before running it, and answers it
	// in Turn.Results either way (a denial as a denied_by_user
	// invocation). Package cluster's model steps set it: the workflow
	// waits for the decision.
	DeferDecisions bool
}

// Defaults for the zero values of Limits.
const (
	// DefaultMaxTurns bounds the model requests of one run
	// (Limits.MaxTurns).
	DefaultMaxTurns = 10
	// DefaultMaxToolCallsPerTurn bounds the calls run for one reply
	// (Limits.MaxToolCallsPerTurn).
	DefaultMaxToolCallsPerTurn = 32
	// DefaultMaxToolMessageBytes caps each tool message sent to the model
	// (Limits.MaxToolMessageBytes): 32 KiB, about 8–10k tokens.
	DefaultMaxToolMessageBytes = 32 << 10
	// DefaultMaxRetries is how many times a failed request is retried
	// (Limits.MaxRetries).
	DefaultMaxRetries = 2
	// DefaultMaxRetryWait bounds the time one request may spend waiting
	// between retries (Limits.MaxRetryWait).
	DefaultMaxRetryWait = 30 * time.Second
	// DefaultStreamIdleTimeout bounds the wait for each chunk of a stream
	// (Limits.StreamIdleTimeout).
	DefaultStreamIdleTimeout = 60 * time.Second
)

// Limits bound a Cycle's runs and their requests: turns, tool calls, the
// size of tool messages and requests, timeouts, retries and budgets. The
// zero value of each field is its default, given with the field (a
// Default constant, or no bound); the zero Limits is every default.
type Limits struct {
	// MaxTurns bounds the model requests of one run (ErrMaxTurns). Zero
	// or negative: DefaultMaxTurns.
	MaxTurns int
	// MaxToolCallsPerTurn bounds the calls run for one reply; further calls
	// are answered with an error tool message and not run. Zero or
	// negative: DefaultMaxToolCallsPerTurn.
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
	// method, never concurrently by one Cycle. Nil: MaxToolMessageBytes
	// for every tool.
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
	// RequestTimeout bounds each attempt of a request, including reading
	// a whole streamed reply; one that takes longer fails (KindTimeout,
	// not retried). Zero: no bound other than the context.
	RequestTimeout time.Duration
	// MaxRetries is how many times a request that failed with a connection
	// error, 408, 409, 429 or 5xx, a stream that broke off before its end
	// marker or a stalled stream is retried, with a backoff (0.5 s
	// doubling, capped at 8 s) or the server's retry-after-ms /
	// Retry-After. Each retry is a Retry event. The loop retries, not the
	// SDKs (the adapters build their clients with no retries), so that
	// retries are seen and bounded. Zero means DefaultMaxRetries; negative
	// means none.
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
	// are not bounded. Zero or negative: no token budget.
	MaxTotalTokens int64
	// MaxToolCalls, if positive, is the run's budget of tool calls: the
	// calls past it are not run (each is answered "not run") and the run
	// ends after that turn with a *BudgetError (ErrToolCallBudget). Zero
	// or negative: no budget (MaxToolCallsPerTurn still bounds each
	// reply).
	MaxToolCalls int
}

// withDefaults returns l as the Cycle uses it, the one place the zero
// values are read: each zero field given its default, MaxTurns and
// MaxToolCallsPerTurn at least 1, MaxToolMessageBytes at least 1024 or 0
// (no cap), and MaxRetries, MaxRetryWait and StreamIdleTimeout 0 for
// none or no bound. ToolResultLimit, ContextWindow, RequestTimeout,
// MaxTotalTokens and MaxToolCalls are read as they are.
func (l Limits) withDefaults() Limits {
	if l.MaxTurns <= 0 {
		l.MaxTurns = DefaultMaxTurns
	}
	if l.MaxToolCallsPerTurn <= 0 {
		l.MaxToolCallsPerTurn = DefaultMaxToolCallsPerTurn
	}
	switch {
	case l.MaxToolMessageBytes == 0:
		l.MaxToolMessageBytes = DefaultMaxToolMessageBytes
	case l.MaxToolMessageBytes < 0:
		l.MaxToolMessageBytes = 0 // textsafe: no cap
	case l.MaxToolMessageBytes < 1024:
		l.MaxToolMessageBytes = 1024
	}
	switch {
	case l.MaxRetries == 0:
		l.MaxRetries = DefaultMaxRetries
	case l.MaxRetries < 0:
		l.MaxRetries = 0
	}
	l.MaxRetryWait = orDefault(l.MaxRetryWait, DefaultMaxRetryWait)
	l.StreamIdleTimeout = orDefault(l.StreamIdleTimeout, DefaultStreamIdleTimeout)
	return l
}

// orDefault is d, def if d is zero, and 0 (none) if d is negative.
func orDefault(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// Hooks are the callbacks of a Cycle, and its Approver. The zero value
// of each field is nil: nothing is called, and without an Approver every
// call runs without asking.
type Hooks struct {
	// OnMessage, if set, is called synchronously, in order, with each
	// message appended to the history (the user prompt, each assistant
	// reply, each tool message), from the goroutine running the Submit
	// method. It must not call Submit methods of the same Cycle. Nil:
	// not called.
	OnMessage func(Message)
	// OnRequest, if set, is called after each model request (retries
	// included, failed requests too) with what it cost, from the goroutine
	// running the Submit method. Nil: not called.
	OnRequest func(RequestInfo)
	// OnDecision, if set, is called with every decision about a call
	// (Approver's answers, and calls run because their tool was approved
	// for the session), from the goroutine ranging over Run's sequence,
	// before the call runs or is answered. Nil: not called.
	OnDecision func(DecisionRecord)
	// ToolContext, if set, gives the context a tool call runs in: called
	// for each call the registry is about to run (after its
	// ToolExecutionStarted), with the run's context and the call's id and
	// name — from the goroutine running the Submit method, or, while an
	// Approver is asked about other calls of the reply, from another
	// (it must be safe for concurrent use). The context it
	// returns must derive from ctx (e.g. carry a span the tool's own
	// requests are children of: telemetry's Run.ToolContext). Nil: the
	// run's context.
	ToolContext func(ctx context.Context, id, name string) context.Context
	// Approver, if set, decides which tool calls need a person's yes and
	// gives the decisions (see Approver); a denied call is answered
	// "error (denied_by_user): <reason>" and the run goes on. Nil runs
	// every call without asking.
	Approver Approver
}

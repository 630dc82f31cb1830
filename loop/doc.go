// Package loop is the LLM tool-calling cycle: it sends a conversation to
// a model through a [Provider], runs the tools the model asks for through
// a [registry.Registry], sends their results back, and repeats until the
// model answers. The providers are packages of their own, one per wire
// API, so that a program links only the SDKs it uses: loop/chat (OpenAI
// Chat Completions and every server that speaks it: Ollama, vLLM,
// llama.cpp, LM Studio, OpenRouter, Groq, DeepSeek, ...), loop/responses
// (OpenAI Responses), loop/anthropic (Anthropic Messages), loop/gemini
// (Gemini generateContent); an embedder may write its own.
//
//	p, err := chat.New(chat.Config{BaseURL: "http://localhost:11434/v1", Model: "qwen3"})
//	if err != nil { ... }
//	c, err := loop.New(loop.Config{Provider: p, Limits: loop.Limits{MaxTurns: 8}})
//	if err != nil { ... }
//	resp, err := c.SubmitWithTools(ctx, "How many words are in README.md?", reg)
//	if err != nil { ... }           // errors.Is(err, loop.ErrMaxTurns), *loop.APIError, ...
//	fmt.Println(resp.Text)
//
// A [Config] is what the provider needs (Provider, System), the
// conversation (History, ResponseSchema), the [Limits] (turns, calls,
// sizes, timeouts, retries, budgets) and the [Hooks] (OnMessage,
// OnRequest, OnDecision, the Approver), and two modes of Run used by
// package cluster (ResumePending, DeferCalls). Limits and Hooks are
// embedded, so cfg.MaxTurns and cfg.OnMessage read and assign as
// Config's own fields; only a literal names them, as above. The zero
// value of every field is its default.
//
// Every run goes through one entry, [Cycle.Run], given a [Turn]: a
// prompt, or the decisions or results of calls an earlier run left
// waiting; it streams the run as events (the Submit methods are Run with
// a prompt, collected):
//
//	for ev, err := range c.Run(ctx, loop.Turn{Prompt: prompt, Tools: reg}) {
//		if err != nil { ... }       // the run failed; always the last pair
//		switch e := ev.(type) {
//		case *loop.TextDelta:
//			fmt.Print(e.Text)
//		case *loop.ToolExecutionCompleted:
//			line, _ := json.Marshal(e) // {"type":"tool_completed",...}
//			...
//		}
//	}
//
// # The cycle
//
// A run appends the prompt to the history and makes one request per turn.
// Each request offers the model the registry's Definitions: the tools it
// could call (a tool the permission policy denies, or one that is
// [registry.Unavailable], is left out; if the model names one anyway, the
// call fails with its kind, e.g. "error (module_refused): ..."). Whenever a reply carries tool calls (whatever its finish_reason says),
// the calls run in parallel through Registry.InvokeAll and one tool
// message per call is appended in call order: the tool's JSON output, or
// "error (<kind>): <message>" with the registry's error kind. A tool error
// never ends a run; the model reads it and goes on. A run ends with the
// first reply without tool calls, or with an error: a provider or
// transport error, a cancelled context, Config.MaxTurns requests
// ([ErrMaxTurns]), or the same call (same tool, same arguments) made in
// more than [RepeatLimit] turns in a row ([ErrRepeatedCall]; the model is
// warned in the tool message of the RepeatLimit-th repeat), or a budget:
// Config.MaxTotalTokens tokens used before the next request
// ([ErrTokenBudget]) or more than Config.MaxToolCalls tool calls asked
// for ([ErrToolCallBudget]; the calls past it are answered "not run").
// Budgets are per run (one Submit); both are a [*BudgetError] and leave a
// history that the next Submit continues. Tokens spent for a run outside
// its requests ([Cycle.Spend]: an MCP server's sampling answered by the
// same model, say) count in its token budget too.
//
// # Requests
//
// The loop retries a model request itself (the adapters build their SDK
// clients with no retries, so that each retry is seen and bounded): after
// a connection error, HTTP 408, 409, 429 or 5xx (Anthropic's 529 included;
// an "x-should-retry" header overrides the status), a stream that ended
// before its API's end marker ([ErrIncompleteStream]: a half sentence, a
// tool call cut mid-arguments; nothing of it is kept, emitted as complete
// or run), or a stream silent for Config.StreamIdleTimeout, before its
// first event or between events ([ErrStreamIdle], default 60 s). At most
// Config.MaxRetries retries (default 2); each waits for the provider's
// retry-after-ms, Retry-After or [APIError].RetryAfter, else a backoff
// (0.5 s doubling, at most 8 s), and the
// waits of one request add up to at most Config.MaxRetryWait (default
// 30 s): a Retry-After beyond what is left fails the request at once,
// with an error that names the wait. Each retry is a [*Retry] event
// before the wait; the TextDelta and ReasoningDelta events since the last
// TurnComplete are then void, as the reply starts over. Config.RequestTimeout
// (per attempt) and the context end a request without retry.
//
// A streamed reply is complete when its API's end marker arrives
// (finish_reason, response.completed, message_stop, a finishReason; with
// Chat Completions "data: [DONE]" is not required, not every server sends
// it, and a stream that carries [DONE] but no finish_reason is
// incomplete). A reply cut at the model's output limit (the adapters map
// every API's form onto "length") is a complete, if cut, answer: the run
// succeeds with Response.FinishReason and TurnComplete.Reason "length".
//
// Config.OnRequest receives a [RequestInfo] per request (retries
// included; failed ones too): the model that answered, its [Usage] with
// cached and reasoning tokens where the provider reports them, duration,
// retries, finish_reason and error.
//
// # History
//
// The history ([Cycle.Messages]) is append-only and always valid to send:
// every assistant tool call is followed by exactly one tool message, also
// when a run is cancelled mid-tool or a stream consumer stops early (the
// open calls are answered "error (cancelled): ..."). A reply that a
// cancellation cuts short while it streams (a cancelled context, a
// consumer that stops ranging) is kept as far as it was streamed, as an
// assistant message with Interrupted set and no tool calls, so the next
// turn's history says what the user saw; it is sent back with
// " [interrupted by the user]" appended. Tool-call ids are
// never empty: missing or duplicate ids get a synthesized "call_<n>".
// [Message] has a stable JSON form; Config.OnMessage sees every message as
// it is appended, so a caller can store a session one JSON line per
// message and resume it with Config.History. What a request sends may be
// less than the history (see Tool results and Context window); the
// history itself is never trimmed.
//
// # Tool results
//
// Each tool message the model is sent is capped (Config.MaxToolMessageBytes,
// 32 KiB by default; Config.ToolResultLimit per tool). A longer result is
// sent as valid JSON showing its head and tail, with a note giving its
// full size and how to read the rest; the whole result stays in the
// history as [Message].FullContent, which OnMessage stores and requests
// never send. Once a result in the history was cut, the requests of tool
// runs offer a built-in, read-only tool, [PageToolName]
// (agrun_result_page {call_id, offset, length}), which the loop answers
// itself from the history: offset and length are bytes of the result's
// text (the string itself for a string result, else its JSON), a page is
// at most [DefaultPageBytes] (less under a small cap), and a bad call_id,
// offset or argument is an ordinary tool error. A resumed history pages
// the same way. The name is reserved: a registry tool named
// agrun_result_page is never offered to the model.
//
// # Approvals
//
// With Config.Approver set, a person (or a program acting for one)
// decides tool calls before they run. For each call the run would
// otherwise make, the loop asks [Approver].NeedsApproval with an
// [ApprovalRequest]: the call id, the tool, its arguments (cleaned) and
// the [registry.Grant] it would run with ([registry.DescribeGrant]: for a
// WASM tool the mounts with host paths and modes, allowed hosts and
// limits; for an MCP tool the server and its annotation hints). The calls
// that need no yes start at once; Approve is then asked about the others,
// one at a time in call order, and the approved ones start too; the tool
// messages stay in call order. Answers are [ApproveOnce],
// [ApproveSession] (the tool is not asked about again in this Cycle),
// [ApproveAlways] (the same here; the Approver persists it) and [Deny]
// with a reason: a denied call is not run and is answered
// "error (denied_by_user): <reason>" ([registry.DeniedByUser]); the run
// goes on. An error from Approve denies the call ("no decision: ...").
// Every decision, remembered session approvals included, goes to
// Config.OnDecision as a [DecisionRecord] (who, when, grant, answer).
// Nil Approver: every call runs unasked, as before approvals.
//
// An Approve that returns [ErrApprovalPending] defers the decision: the
// reply's other calls run and are answered, an [*ApprovalRequired] event
// is emitted per waiting call, and the run ends with an
// [*ApprovalPendingError]; the waiting calls stay open ([Cycle.Pending]).
// [Cycle.Run] with [Turn].Decisions decides them (by call id, the
// Approver the others), answers them after the ones already
// answered, and goes on with the next model request — the request that
// asked for the calls is not repeated. A Cycle built from the saved
// history with Config.ResumePending resumes the same way; a Submit
// method instead answers waiting calls "cancelled" first.
//
// # Calls that run elsewhere
//
// With Config.DeferCalls the loop makes the model requests but leaves the
// calls it would run through the registry to someone else: the run ends
// with a *CallsDeferredError (ErrCallsDeferred) listing them, each with
// its registry.Grant, and the history ends with them unanswered.
// Run with [Turn].Results, on that Cycle or on one built from the saved
// history with Config.ResumePending, answers them with the
// registry.Invocation each returned where it ran (AnswerOnly: and ends
// there), and the run goes on
// exactly as if they had run here (the same caps, paging, events, repeat
// checks and budgets). Package cluster runs each call as a Temporal
// activity on a worker this way, and each model request as another.
//
// # Context window
//
// With Config.ContextWindow (tokens), each request — messages, system
// prompt, tool definitions — is estimated at a third of its bytes — higher than the usual quarter,
// because tool results are JSON and code, which tokenize finely, and an
// estimate that errs high trims a little early while one that errs low
// overflows — and, past seven eighths of the window, the request (never
// the history) is trimmed: the tool results of earlier turns, oldest
// first, become notes naming the call, the tool and the size (readable
// again with the page tool); then whole earlier turns go, oldest first;
// then the current turn's results, each to the head and tail of it that
// fit. Tool calls always keep their tool messages. A provider that
// refuses a request as too long (OpenAI's context_length_exceeded,
// Anthropic's "prompt is too long", Gemini's "input token count exceeds",
// the forms of vLLM, DeepSeek, OpenRouter, llama.cpp, HTTP 413:
// [ErrContextOverflow]; a [Retry] event says so) gets it once more,
// trimmed to what fits in the window it names (scaled by how far the
// estimate was from its count), else to three quarters of the estimate,
// with or without ContextWindow; the Cycle keeps the smaller bound. When
// nothing can be trimmed (a system prompt and one prompt), the run ends
// at once with [KindContextOverflow] instead: the same request would be
// refused again. A second refusal ends the run likewise; the history is
// whole and the next run trims again, so a session that overflowed can
// always continue. [Compact] shrinks a stored history for good.
//
// # Structured output
//
// With Config.ResponseSchema (an object schema, checked by
// registry.CompileSchema: size, references, cost), requests carry the
// schema as [Request].Schema, which each adapter sends in its API's form
// (response_format json_schema, strict when the schema is in OpenAI's
// strict subset; text.format; output_config.format; responseJsonSchema)
// — or, under [SchemaPrompt], for a provider without
// [ProviderInfo].StructuredOutput, or after a provider refused the schema
// under [SchemaAuto], an instruction in the system prompt.
// Every final answer (a reply without tool calls) is decoded strictly and
// validated by the registry's metered validator (a ```json fence is
// allowed) and reported by a [StructuredOutput] event. One that does not
// match is answered with a user message holding the validator's error and
// asked for again, once; a second fails the run with [ErrInvalidOutput]
// (KindInvalidOutput). Response.Text is the answer's JSON.
//
// # Providers
//
// A [Provider] makes one attempt of one [Request] (the messages that fit,
// the system prompt, the tools, the schema) and returns a [Reply]; the
// loop does the rest, the same for every API. Reasoning a reply needs
// back — Chat Completions' "reasoning_content" (DeepSeek refuses a
// tool-call turn without it), Responses' reasoning items with their
// encrypted content, Anthropic's signed thinking blocks, Gemini's thought
// signatures — comes as [Reasoning]: readable text, shown as
// [*ReasoningDelta] events, and the adapter's opaque parts. The loop
// keeps it in the history ([Message].Reasoning, so a stored session
// resumes with it), stamped with the provider's API, endpoint and model,
// and sends it back only to that provider: a history continued with
// another drops it and keeps the text and tool calls. A reply is bounded
// (64 MiB, its reasoning included; reasoning at most [MaxReasoningBytes]).
// An HTTP error that is not retried (see Requests), or still fails after
// the retries, becomes an [*APIError] with the server's own message,
// whatever shape its error body has; an error event inside a stream too
// (Groq's failed tool-call generation, Anthropic's overload).
//
// The Chat Completions adapter (loop/chat) assembles streams itself, not
// with openai-go's ChatCompletionAccumulator, because real servers send
// shapes it mis-assembles: calls whole in one chunk, all calls at index 0
// with different ids, indices starting at 1, no index or type,
// finish_reason in the same chunk as the call, empty or missing ids, the
// name repeated in every chunk, empty arguments (meaning {}), and
// "choices": [] chunks.
//
// # Concurrency
//
// A Cycle runs one Submit (or Resume) at a time (a concurrent one gets [ErrBusy]);
// Messages and Usage may be called from any goroutine. Streaming runs in
// the goroutine that ranges over the sequence: no goroutine is left behind
// when it stops early.
package loop

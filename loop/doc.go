// Package loop is the LLM tool-calling cycle: it sends a conversation to
// any OpenAI-compatible Chat Completions API (OpenAI, Ollama, vLLM,
// llama.cpp server, LM Studio, OpenRouter, Groq, ...) through openai-go,
// runs the tools the model asks for through a [registry.Registry], sends
// their results back, and repeats until the model answers.
//
//	c, err := loop.New(loop.Config{BaseURL: "http://localhost:11434/v1", Model: "qwen3", MaxTurns: 8})
//	if err != nil { ... }
//	resp, err := c.SubmitWithTools(ctx, "How many words are in README.md?", reg)
//	if err != nil { ... }           // errors.Is(err, loop.ErrMaxTurns), *loop.APIError, ...
//	fmt.Println(resp.Text)
//
// Streamed, as events:
//
//	for ev, err := range c.SubmitStreamWithTools(ctx, prompt, reg) {
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
// warned in the tool message of the RepeatLimit-th repeat).
//
// # History
//
// The history ([Cycle.Messages]) is append-only and always valid to send:
// every assistant tool call is followed by exactly one tool message, also
// when a run is cancelled mid-tool or a stream consumer stops early (the
// open calls are answered "error (cancelled): ..."). Tool-call ids are
// never empty: missing or duplicate ids get a synthesized "call_<n>".
// [Message] has a stable JSON form; Config.OnMessage sees every message as
// it is appended, so a caller can store a session one JSON line per
// message and resume it with Config.History.
//
// # Providers
//
// Streams are assembled by this package, not by openai-go's
// ChatCompletionAccumulator, because real servers send shapes it
// mis-assembles: calls whole in one chunk, all calls at index 0 with
// different ids, indices starting at 1, no index or type, finish_reason
// in the same chunk as the call, empty or missing ids, the name repeated
// in every chunk, empty arguments (meaning {}), "choices": [] chunks, and
// an error event mid-stream (Groq), which becomes an [*APIError]. HTTP 408,
// 409, 429 and 5xx are retried by openai-go (Config.MaxRetries, honouring
// retry-after-ms and retry-after); other statuses become an *APIError with
// the server's own message, whatever shape its error body has.
//
// # Concurrency
//
// A Cycle runs one Submit at a time (a concurrent one gets [ErrBusy]);
// Messages and Usage may be called from any goroutine. Streaming runs in
// the goroutine that ranges over the sequence: no goroutine is left behind
// when it stops early.
package loop

package loop

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/agcore/agrun/registry"
)

// Event is one step of a streamed run: *TextDelta, *ReasoningDelta,
// *Retry, *ToolExecutionStarted, *ToolExecutionCompleted, *TurnComplete
// or, with Config.ResponseSchema, *StructuredOutput, or, with an Approver
// that defers (ErrApprovalPending), *ApprovalRequired, after the reply's
// ToolExecutionCompleted events and last of the run (always pointers).
// Each event marshals to the JSON line of `agrun run --json`, "type"
// first.
//
// Order within one turn (one model request):
//
//	(ReasoningDelta | TextDelta)* Retry   each failed attempt that is retried:
//	                            what it streamed, then the retry (the
//	                            deltas before it are void)
//	ReasoningDelta*, TextDelta* the reply's reasoning and text, as they
//	                            arrive (interleaved as the provider sends them)
//	TurnComplete                the model's reply is complete
//	ToolExecutionStarted*       each call handed to the registry, in call order
//	ToolExecutionCompleted*     one per tool call of the reply: each call that
//	                            ran as soon as it finishes (calls of a turn run
//	                            in parallel, so in the order they finish), then
//	                            the calls that were not run, in call order
//
// then the next turn. The last event of a successful run is the
// TurnComplete of a reply without tool calls (with Config.ResponseSchema,
// the StructuredOutput that follows it). The built-in page tool's calls
// (PageToolName) get a ToolExecutionStarted and a ToolExecutionCompleted
// like the registry's. A call that is not run (too
// many calls in one turn, a repeated call that ends the run) gets a
// ToolExecutionCompleted without a ToolExecutionStarted.
type Event interface {
	// EventType is the "type" of the event's JSON form: "text_delta",
	// "reasoning_delta", "retry", "tool_started", "tool_completed" or
	// "turn_complete".
	EventType() string
}

// TextDelta is a fragment of the assistant's reply text.
type TextDelta struct {
	Text string
}

// ToolExecutionStarted says a tool call was handed to the registry.
type ToolExecutionStarted struct {
	ID    string          // the tool_call_id
	Name  string          // the tool's name
	Input json.RawMessage // the arguments as the model wrote them ("{}" if empty; may be invalid JSON)
}

// ToolExecutionCompleted is the outcome of one tool call: what the model is
// shown in the call's tool message.
type ToolExecutionCompleted struct {
	ID   string
	Name string
	// Input is the call's arguments as the model gave them (as in its
	// ToolExecutionStarted; a call that did not run had none): for the
	// person's view of the call. Not in MarshalJSON's output.
	Input json.RawMessage
	// Output is the tool's JSON result, or when IsError a JSON string
	// holding the error message (without the "error (<kind>): " prefix).
	Output    json.RawMessage
	IsError   bool
	ErrorKind registry.Kind // "" unless IsError
	Duration  time.Duration // time spent in the registry; 0 for a call that did not run
	// Audit is what the call did as its host saw it (registry.Audit: the
	// sandbox's record of a WASM tool, the bytes of an MCP call); nil when
	// the tool reports none or the call did not run. It is for the
	// operator (run --json's "audit", sessions, traces), never sent to
	// the model.
	Audit *registry.Audit
}

// TurnComplete ends one model request.
type TurnComplete struct {
	// Reason is "tool_calls" when the reply carries tool calls (whatever
	// finish_reason the provider sent), else the provider's finish_reason
	// ("stop", "length", "content_filter", ...; "stop" if a non-streamed
	// reply carried none, or "tool_calls" with no calls). "length": the
	// reply was cut at the model's output limit.
	Reason string
	// Usage is the tokens of this request, as reported by the provider
	// (zero if it reported none).
	Usage Usage
}

// Usage counts tokens. CachedTokens (prompt tokens served from the
// provider's cache) and ReasoningTokens (completion tokens spent on
// reasoning) are parts of PromptTokens and CompletionTokens, given where
// the provider reports them.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
	CachedTokens     int64 `json:"cached_tokens,omitempty"`
	ReasoningTokens  int64 `json:"reasoning_tokens,omitempty"`
	// CacheWriteTokens are the prompt tokens written to the provider's
	// cache (Anthropic's cache_creation_input_tokens), where reported.
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
}

func (u *Usage) add(v Usage) {
	u.PromptTokens += v.PromptTokens
	u.CompletionTokens += v.CompletionTokens
	u.TotalTokens += v.TotalTokens
	u.CachedTokens += v.CachedTokens
	u.ReasoningTokens += v.ReasoningTokens
	u.CacheWriteTokens += v.CacheWriteTokens
}

// String is u for a person, as agrun run's summary line says it: "1234
// tokens (1200 prompt, 34 completion)", with the cached, reasoning and
// cache-write counts inside the parentheses when they are not zero.
func (u Usage) String() string {
	s := fmt.Sprintf("%d tokens (%d prompt", u.TotalTokens, u.PromptTokens)
	if u.CachedTokens > 0 {
		s += fmt.Sprintf(", %d cached", u.CachedTokens)
	}
	s += fmt.Sprintf(", %d completion", u.CompletionTokens)
	if u.ReasoningTokens > 0 {
		s += fmt.Sprintf(", %d reasoning", u.ReasoningTokens)
	}
	if u.CacheWriteTokens > 0 {
		s += fmt.Sprintf(", %d written to the cache", u.CacheWriteTokens)
	}
	return s + ")"
}

// Add returns the sum of u and v, field by field.
func (u Usage) Add(v Usage) Usage {
	u.add(v)
	return u
}

// Total is TotalTokens, or prompt + completion when the provider gave no
// total: what Config.MaxTotalTokens counts.
func (u Usage) Total() int64 { return u.total() }

// total is TotalTokens, or prompt + completion when the provider gave no total.
func (u *Usage) total() int64 {
	if u.TotalTokens > 0 {
		return u.TotalTokens
	}
	return u.PromptTokens + u.CompletionTokens
}

// EventType implements Event.
func (*TextDelta) EventType() string { return "text_delta" }

// EventType implements Event.
func (*ToolExecutionStarted) EventType() string { return "tool_started" }

// EventType implements Event.
func (*ToolExecutionCompleted) EventType() string { return "tool_completed" }

// EventType implements Event.
func (*TurnComplete) EventType() string { return "turn_complete" }

// MarshalJSON gives {"type":"text_delta","text":"..."}.
func (e *TextDelta) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}{e.EventType(), e.Text})
}

// MarshalJSON gives {"type":"tool_started","id":...,"name":...,"input":<JSON>}.
// An input that is not valid JSON is given as a JSON string.
func (e *ToolExecutionStarted) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Type  string          `json:"type"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}{e.EventType(), e.ID, e.Name, safeJSON(e.Input)})
}

// MarshalJSON gives {"type":"tool_completed","id":...,"name":...,
// "output":<JSON>,"is_error":false,"error_kind":"","duration_ms":3}.
func (e *ToolExecutionCompleted) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Type       string          `json:"type"`
		ID         string          `json:"id"`
		Name       string          `json:"name"`
		Output     json.RawMessage `json:"output"`
		IsError    bool            `json:"is_error"`
		ErrorKind  registry.Kind   `json:"error_kind"`
		DurationMS int64           `json:"duration_ms"`
		Audit      *registry.Audit `json:"audit,omitempty"`
	}{e.EventType(), e.ID, e.Name, safeJSON(e.Output), e.IsError, e.ErrorKind, e.Duration.Milliseconds(), e.Audit})
}

// MarshalJSON gives {"type":"turn_complete","reason":...,"usage":{...}}.
func (e *TurnComplete) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Type   string `json:"type"`
		Reason string `json:"reason"`
		Usage  Usage  `json:"usage"`
	}{e.EventType(), e.Reason, e.Usage})
}

// safeJSON returns raw if it is one valid JSON value, "null" if it is
// empty, and raw as a JSON string otherwise, so that a model's or a tool's
// malformed bytes never break an event line.
func safeJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	if json.Valid(raw) {
		return raw
	}
	s, _ := json.Marshal(string(raw))
	return s
}

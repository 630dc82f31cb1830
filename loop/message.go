package loop

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Role is who wrote a message.
type Role string

// The roles of a conversation.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one entry of a conversation's history. Its JSON form is stable
// (field names and omissions do not change between releases), so a history
// can be stored as one JSON object per message and read back to resume a
// Cycle: json.Marshal then json.Unmarshal gives back an equal Message.
//
// The provider adapters convert messages to their API's wire format:
// arguments that are not valid JSON are sent as "{}" (the tool message
// that answered the call quotes them); Name is not sent; Reasoning goes
// back only to the provider that produced it.
type Message struct {
	Role Role `json:"role"`
	// Content is the text of the message: the prompt, the reply, or for a
	// tool message what the model is shown as the tool's result.
	Content string `json:"content,omitempty"`
	// ToolCalls are the calls an assistant message asks for, in order.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID is, for a tool message, the ID of the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Name is, for a tool message, the name of the tool that was called. It
	// is kept for readers of the history and is not sent to the provider.
	Name string `json:"name,omitempty"`
	// Interrupted marks an assistant message that a cancellation cut short
	// while it streamed (Ctrl-C, a cancelled context, a consumer that
	// stopped ranging): Content is what had arrived, and it has no tool
	// calls. It is sent back as Content (trailing spaces trimmed) + " [interrupted by the user]", so
	// the model knows what the user saw and that it did not end there.
	Interrupted bool `json:"interrupted,omitempty"`
	// FullContent is, for a tool message whose result was longer than its
	// cap (Config.MaxToolMessageBytes, Config.ToolResultLimit), the whole
	// cleaned result; Content then holds its head and tail and a note. It
	// is kept in the history (and so in a stored session: OnMessage gets
	// it) and never sent: the model reads it through the built-in
	// PageToolName tool. Empty when the result was not cut.
	FullContent string `json:"full_content,omitempty"`
	// Reasoning is, for an assistant message, the model's reasoning that
	// came with it (see Reasoning): kept so that the same provider gets
	// it back (DeepSeek's reasoning_content, Responses' reasoning items,
	// Anthropic's signed thinking blocks, Gemini's thought signatures),
	// never sent to another, and shown only when asked. Sessions written
	// before it existed have none.
	Reasoning *Reasoning `json:"reasoning,omitempty"`
}

// ToolCall is one tool call requested by the model.
type ToolCall struct {
	// ID is the call's id: the provider's, or one the loop synthesized
	// ("call_<n>") when the provider sent none or a duplicate. Never empty
	// in a history built by the loop.
	ID string `json:"id"`
	// Name is the tool's name.
	Name string `json:"name"`
	// Arguments is the arguments exactly as the model wrote them, except
	// that an empty string is stored as "{}". It may be invalid JSON; such a
	// call is answered with an invalid_arguments tool message.
	Arguments string `json:"arguments"`
}

// ErrInvalidHistory is returned (wrapped) by New when Config.History cannot
// be sent to a provider and cannot be repaired by appending.
var ErrInvalidHistory = errors.New("invalid history")

// repairHistory checks a saved history and returns the calls of its last
// assistant message left unanswered (cancelledTail answers them, so that
// every assistant tool call is answered by exactly one tool message).
// Only a missing tail can be repaired (a session file cut short while tools
// ran); anything else is ErrInvalidHistory. It also rejects empty or
// duplicate call ids within one assistant message.
func repairHistory(msgs []Message) (open []ToolCall, err error) {
	invalid := func(i int, format string, args ...any) error {
		return fmt.Errorf("%w: message %d: %s", ErrInvalidHistory, i, fmt.Sprintf(format, args...))
	}
	for i, m := range msgs {
		switch m.Role {
		case RoleSystem, RoleUser:
			if len(open) > 0 {
				return nil, invalid(i, "%s message before the answers to %d tool call(s)", m.Role, len(open))
			}
		case RoleAssistant:
			if len(open) > 0 {
				return nil, invalid(i, "assistant message before the answers to %d tool call(s)", len(open))
			}
			seen := map[string]bool{}
			for j, c := range m.ToolCalls {
				if c.ID == "" {
					return nil, invalid(i, "tool call %d has no id", j)
				}
				if seen[c.ID] {
					return nil, invalid(i, "tool call id %q used twice", c.ID)
				}
				seen[c.ID] = true
			}
			open = append(open[:0], m.ToolCalls...)
		case RoleTool:
			k := -1
			for j, c := range open {
				if c.ID == m.ToolCallID {
					k = j
					break
				}
			}
			if k < 0 {
				return nil, invalid(i, "tool message answers no pending call (tool_call_id %q)", m.ToolCallID)
			}
			open = append(open[:k], open[k+1:]...)
		default:
			return nil, invalid(i, "unknown role %q", m.Role)
		}
	}
	return open, nil
}

// cancelledTail answers the calls a saved history left open.
func cancelledTail(open []ToolCall) (tail []Message) {
	for _, c := range open {
		tail = append(tail, toolMessage(c, errorContent("cancelled", "the call did not run: the session ended before its result was recorded")))
	}
	return tail
}

// toolMessage is the tool message answering c.
func toolMessage(c ToolCall, content string) Message {
	return Message{Role: RoleTool, ToolCallID: c.ID, Name: c.Name, Content: content}
}

// errorContent is how a failed call is shown to the model.
func errorContent(kind, message string) string {
	return "error (" + kind + "): " + message
}

// idAllocator hands out "call_<n>" ids that no message of the history uses.
type idAllocator struct {
	used map[string]bool
	next int
}

func newIDAllocator(history []Message) *idAllocator {
	a := &idAllocator{used: map[string]bool{}, next: 1}
	for _, m := range history {
		for _, c := range m.ToolCalls {
			a.used[c.ID] = true
		}
	}
	return a
}

func (a *idAllocator) fresh() string {
	for {
		id := "call_" + strconv.Itoa(a.next)
		a.next++
		if !a.used[id] {
			a.used[id] = true
			return id
		}
	}
}

// fixCalls makes the calls of one reply safe to store and send back: every
// call gets a non-empty id unique in the whole history, and an empty
// arguments string becomes "{}".
func (a *idAllocator) fixCalls(calls []ToolCall) {
	seen := make(map[string]bool, len(calls))
	for i := range calls {
		c := &calls[i]
		// An id the history already holds is replaced too: a decision,
		// a result or a page request about one call must never be taken
		// for another's (some servers number calls per reply).
		if c.ID == "" || seen[c.ID] || a.used[c.ID] {
			c.ID = a.fresh()
		}
		seen[c.ID] = true
		a.used[c.ID] = true
		if isBlank(c.Arguments) {
			c.Arguments = "{}"
		}
	}
}

func isBlank(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
		default:
			return false
		}
	}
	return true
}

// wireArguments is the arguments string sent back to the provider for c:
// the model's own text when it is valid JSON, else "{}" (some servers parse
// the arguments of past calls and answer 400 when they are not JSON).
func wireArguments(c ToolCall) string {
	if json.Valid([]byte(c.Arguments)) {
		return c.Arguments
	}
	return "{}"
}

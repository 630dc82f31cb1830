package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/respjson"
)

// assembler builds a reply from streamed chunks. It is ours rather than
// openai-go's ChatCompletionAccumulator because real servers break the
// accumulator's assumptions (see accumulator_test.go for each case): calls
// that all arrive at index 0 with different ids are glued into one, an
// index starting at 1 leaves an empty call 0, chunks whose id changes are
// rejected, usage sent in several chunks is summed, and its
// JustFinishedToolCall never fires when finish_reason comes with the call.
//
// Rules, per tool-call fragment of choice 0:
//   - the slot is the fragment's index, or the last call when it has none;
//   - a non-empty id different from the slot's call's id starts a new call;
//   - without ids, a fragment carrying a name and arguments while the slot's
//     call already has a name and complete JSON arguments starts a new call
//     (whole calls, one per chunk, no index and no id);
//   - a name equal to the call's name is a repeat and is not appended;
//   - arguments are appended; type is ignored (always "function" when sent).
type assembler struct {
	content   strings.Builder
	reasoning strings.Builder
	field     string // the delta field the reasoning came in
	calls     []*partialCall
	byIndex   map[int64]*partialCall
	finish    string
	model     string
	id        string
	usage     loop.Usage
	chunks    int
	size      int // bytes taken so far, with a charge per chunk and per tool-call fragment
	max       int // Request.MaxReplyBytes; 0: no bound
}

// fragmentCost is charged per tool-call fragment (loop.EventCost is per
// chunk).
const fragmentCost = 64

// errReplyTooLarge is returned (wrapped in ErrBadResponse) past the reply limit.
var errReplyTooLarge = errors.New("reply too large")

// reasoningKeys are the delta fields providers stream reasoning in:
// "reasoning_content" (DeepSeek, vLLM, llama.cpp), "reasoning"
// (OpenRouter, Ollama).
var reasoningKeys = [...]string{"reasoning_content", "reasoning"}

type partialCall struct {
	id   string
	name string
	args strings.Builder
	js   jsonEnd // whether args, so far, is a whole JSON object or array
}

// jsonEnd follows the structure of JSON text as it is appended, so that
// "the arguments so far are complete" costs nothing per fragment (a
// json.Valid over the whole buffer at each fragment made a stream of
// many fragments quadratic).
type jsonEnd struct {
	depth             int
	started           bool
	inString, escaped bool
}

func (j *jsonEnd) write(s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case j.escaped:
			j.escaped = false
		case j.inString:
			switch c {
			case '\\':
				j.escaped = true
			case '"':
				j.inString = false
			}
		case c == '"':
			j.inString = true
		case c == '{' || c == '[':
			j.depth++
			j.started = true
		case c == '}' || c == ']':
			j.depth--
		}
	}
}

// complete reports whether the text so far is one whole object or array.
func (j *jsonEnd) complete() bool { return j.started && j.depth == 0 && !j.inString }

// add takes one chunk and returns its text and reasoning. It fails once
// the reply exceeds its limit.
func (a *assembler) add(chunk *openai.ChatCompletionChunk) (loop.Delta, error) {
	var d loop.Delta
	a.chunks++
	a.size += loop.EventCost
	if a.model == "" && chunk.Model != "" {
		a.model = textsafe.Clean(chunk.Model, 200)
	}
	if a.id == "" && chunk.ID != "" {
		a.id = textsafe.Clean(chunk.ID, 200)
	}
	if chunk.JSON.Usage.Valid() {
		a.usage = usageOf(&chunk.Usage)
	}
	for i := range chunk.Choices {
		ch := &chunk.Choices[i]
		if ch.Index != 0 {
			continue // n > 1 is never requested; ignore other choices
		}
		if ch.FinishReason != "" {
			a.finish = ch.FinishReason
		}
		a.content.WriteString(ch.Delta.Content)
		d.Text = ch.Delta.Content
		if ch.Delta.Content == "" && ch.Delta.Refusal != "" {
			a.content.WriteString(ch.Delta.Refusal)
		}
		a.size += len(ch.Delta.Content) + len(ch.Delta.Refusal)
		if len(ch.Delta.JSON.ExtraFields) > 0 {
			for _, k := range reasoningKeys { // reasoning is kept and sent back: it counts
				if f, ok := ch.Delta.JSON.ExtraFields[k]; ok {
					a.size += len(f.Raw())
				}
			}
			if a.size <= a.max || a.max == 0 {
				if field, t := reasoningText(ch.Delta.JSON.ExtraFields); t != "" {
					if a.field == "" {
						a.field = field
					}
					a.reasoning.WriteString(t)
					d.Reasoning = t
				}
			}
		}
		for j := range ch.Delta.ToolCalls {
			f := &ch.Delta.ToolCalls[j]
			a.size += fragmentCost + len(f.ID) + len(f.Function.Name) + len(f.Function.Arguments)
			if a.max > 0 && a.size > a.max {
				break
			}
			a.addCall(f)
		}
		if a.max > 0 && a.size > a.max {
			return loop.Delta{}, fmt.Errorf("%w: %w: more than %d bytes", loop.ErrBadResponse, errReplyTooLarge, a.max)
		}
	}
	return d, nil
}

// reasoningText is the reasoning fragment of a delta and the field it
// came in, or "".
func reasoningText(fields map[string]respjson.Field) (field, text string) {
	for _, k := range reasoningKeys {
		f, ok := fields[k]
		if !ok {
			continue
		}
		raw := f.Raw()
		if len(raw) < 2 || raw[0] != '"' {
			continue
		}
		var s string
		if json.Unmarshal([]byte(raw), &s) == nil && s != "" {
			return k, s
		}
	}
	return "", ""
}

func (a *assembler) addCall(f *openai.ChatCompletionChunkChoiceDeltaToolCall) {
	hasIndex := f.JSON.Index.Valid()
	var cur *partialCall
	if hasIndex {
		cur = a.byIndex[f.Index]
	} else if n := len(a.calls); n > 0 {
		cur = a.calls[n-1]
	}
	if cur == nil || startsNewCall(cur, f) {
		cur = &partialCall{}
		a.calls = append(a.calls, cur)
		if hasIndex {
			if a.byIndex == nil {
				a.byIndex = map[int64]*partialCall{}
			}
			a.byIndex[f.Index] = cur
		}
	}
	if cur.id == "" {
		cur.id = f.ID
	}
	if name := f.Function.Name; name != "" && name != cur.name {
		cur.name += name
	}
	cur.args.WriteString(f.Function.Arguments)
	cur.js.write(f.Function.Arguments)
}

func startsNewCall(cur *partialCall, f *openai.ChatCompletionChunkChoiceDeltaToolCall) bool {
	if f.ID != "" && cur.id != "" {
		return f.ID != cur.id
	}
	if f.ID != "" && f.ID == cur.id {
		return false
	}
	return f.Function.Name != "" && f.Function.Arguments != "" && cur.name != "" &&
		cur.args.Len() > 0 && cur.js.complete()
}

// result returns the assembled reply. Calls with neither a name nor
// arguments (empty slots) are dropped.
func (a *assembler) result() *loop.Reply {
	r := &loop.Reply{ID: a.id, Model: a.model, Content: a.content.String(), FinishReason: a.finish, Usage: a.usage,
		Reasoning: reasoningOf(a.field, a.reasoning.String())}
	for _, c := range a.calls {
		if c.name == "" && c.args.Len() == 0 {
			continue
		}
		r.Calls = append(r.Calls, loop.ToolCall{ID: c.id, Name: c.name, Arguments: c.args.String()})
	}
	return r
}

// opaque is what chat keeps of a reply's reasoning besides its text: the
// field it came in, to send it back under the same name.
type opaque struct {
	Field string `json:"field"`
}

// reasoningOf is the reasoning a reply carried in field, or nil.
func reasoningOf(field, text string) *loop.Reasoning {
	if text == "" {
		return nil
	}
	o, _ := json.Marshal(opaque{Field: field})
	return &loop.Reasoning{Text: text, Opaque: o}
}

// replyFromCompletion reads a non-streamed answer. Tool calls are read
// field by field, whatever their "type" says.
func replyFromCompletion(cc *openai.ChatCompletion) (*loop.Reply, bool) {
	r := &loop.Reply{ID: textsafe.Clean(cc.ID, 200), Model: textsafe.Clean(cc.Model, 200), Usage: usageOf(&cc.Usage)}
	for i := range cc.Choices {
		ch := &cc.Choices[i]
		if ch.Index != 0 && len(cc.Choices) > 1 {
			continue
		}
		r.FinishReason = ch.FinishReason
		r.Content = ch.Message.Content
		if r.Content == "" {
			r.Content = ch.Message.Refusal
		}
		if field, t := reasoningText(ch.Message.JSON.ExtraFields); t != "" {
			r.Reasoning = reasoningOf(field, t)
		}
		for _, tc := range ch.Message.ToolCalls {
			if tc.Function.Name == "" && tc.Function.Arguments == "" {
				continue
			}
			r.Calls = append(r.Calls, loop.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		return r, true
	}
	return r, false
}

// usageOf reads a provider's usage, with the cached and reasoning tokens
// of its details where it gives them.
func usageOf(u *openai.CompletionUsage) loop.Usage {
	return loop.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens,
		CachedTokens: u.PromptTokensDetails.CachedTokens, ReasoningTokens: u.CompletionTokensDetails.ReasoningTokens}
}

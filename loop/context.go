package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/agcore/agrun/registry"
)

// ErrContextOverflow is matched (errors.Is) by the *APIError of a provider
// that refused a request for not fitting the model's context window, in
// any of the forms providers use (OpenAI's context_length_exceeded,
// "maximum context length is N tokens" from vLLM, DeepSeek and
// OpenRouter, Anthropic's "prompt is too long" and "exceed context
// limit", llama.cpp's exceed_context_size_error, HTTP 413). The run's
// kind is KindContextOverflow. The loop has already trimmed the request
// and retried it once when a Submit method returns it; the history is
// whole and the next run trims again.
var ErrContextOverflow = errors.New("the conversation does not fit the model's context window")

// Is reports whether target is ErrContextOverflow and e says so.
func (e *APIError) Is(target error) bool { return target == ErrContextOverflow && isContextOverflow(e) }

// overflowCodes are error codes and types that mean context overflow.
var overflowCodes = []string{"context_length_exceeded", "exceed_context_size_error", "context_too_large", "request_too_large"}

// overflowPhrases are parts of providers' messages that mean it.
var overflowPhrases = []string{
	"context length", "context_length", "context limit", "context window", "context size",
	"maximum model length", "prompt is too long", "prompt exceeds max length", "input is too long",
	"reduce the length of the messages", "exceeds the maximum number of tokens", "too many tokens",
}

func isContextOverflow(e *APIError) bool {
	code := strings.ToLower(e.Code + " " + e.Type)
	if strings.Contains(code, "rate_limit") || e.StatusCode == 401 || e.StatusCode == 403 || e.StatusCode == 429 {
		return false // "request too large for tokens per minute" is a rate limit
	}
	if e.StatusCode == 413 {
		return true
	}
	for _, c := range overflowCodes {
		if strings.Contains(code, c) {
			return true
		}
	}
	msg := strings.ToLower(e.Message)
	for _, p := range overflowPhrases {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

var (
	// the window a provider names: "maximum context length is 8192",
	// "maximum model length of 131072", "... > 200000"
	windowRE = regexp.MustCompile(`(?i)(?:maximum context length is|maximum model length of|>)\s*(\d+)`)
	// the size it counted: "resulted in 9000 tokens", "requested 8203
	// tokens", "(length 163840)", "208000 tokens >"
	countRE = regexp.MustCompile(`(?i)(?:resulted in|requested|length)\s*(\d+)|(\d+) tokens\s*>`)
)

// requestAdapting is request, made once more after a refusal the loop
// can answer: a context overflow (the request is trimmed to a smaller
// budget) and, under SchemaAuto, a provider that refuses response_format
// (the schema moves to the system prompt). Each such retry is a Retry
// event (Max 1, no wait), so that it is seen.
func (r *runState) requestAdapting(ctx context.Context, stream bool) (Reply, error) {
	overflowRetried, schemaRetried := false, false
	for {
		rep, err := r.request(ctx, stream)
		switch {
		case err == nil:
			return rep, nil
		case !overflowRetried && errors.Is(err, ErrContextOverflow):
			overflowRetried = true
			r.c.mu.Lock()
			refused := r.c.lastEstimate
			r.c.mu.Unlock()
			r.c.learnOverflow(err, refused)
			if next := r.c.plan(r.reg); !next.trimmed || next.estimate >= refused {
				// Nothing left to trim (a system prompt and one prompt,
				// say): the same request would be refused again.
				return rep, &overflowError{err: err, why: "nothing in the conversation can be trimmed to make it smaller"}
			}
			if !r.emit(&Retry{Attempt: 1, Max: 1, Reason: "the provider refused the request as too long for the model: trimmed, once more"}) {
				return rep, errStopped
			}
		case !schemaRetried && r.c.schemaRefused(err):
			schemaRetried = true
			if !r.emit(&Retry{Attempt: 1, Max: 1, Reason: "the provider refused response_format: the schema goes in the system prompt instead"}) {
				return rep, errStopped
			}
		default:
			return rep, err
		}
	}
}

// overflowError is a context overflow the loop could not answer by
// trimming; it matches ErrContextOverflow and unwraps to the provider's
// error.
type overflowError struct {
	err error
	why string
}

func (e *overflowError) Error() string { return fmt.Sprintf("%v (%s)", e.err, e.why) }
func (e *overflowError) Unwrap() error { return e.err }

// estimateTokens is the loop's estimate of the tokens msgs cost in a
// request: a third of their bytes, rounded up, with 16 bytes per message
// and per tool call for the wire format's overhead. A third (not the
// usual quarter for English prose) because tool results are JSON, code and
// identifiers, which tokenizers split finely, and text in other scripts
// costs a token per two or three bytes: an estimate that errs high trims a
// little early, one that errs low overflows.
func estimateTokens(msgs []Message) int {
	n := 0
	for i := range msgs {
		n += messageTokens(&msgs[i])
	}
	return n
}

// fixedTokens estimates what a request costs besides its messages: the
// system prompt, the tool definitions (the page tool's included, as it
// may be offered) and the response schema, counted like messages.
func fixedTokens(system string, defs []registry.Definition, rs *responseSchema) int {
	b := len(system) + len(pageToolDef.Description) + len(pageToolDef.Parameters) + 64
	for _, d := range defs {
		b += len(d.Name) + len(d.Description) + len(d.Parameters) + 32
	}
	if rs != nil {
		b += 2 * len(rs.text) // sent once, and in the prompt mode's instruction
	}
	return (b + 2) / 3
}

func messageTokens(m *Message) int {
	b := len(m.Content) + 16
	for _, tc := range m.ToolCalls {
		b += len(tc.ID) + len(tc.Name) + len(tc.Arguments) + 16
	}
	if r := m.Reasoning; r != nil {
		// Sent back to its provider (signatures, encrypted content): it
		// counts, also where another provider will not get it (an
		// estimate that errs high trims early).
		b += len(r.Text) + len(r.Opaque)
	}
	return (b + 2) / 3
}

// contextBudget is the tokens the next request may cost, messages, system
// prompt and tool definitions together (0: no bound): seven eighths of Config.ContextWindow, leaving the rest
// to the reply, or less once the provider refused a request as too long.
func (c *Cycle) contextBudget() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := 0
	if w := c.cfg.ContextWindow; w > 0 {
		b = w - w/8
	}
	if c.learnedBudget > 0 && (b == 0 || c.learnedBudget < b) {
		b = c.learnedBudget
	}
	return b
}

// learnOverflow lowers the budget after the provider refused a request
// whose messages were estimated at sent tokens: to what fits in the window
// the provider named, scaled by how far our estimate was from its count,
// else to three quarters of what was sent.
func (c *Cycle) learnOverflow(err error, sent int) {
	target := sent * 3 / 4
	var api *APIError
	if errors.As(err, &api) {
		w, n := lastNumber(windowRE, api.Message), lastNumber(countRE, api.Message)
		if w > 0 && n > w && sent > 0 {
			if t := int(int64(sent) * int64(w-w/8) / int64(n)); t < target {
				target = t
			}
		}
	}
	target = max(target, 256)
	c.mu.Lock()
	if c.learnedBudget == 0 || target < c.learnedBudget {
		c.learnedBudget = target
	}
	c.mu.Unlock()
}

func lastNumber(re *regexp.Regexp, s string) int {
	var n int
	for _, m := range re.FindAllStringSubmatch(s, -1) {
		for _, g := range m[1:] {
			if v, err := strconv.Atoi(g); err == nil && g != "" {
				n = v
			}
		}
	}
	return n
}

// fitContext returns msgs, or when their estimate exceeds budget tokens
// (budget > 0) a trimmed copy and true. It trims, in order, until the
// estimate fits: the tool results of earlier turns, oldest first (each
// replaced by a stub naming the call, the tool and the size, and how to
// read it again with PageToolName); whole earlier turns, oldest first (a
// turn is a user message and everything up to the next one, so every
// tool call keeps its tool message); then the current turn's tool
// results, oldest first, each to the head and tail of it that fit (a note
// if too little room is left). Messages before the first user message
// (system messages) are kept. What still does not fit is sent as it is:
// the provider's refusal then triggers a smaller budget (learnOverflow).
// trimmed is false when nothing could be made smaller.
func fitContext(msgs []Message, budget int) ([]Message, bool) {
	if budget <= 0 {
		return msgs, false
	}
	total := estimateTokens(msgs)
	if total <= budget {
		return msgs, false
	}
	out := slices.Clone(msgs)
	changed := false
	// stub shortens the tool results of out[from:to], oldest first, until
	// the estimate fits: to a note (earlier turns), or (excerpt: the
	// current turn) to the head and tail that fit in what is left of
	// the budget, with a note on how to read the rest.
	stub := func(from, to int, excerpt bool) {
		for i := from; i < to && total > budget; i++ {
			m := &out[i]
			if m.Role != RoleTool {
				continue
			}
			before := messageTokens(m)
			s := leftOutStub(m)
			if room := (budget-(total-before))*3 - 64; excerpt && room >= minExcerpt {
				if e, ok := excerptOf(m, room); ok && len(e) < len(m.Content) {
					s = e
				}
			}
			if len(s) >= len(m.Content) {
				continue
			}
			m.Content, m.FullContent = s, ""
			total += messageTokens(m) - before
			changed = true
		}
	}
	users := func() (first, second, last int) {
		first, second, last = -1, -1, -1
		for i := range out {
			if out[i].Role == RoleUser {
				switch {
				case first < 0:
					first = i
				case second < 0:
					second = i
				}
				last = i
			}
		}
		return first, second, last
	}
	_, _, last := users()
	stub(0, max(last, 0), false)
	for total > budget {
		first, second, _ := users()
		if first < 0 || second < 0 {
			break
		}
		total -= estimateTokens(out[first:second])
		out = slices.Delete(out, first, second)
		changed = true
	}
	_, _, last = users()
	stub(max(last, 0), len(out), true)
	if !changed {
		return msgs, false
	}
	return out, true
}

// minExcerpt is the least room, in bytes, worth an excerpt of a result
// rather than a note.
const minExcerpt = 512

// excerptOf is m's result cut to room bytes, head and tail, as a result
// over its cap is (boundOutput); false for a message that is not JSON
// (an error, a note).
func excerptOf(m *Message, room int) (string, bool) {
	src := m.Content
	if m.FullContent != "" {
		src = m.FullContent
	}
	if !json.Valid([]byte(src)) {
		return "", false
	}
	s, _ := boundOutput(json.RawMessage(src), room, m.ToolCallID)
	return s, true
}

// leftOutStub replaces the content of a tool message left out of a
// request.
func leftOutStub(m *Message) string {
	size := len(m.Content)
	if m.FullContent != "" {
		size = len(m.FullContent)
	}
	return fmt.Sprintf("[agrun: the result of call %s (tool %s, %d bytes) was left out to fit the context window; call %s with {\"call_id\":%q} to read it]",
		m.ToolCallID, m.Name, size, PageToolName, m.ToolCallID)
}

// compactedStub replaces the content of a tool message removed by Compact.
func compactedStub(m *Message, size int) string {
	return fmt.Sprintf("[agrun: the result of call %s (tool %s, %d bytes) was removed when the session was compacted]", m.ToolCallID, m.Name, size)
}

// CompactThreshold is the size under which Compact keeps a tool result.
const CompactThreshold = 1024

// Compact returns a smaller copy of a history for storage (`agrun sessions
// compact`): in every turn but the last keepTurns (a turn starts at a user
// message), each tool result longer than CompactThreshold bytes is
// replaced by a short note naming the call, the tool and the size, and the
// kept full copies of cut results (Message.FullContent) are dropped. Every
// message stays, in order, so tool calls keep their answers and the
// history stays valid to resume. What was removed cannot be paged back.
// keepTurns < 0 counts as 0.
func Compact(history []Message, keepTurns int) []Message {
	out := slices.Clone(history)
	end := len(out) // the first message of the kept turns
	for i := len(out) - 1; i >= 0 && keepTurns > 0; i-- {
		if out[i].Role == RoleUser {
			end = i
			keepTurns--
		}
	}
	if keepTurns > 0 {
		end = 0 // fewer turns than asked to keep: keep all
	}
	for i := 0; i < end; i++ {
		m := &out[i]
		if m.Role != RoleTool {
			continue
		}
		size := max(len(m.Content), len(m.FullContent))
		if size > CompactThreshold {
			m.Content = compactedStub(m, size)
		}
		m.FullContent = ""
	}
	return out
}

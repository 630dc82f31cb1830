// Package anthropic is the loop's adapter for the Anthropic Messages API,
// over anthropic-sdk-go.
//
//	p, err := anthropic.New(anthropic.Config{APIKey: key, Model: "claude-sonnet-4-5", Reasoning: "medium"})
//	if err != nil { ... }
//	c, err := loop.New(loop.Config{Provider: p})
//
// Extended thinking survives tool calls: the thinking and
// redacted_thinking blocks of a reply are kept with its assistant
// message, exactly as they came (signatures included), and sent back
// first in that assistant turn, before its tool_use blocks, to the same
// endpoint and model. Prompt caching is on by default: the system
// prompt, the last tool definition and the end of the conversation carry
// cache_control breakpoints, so each request of a run reads the previous
// one's prefix from the cache (Usage.CachedTokens). Anthropic's errors
// keep their status and type (529 overloaded_error is retried; an
// overload announced in the stream is treated the same).
//
// The stream is assembled here, with builders and the loop's reply
// budget, not by the SDK's Message.Accumulate, which appends every delta
// to a string with += (quadratic in the number of deltas: see
// TestAccumulateShortfall).
package anthropic

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/loop/internal/wire"
	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// DefaultBaseURL is the base URL of a zero Config.BaseURL.
const DefaultBaseURL = "https://api.anthropic.com"

// DefaultMaxOutputTokens is max_tokens when Config.MaxOutputTokens is 0
// (the API requires one); a thinking budget comes on top.
const DefaultMaxOutputTokens = 8192

// The thinking budget (budget_tokens) Config.Reasoning asks for: low
// 2048, medium 8192, high 24576 tokens.
var thinkingBudget = map[string]int64{"low": 2048, "medium": 8192, "high": 24576}

// ThinkingBudget is the thinking budget (budget_tokens) of a
// Config.Reasoning level, and false for "", "off" and unknown levels.
func ThinkingBudget(reasoning string) (int64, bool) {
	b, ok := thinkingBudget[reasoning]
	return b, ok
}

// adaptive reports whether model thinks adaptively (thinking.type
// "adaptive" with an effort), as Anthropic's models from Claude Opus 4.6
// on do.
func adaptive(model string) bool {
	for _, p := range []string{"claude-opus-4-6", "claude-mythos", "claude-opus-4-7", "claude-opus-4-8", "claude-opus-5", "claude-sonnet-5"} {
		if strings.HasPrefix(model, p) {
			return true
		}
	}
	return false
}

// Config configures a Provider. Only Model is required.
type Config struct {
	// BaseURL of the API ("/v1/messages" is appended). Default
	// DefaultBaseURL. ANTHROPIC_BASE_URL is not read.
	BaseURL string
	// APIKey is sent as the x-api-key header. ANTHROPIC_API_KEY is not
	// read: the caller decides where keys come from.
	APIKey string
	// Model is the model name. Required.
	Model string
	// Temperature, if set, is sent as "temperature" (not with thinking,
	// which the API refuses it with).
	Temperature *float64
	// Reasoning is extended thinking: "low", "medium" or "high" enable it
	// with ThinkingBudget's budget (models that think adaptively, Claude
	// Opus 4.6 on, get thinking.type "adaptive" and that effort instead);
	// "off" disables it; "" sends nothing (the API's default: off).
	Reasoning string
	// MaxOutputTokens is max_tokens (default DefaultMaxOutputTokens); the
	// thinking budget is added to it.
	MaxOutputTokens int64
	// NoPromptCache leaves out the cache_control breakpoints.
	NoPromptCache bool
	// HTTPClient, if set, makes the requests. Default: one client shared
	// by every provider of the process.
	HTTPClient *http.Client
}

// Provider is a loop.Provider for the Messages API. It is safe for
// concurrent use.
type Provider struct {
	client sdk.MessageService
	cfg    Config
	info   loop.ProviderInfo
}

// New returns a Provider for cfg. It fails if Model is empty, BaseURL is
// not an http(s) URL, or Reasoning is not one of its values.
func New(cfg Config) (*Provider, error) {
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("anthropic.Config.Model is required")
	}
	base, err := wire.BaseURL(cfg.BaseURL, DefaultBaseURL)
	if err != nil {
		return nil, fmt.Errorf("%w", err)
	}
	if _, ok := thinkingBudget[cfg.Reasoning]; !ok && cfg.Reasoning != "" && cfg.Reasoning != "off" {
		return nil, fmt.Errorf("anthropic.Config.Reasoning %q is not off, low, medium or high", cfg.Reasoning)
	}
	if cfg.MaxOutputTokens <= 0 {
		cfg.MaxOutputTokens = DefaultMaxOutputTokens
	}
	cfg.BaseURL = base
	p := &Provider{cfg: cfg, info: loop.ProviderInfo{
		API: "anthropic", System: "anthropic", Model: cfg.Model, Endpoint: base, StructuredOutput: true,
	}}
	// The Messages service alone, not sdk.NewClient: the client holds
	// every service (beta included), and linking them costs a program
	// that imports this package megabytes (docs/RATIONALE.md).
	p.client = sdk.NewMessageService(
		option.WithBaseURL(base+"/"),
		option.WithAPIKey(cfg.APIKey),
		option.WithMaxRetries(0), // the loop retries
		option.WithHTTPClient(wire.Client(cfg.HTTPClient)),
	)
	return p, nil
}

// Info implements loop.Provider.
func (p *Provider) Info() loop.ProviderInfo { return p.info }

// Request implements loop.Provider: one Messages request, streamed or not.
func (p *Provider) Request(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	params := p.params(req)
	ctx, rec := wire.Start(ctx, wire.BodyLimit(req.MaxReplyBytes))
	a := assembler{budget: wire.Budget{Max: req.MaxReplyBytes}}
	if !req.Stream {
		// The SDK refuses, before sending, a whole reply it guesses may
		// take over 10 minutes (from max_tokens) unless it is given a
		// timeout: the loop bounds the attempt itself (RequestTimeout).
		m, err := p.client.New(ctx, params, option.WithRequestTimeout(24*time.Hour))
		if err != nil {
			return nil, requestError(ctx, rec, err)
		}
		if err := a.message(m); err != nil {
			return nil, err
		}
		return a.reply(), nil
	}
	s := p.client.NewStreaming(ctx, params)
	defer s.Close()
	for s.Next() {
		ev := s.Current()
		d, err := a.add(&ev)
		if err != nil {
			return a.reply(), err
		}
		if req.OnDelta != nil {
			req.OnDelta(d)
		}
	}
	if err := s.Err(); err != nil {
		return a.reply(), requestError(ctx, rec, err)
	}
	if !a.stopped {
		return a.reply(), &loop.IncompleteStreamError{Marker: "message_stop", Empty: a.events == 0}
	}
	return a.reply(), nil
}

// requestError classifies a failure; an error event inside a stream
// keeps the status its type implies (overloaded_error 529, api_error
// 500, rate_limit_error 429), so that the loop retries it as it would
// the same error before the stream.
func requestError(ctx context.Context, rec *wire.Recording, err error) error {
	var ae *sdk.Error
	if ctx.Err() == nil && errors.As(err, &ae) && rec.Status() > 0 && rec.Status() < 400 {
		e := wire.StreamError([]byte(ae.RawJSON()), err)
		e.StatusCode = streamErrorStatus[e.Type]
		return e
	}
	return wire.Error(ctx, rec, err)
}

var streamErrorStatus = map[string]int{"overloaded_error": 529, "api_error": 500, "rate_limit_error": 429}

// params builds the request.
func (p *Provider) params(req *loop.Request) sdk.MessageNewParams {
	cache := !p.cfg.NoPromptCache
	mp := sdk.MessageNewParams{Model: sdk.Model(p.cfg.Model), MaxTokens: p.cfg.MaxOutputTokens, Messages: toMessages(req.Messages, cache)}
	if req.System != "" {
		tb := sdk.TextBlockParam{Text: req.System}
		if cache {
			tb.CacheControl = sdk.NewCacheControlEphemeralParam()
		}
		mp.System = []sdk.TextBlockParam{tb}
	}
	thinking := false
	switch budget, ok := thinkingBudget[p.cfg.Reasoning]; {
	case ok && adaptive(p.cfg.Model):
		// Models that think adaptively are given an effort, not a budget
		// (budgets are deprecated for them, and the SDK says so on
		// stderr at every request).
		thinking = true
		mp.MaxTokens += budget
		mp.Thinking = sdk.ThinkingConfigParamUnion{OfAdaptive: &sdk.ThinkingConfigAdaptiveParam{}}
		mp.OutputConfig.Effort = sdk.OutputConfigEffort(p.cfg.Reasoning)
	case ok:
		thinking = true
		mp.MaxTokens += budget
		mp.Thinking = sdk.ThinkingConfigParamUnion{OfEnabled: &sdk.ThinkingConfigEnabledParam{BudgetTokens: budget}}
	case p.cfg.Reasoning == "off":
		mp.Thinking = sdk.ThinkingConfigParamUnion{OfDisabled: &sdk.ThinkingConfigDisabledParam{}}
	}
	for i, d := range req.Tools {
		schema := wire.ToolSchema(d.Parameters)
		is := sdk.ToolInputSchemaParam{ExtraFields: map[string]any{}}
		for k, v := range schema {
			switch k {
			case "type":
			case "properties":
				is.Properties = v
			default:
				is.ExtraFields[k] = v
			}
		}
		tp := &sdk.ToolParam{Name: d.Name, InputSchema: is}
		if d.Description != "" {
			tp.Description = sdk.String(d.Description)
		}
		if cache && i == len(req.Tools)-1 {
			tp.CacheControl = sdk.NewCacheControlEphemeralParam()
		}
		mp.Tools = append(mp.Tools, sdk.ToolUnionParam{OfTool: tp})
	}
	if s := req.Schema; s != nil {
		var doc map[string]any
		_ = json.Unmarshal(s.Schema, &doc)
		mp.OutputConfig = sdk.OutputConfigParam{Format: sdk.JSONOutputFormatParam{Schema: doc}}
	}
	if p.cfg.Temperature != nil && !thinking {
		mp.SetExtraFields(map[string]any{"temperature": *p.cfg.Temperature})
	}
	return mp
}

// opaqueBlock is a thinking or redacted_thinking block as it came, kept
// in loop.Reasoning.Opaque (a JSON array of them) and sent back unchanged.
type opaqueBlock struct {
	Type      string `json:"type"`
	Thinking  string `json:"thinking,omitempty"`
	Signature string `json:"signature,omitempty"`
	Data      string `json:"data,omitempty"`
}

// emptyReply stands in for an assistant message with nothing in it: the
// API refuses empty text blocks and empty contents.
const emptyReply = "[no reply]"

// toMessages converts the loop's messages. Consecutive messages of the
// user side (a user prompt, tool results, a system message in the middle
// of the history) become one user message, tool results first, as the
// API wants turns to alternate; with cache, the last block of the last
// message is a cache breakpoint.
func toMessages(msgs []loop.Message, cache bool) []sdk.MessageParam {
	var out []sdk.MessageParam
	var user []sdk.ContentBlockParamUnion // the user turn being gathered
	var texts []sdk.ContentBlockParamUnion
	flush := func() {
		if len(user)+len(texts) > 0 {
			out = append(out, sdk.NewUserMessage(append(user, texts...)...))
		}
		user, texts = nil, nil
	}
	for _, m := range msgs {
		switch m.Role {
		case loop.RoleUser, loop.RoleSystem:
			text := m.Content
			if m.Role == loop.RoleSystem {
				text = "[system] " + text
			}
			if strings.TrimSpace(text) == "" {
				text = emptyReply
			}
			texts = append(texts, sdk.NewTextBlock(text))
		case loop.RoleTool:
			content := m.Content
			if content == "" {
				content = "(empty)"
			}
			user = append(user, sdk.NewToolResultBlock(toolID(m.ToolCallID), content, strings.HasPrefix(m.Content, "error (")))
		case loop.RoleAssistant:
			flush()
			var blocks []sdk.ContentBlockParamUnion
			if r := m.Reasoning; r != nil {
				var ob []opaqueBlock
				_ = json.Unmarshal(r.Opaque, &ob)
				for _, b := range ob {
					switch b.Type {
					case "thinking":
						blocks = append(blocks, sdk.NewThinkingBlock(b.Signature, b.Thinking))
					case "redacted_thinking":
						blocks = append(blocks, sdk.NewRedactedThinkingBlock(b.Data))
					}
				}
			}
			if strings.TrimSpace(m.Content) != "" {
				blocks = append(blocks, sdk.NewTextBlock(m.Content))
			}
			for _, c := range m.ToolCalls {
				blocks = append(blocks, sdk.NewToolUseBlock(toolID(c.ID), json.RawMessage(objectJSON(c.Arguments)), c.Name))
			}
			if len(blocks) == 0 {
				blocks = append(blocks, sdk.NewTextBlock(emptyReply))
			}
			out = append(out, sdk.NewAssistantMessage(blocks...))
		}
	}
	flush()
	if cache && len(out) > 0 {
		// The end of the conversation, and the end of the user turn
		// before it: the cache looks back at most 20 blocks from a
		// breakpoint, and a turn of many parallel calls adds more than
		// that (with the system prompt's and the tools', 4 breakpoints:
		// the API's most).
		markLast(out[len(out)-1])
		for i := len(out) - 2; i >= 0; i-- {
			if out[i].OfUser != nil {
				markLast(out[i])
				break
			}
		}
	}
	return out
}

// markLast makes the last block of m a cache breakpoint.
func markLast(m sdk.MessageParam) {
	var blocks []sdk.ContentBlockParamUnion
	if m.OfUser != nil {
		blocks = m.OfUser.Content
	} else if m.OfAssistant != nil {
		blocks = m.OfAssistant.Content
	}
	if n := len(blocks); n > 0 {
		if cc := blocks[n-1].GetCacheControl(); cc != nil {
			*cc = sdk.NewCacheControlEphemeralParam()
		}
	}
}

// toolID is a tool call's id as the API takes it (^[a-zA-Z0-9_-]+$): a
// conversation begun with another API may hold ids like "functions.f:0";
// those are replaced by a stable digest, the same in the tool_use and in
// its tool_result.
func toolID(id string) string {
	ok := id != "" && len(id) <= 200
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	}
	if ok {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "toolu_" + hex.EncodeToString(sum[:12])
}

// objectJSON is args when it is a JSON object (tool_use input must be
// one), else {}.
func objectJSON(args string) string {
	if t := strings.TrimSpace(args); strings.HasPrefix(t, "{") && json.Valid([]byte(t)) {
		return t
	}
	return "{}"
}

// block is one content block of a reply as it streams.
type block struct {
	typ                 string
	id, name            string
	text, input         strings.Builder
	thinking, signature strings.Builder
	data                string
}

// assembler builds a reply from stream events (or a whole Message).
type assembler struct {
	budget  wire.Budget
	blocks  []*block
	id      string
	model   string
	stop    string
	usage   sdk.MessageDeltaUsage
	start   sdk.Usage
	events  int
	stopped bool // message_stop arrived
}

// add takes one event and returns the text or thinking it carried.
func (a *assembler) add(ev *sdk.MessageStreamEventUnion) (loop.Delta, error) {
	a.events++
	var d loop.Delta
	if err := a.budget.Charge(0, true); err != nil {
		return d, err
	}
	switch ev.Type {
	case "message_start":
		a.id, a.model, a.start = ev.Message.ID, string(ev.Message.Model), ev.Message.Usage
	case "content_block_start":
		if ev.Index != int64(len(a.blocks)) || ev.Index > 1<<16 {
			return d, fmt.Errorf("%w: content block %d started, expected %d", loop.ErrBadResponse, ev.Index, len(a.blocks))
		}
		cb := &ev.ContentBlock
		b := &block{typ: cb.Type, id: cb.ID, name: cb.Name, data: cb.Data}
		b.text.WriteString(cb.Text)
		b.thinking.WriteString(cb.Thinking)
		b.signature.WriteString(cb.Signature)
		if err := a.budget.Charge(len(cb.ID)+len(cb.Name)+len(cb.Data)+len(cb.Text)+len(cb.Thinking)+len(cb.Signature), false); err != nil {
			return d, err
		}
		if raw := cb.JSON.Input.Raw(); cb.Type == "tool_use" && raw != "" && raw != "{}" && raw != "null" {
			if err := a.budget.Charge(len(raw), false); err != nil {
				return d, err
			}
			b.input.WriteString(raw)
		}
		a.blocks = append(a.blocks, b)
		d.Text, d.Reasoning = cb.Text, cb.Thinking
	case "content_block_delta":
		if ev.Index < 0 || ev.Index >= int64(len(a.blocks)) {
			return d, fmt.Errorf("%w: a delta for content block %d of %d", loop.ErrBadResponse, ev.Index, len(a.blocks))
		}
		b := a.blocks[ev.Index]
		dl := &ev.Delta
		if err := a.budget.Charge(len(dl.Text)+len(dl.PartialJSON)+len(dl.Thinking)+len(dl.Signature), false); err != nil {
			return d, err
		}
		switch dl.Type {
		case "text_delta":
			b.text.WriteString(dl.Text)
			d.Text = dl.Text
		case "input_json_delta":
			b.input.WriteString(dl.PartialJSON)
		case "thinking_delta":
			b.thinking.WriteString(dl.Thinking)
			d.Reasoning = dl.Thinking
		case "signature_delta":
			b.signature.WriteString(dl.Signature)
		}
	case "message_delta":
		a.stop = string(ev.Delta.StopReason)
		a.usage = ev.Usage
	case "message_stop":
		a.stopped = true
	}
	return d, nil
}

// message takes a whole (non-streamed) reply.
func (a *assembler) message(m *sdk.Message) error {
	a.id, a.model, a.start, a.stop, a.stopped = m.ID, string(m.Model), m.Usage, string(m.StopReason), true
	a.usage = sdk.MessageDeltaUsage{OutputTokens: m.Usage.OutputTokens, OutputTokensDetails: m.Usage.OutputTokensDetails}
	for _, cb := range m.Content {
		b := &block{typ: cb.Type, id: cb.ID, name: cb.Name, data: cb.Data}
		b.text.WriteString(cb.Text)
		b.thinking.WriteString(cb.Thinking)
		b.signature.WriteString(cb.Signature)
		if cb.Type == "tool_use" {
			b.input.Write(cb.Input)
		}
		if err := a.budget.Charge(len(cb.ID)+len(cb.Name)+len(cb.Data)+len(cb.Text)+len(cb.Thinking)+len(cb.Signature)+len(cb.Input), false); err != nil {
			return err
		}
		a.blocks = append(a.blocks, b)
	}
	return nil
}

// stopReasons maps Anthropic's stop_reason onto the loop's finish reasons.
var stopReasons = map[string]string{
	"end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop", "tool_use": "tool_calls",
	"max_tokens": "length", "model_context_window_exceeded": "length", "refusal": "content_filter",
}

// reply is what was assembled.
func (a *assembler) reply() *loop.Reply {
	r := &loop.Reply{ID: a.id, Model: textsafe.Clean(a.model, 200), FinishReason: stopReasons[a.stop]}
	if r.FinishReason == "" && a.stop != "" {
		r.FinishReason = "stop"
	}
	var text, thinking strings.Builder
	var opaque []opaqueBlock
	for _, b := range a.blocks {
		switch b.typ {
		case "text":
			text.WriteString(b.text.String())
		case "tool_use":
			r.Calls = append(r.Calls, loop.ToolCall{ID: b.id, Name: b.name, Arguments: b.input.String()})
		case "thinking":
			thinking.WriteString(b.thinking.String())
			opaque = append(opaque, opaqueBlock{Type: "thinking", Thinking: b.thinking.String(), Signature: b.signature.String()})
		case "redacted_thinking":
			opaque = append(opaque, opaqueBlock{Type: "redacted_thinking", Data: b.data})
		}
	}
	r.Content = text.String()
	if len(opaque) > 0 {
		o, _ := json.Marshal(opaque)
		r.Reasoning = &loop.Reasoning{Text: thinking.String(), Opaque: o}
	}
	in := a.start.InputTokens
	if a.usage.JSON.InputTokens.Valid() && a.usage.InputTokens > 0 {
		in = a.usage.InputTokens
	}
	cacheRead, cacheWrite := a.start.CacheReadInputTokens, a.start.CacheCreationInputTokens
	if a.usage.CacheReadInputTokens > 0 {
		cacheRead = a.usage.CacheReadInputTokens
	}
	if a.usage.CacheCreationInputTokens > 0 {
		cacheWrite = a.usage.CacheCreationInputTokens
	}
	out := a.usage.OutputTokens
	if out == 0 {
		out = a.start.OutputTokens
	}
	// input_tokens counts only what was neither read from nor written to
	// the cache; the loop's prompt tokens are the whole input.
	prompt := in + cacheRead + cacheWrite
	r.Usage = loop.Usage{PromptTokens: prompt, CompletionTokens: out, TotalTokens: prompt + out,
		CachedTokens: cacheRead, CacheWriteTokens: cacheWrite, ReasoningTokens: a.usage.OutputTokensDetails.ThinkingTokens}
	return r
}

// Package chat is the loop's adapter for the OpenAI Chat Completions API
// and every server that speaks it (OpenAI, DeepSeek, OpenRouter, Groq,
// Mistral, vLLM, Ollama, llama.cpp, LM Studio, ...), over openai-go.
//
//	p, err := chat.New(chat.Config{BaseURL: "https://api.deepseek.com", APIKey: key, Model: "deepseek-reasoner"})
//	if err != nil { ... }
//	c, err := loop.New(loop.Config{Provider: p})
//
// Reasoning streamed beside the reply, as "reasoning_content" (DeepSeek,
// vLLM, llama.cpp) or "reasoning" (OpenRouter, Ollama), is shown as
// loop.ReasoningDelta events and kept with the assistant message it came
// with; it is sent back on that message, under the same field, to the
// same endpoint and model (DeepSeek's thinking mode refuses a tool-call
// turn without it). Streams are assembled here, not by openai-go's
// ChatCompletionAccumulator, because real servers send shapes it
// mis-assembles (see assemble.go).
package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/loop/internal/wire"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"
)

// DefaultBaseURL is the base URL of a zero Config.BaseURL.
const DefaultBaseURL = "https://api.openai.com/v1"

// Config configures a Provider. Only Model is required.
type Config struct {
	// BaseURL of the API ("/chat/completions" is appended). Default
	// DefaultBaseURL. OPENAI_BASE_URL is not read.
	BaseURL string
	// APIKey is sent as a bearer token; empty sends none (local servers).
	// OPENAI_API_KEY is not read: the caller decides where keys come from.
	APIKey string
	// Model is the model name. Required.
	Model string
	// Temperature, if set, is sent as "temperature".
	Temperature *float64
	// ParallelToolCalls, if set, is sent as "parallel_tool_calls" (only in
	// requests that carry tools).
	ParallelToolCalls *bool
	// Reasoning, if set, is sent as "reasoning_effort": "low", "medium",
	// "high", or "off" (sent as "none"). Empty sends nothing: the
	// server's default (DeepSeek turns thinking on by model name).
	Reasoning string
	// MaxOutputTokens, if positive, bounds each reply: sent as
	// "max_completion_tokens" to api.openai.com (its reasoning models
	// refuse max_tokens), as "max_tokens" elsewhere (DeepSeek, vLLM,
	// Ollama and most others know only that one).
	MaxOutputTokens int64
	// HTTPClient, if set, makes the requests (a proxy, tests). Default:
	// one client shared by every provider of the process.
	HTTPClient *http.Client
}

// Provider is a loop.Provider for a Chat Completions API. It is safe for
// concurrent use.
type Provider struct {
	client openai.ChatCompletionService
	cfg    Config
	info   loop.ProviderInfo
	openAI bool // the endpoint is OpenAI's own (max_completion_tokens)
}

// New returns a Provider for cfg. It fails if Model is empty, BaseURL is
// not an http(s) URL, or Reasoning is not one of its values.
func New(cfg Config) (*Provider, error) {
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("chat.Config.Model is required")
	}
	base, err := wire.BaseURL(cfg.BaseURL, DefaultBaseURL)
	if err != nil {
		return nil, fmt.Errorf("%w", err)
	}
	switch cfg.Reasoning {
	case "", "off", "low", "medium", "high":
	default:
		return nil, fmt.Errorf("chat.Config.Reasoning %q is not off, low, medium or high", cfg.Reasoning)
	}
	cfg.BaseURL = base
	host := ""
	if u, err := url.Parse(base); err == nil {
		host = strings.ToLower(u.Hostname())
	}
	p := &Provider{cfg: cfg, openAI: host == "api.openai.com" || strings.HasSuffix(host, ".openai.azure.com"), info: loop.ProviderInfo{
		API: "chat", System: wire.ProviderName(base, "openai"), Model: cfg.Model, Endpoint: base, StructuredOutput: true,
	}}
	// The Chat Completions service alone, not openai.NewClient: the
	// client holds every service of the API, and linking them costs a
	// program that imports this package megabytes (docs/RATIONALE.md).
	p.client = openai.NewChatCompletionService(
		option.WithBaseURL(base),
		option.WithAPIKey(cfg.APIKey),
		option.WithMaxRetries(0), // the loop retries
		option.WithHTTPClient(wire.Client(cfg.HTTPClient)),
	)
	return p, nil
}

// Info implements loop.Provider.
func (p *Provider) Info() loop.ProviderInfo { return p.info }

// Request implements loop.Provider: one Chat Completions request,
// streamed (stream_options.include_usage) or not.
func (p *Provider) Request(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	params := p.params(req)
	ctx, rec := wire.Start(ctx, wire.BodyLimit(req.MaxReplyBytes))
	if !req.Stream {
		cc, err := p.client.New(ctx, params)
		if err != nil {
			return nil, requestError(ctx, rec, err)
		}
		if extra, ok := cc.JSON.ExtraFields["error"]; ok && extra.Raw() != "" && extra.Raw() != "null" {
			// 200 with an error object, as some proxies send.
			e := streamError([]byte(`{"error":`+extra.Raw()+`}`), nil)
			if e.StatusCode == 0 {
				e.StatusCode = rec.Status()
			}
			return nil, e
		}
		rep, ok := replyFromCompletion(cc)
		if !ok {
			return nil, fmt.Errorf("%w: no choices in the reply", loop.ErrBadResponse)
		}
		b := wire.Budget{Max: req.MaxReplyBytes}
		if err := b.Charge(replySize(rep), false); err != nil {
			return nil, err
		}
		return rep, nil
	}
	s := p.client.NewStreaming(ctx, params)
	defer s.Close()
	a := assembler{max: req.MaxReplyBytes}
	for s.Next() {
		chunk := s.Current()
		d, err := a.add(&chunk)
		if err != nil {
			return a.result(), err
		}
		if req.OnDelta != nil {
			req.OnDelta(d)
		}
	}
	if err := s.Err(); err != nil {
		var se *ssestream.StreamError
		if errors.As(err, &se) {
			return nil, streamError(se.Event.Data, err)
		}
		if rec.Status() >= 200 && rec.Status() < 300 && ctx.Err() == nil && !wire.IsDecodeError(err) && !errors.Is(err, wire.ErrBodyTooLarge) {
			// The stream broke after it began (a reset, a GOAWAY, a
			// closed connection): an incomplete reply, retried.
			return a.result(), &loop.IncompleteStreamError{Marker: "finish_reason", Empty: a.chunks == 0, Err: wire.Cause(err)}
		}
		return a.result(), requestError(ctx, rec, err)
	}
	if a.finish == "" {
		// finish_reason, not [DONE], is the end: every recorded provider
		// sends it, and not all of them send [DONE].
		return a.result(), &loop.IncompleteStreamError{Marker: "finish_reason", Empty: a.chunks == 0}
	}
	return a.result(), nil
}

// streamError is the *loop.APIError of an error event in a stream; a
// numeric code that is an HTTP status of the kind that passes (429, 5xx:
// OpenRouter relays its upstream's) is its status, so that it is retried
// as the same error before the stream would be.
func streamError(data []byte, cause error) *loop.APIError {
	e := wire.StreamError(data, cause)
	if n, err := strconv.Atoi(e.Code); err == nil && (n == http.StatusTooManyRequests || n >= 500 && n < 600) {
		e.StatusCode = n
	}
	return e
}

// requestError classifies a failed request; a server that answered 200
// with a body that is not a reply (a stream to a request for a whole
// reply, HTML) is a bad response, not a transport failure.
func requestError(ctx context.Context, rec *wire.Recording, err error) error {
	if s := rec.Status(); s >= 200 && s < 300 && ctx.Err() == nil && !isNetwork(err) {
		if strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
			return fmt.Errorf("%w: the provider streamed a reply that was asked for whole (a server that always streams: use the streamed methods)", loop.ErrBadResponse)
		}
		return fmt.Errorf("%w: %w", loop.ErrBadResponse, err)
	}
	return wire.Error(ctx, rec, err)
}

func isNetwork(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, wire.ErrBodyTooLarge)
}

func replySize(r *loop.Reply) int {
	n := len(r.Content)
	if r.Reasoning != nil {
		n += len(r.Reasoning.Text)
	}
	for _, c := range r.Calls {
		n += len(c.ID) + len(c.Name) + len(c.Arguments)
	}
	return n
}

// params builds the request.
func (p *Provider) params(req *loop.Request) openai.ChatCompletionNewParams {
	cp := openai.ChatCompletionNewParams{Model: p.cfg.Model, Messages: toParams(req.System, req.Messages)}
	if p.cfg.Temperature != nil {
		cp.Temperature = param.NewOpt(*p.cfg.Temperature)
	}
	if n := p.cfg.MaxOutputTokens; n > 0 {
		if p.openAI {
			cp.MaxCompletionTokens = param.NewOpt(n)
		} else {
			cp.MaxTokens = param.NewOpt(n)
		}
	}
	switch p.cfg.Reasoning {
	case "off":
		cp.ReasoningEffort = "none"
	case "low", "medium", "high":
		cp.ReasoningEffort = shared.ReasoningEffort(p.cfg.Reasoning)
	}
	for _, d := range req.Tools {
		fd := shared.FunctionDefinitionParam{Name: d.Name, Parameters: wire.ToolSchema(d.Parameters)}
		if d.Description != "" {
			fd.Description = param.NewOpt(d.Description)
		}
		cp.Tools = append(cp.Tools, openai.ChatCompletionFunctionTool(fd))
	}
	if len(cp.Tools) > 0 && p.cfg.ParallelToolCalls != nil {
		cp.ParallelToolCalls = param.NewOpt(*p.cfg.ParallelToolCalls)
	}
	if s := req.Schema; s != nil {
		var doc map[string]any
		_ = json.Unmarshal(s.Schema, &doc)
		js := shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: s.Name, Schema: doc}
		if s.Strict {
			js.Strict = param.NewOpt(true)
		}
		cp.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{JSONSchema: js}}
	}
	if req.Stream {
		cp.StreamOptions.IncludeUsage = param.NewOpt(true)
	}
	return cp
}

// toParams converts the messages to openai-go's message params. Assistant
// tool calls are built here (not with ToParam, which drops calls without
// "type"), always with type "function"; an assistant message without
// calls always carries "content"; reasoning goes back under the field it
// came in.
func toParams(system string, msgs []loop.Message) []openai.ChatCompletionMessageParamUnion {
	out := make([]openai.ChatCompletionMessageParamUnion, 0, len(msgs)+1)
	if system != "" {
		out = append(out, openai.SystemMessage(system))
	}
	for _, m := range msgs {
		switch m.Role {
		case loop.RoleSystem:
			out = append(out, openai.SystemMessage(m.Content))
		case loop.RoleUser:
			out = append(out, openai.UserMessage(m.Content))
		case loop.RoleTool:
			out = append(out, openai.ToolMessage(m.Content, m.ToolCallID))
		case loop.RoleAssistant:
			a := openai.ChatCompletionAssistantMessageParam{}
			if m.Content != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = param.NewOpt(m.Content)
			}
			for _, tc := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: tc.Arguments},
					},
				})
			}
			if r := m.Reasoning; r != nil && r.Text != "" {
				var o opaque
				_ = json.Unmarshal(r.Opaque, &o)
				if o.Field != "reasoning" {
					o.Field = "reasoning_content"
				}
				a.SetExtraFields(map[string]any{o.Field: r.Text})
			}
			out = append(out, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		}
	}
	return out
}

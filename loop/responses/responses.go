// Package responses is the loop's adapter for the OpenAI Responses API,
// over openai-go's responses package (only that package: a program that
// uses it does not link the Chat Completions client).
//
//	p, err := responses.New(responses.Config{APIKey: key, Model: "gpt-5-mini", Reasoning: "medium"})
//	if err != nil { ... }
//	c, err := loop.New(loop.Config{Provider: p})
//
// Reasoning survives tool calls. By default requests are stateless
// (store: false, include: ["reasoning.encrypted_content"]): the
// reasoning items of a reply are kept, encrypted content included, with
// its assistant message and passed back as input in their place, before
// the function calls they preceded, to the same endpoint and model. With
// Config.Store, responses are kept by OpenAI and a request continues
// from the last reply with previous_response_id, sending only what came
// after it.
package responses

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/loop/internal/wire"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	oai "github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

// DefaultBaseURL is the base URL of a zero Config.BaseURL.
const DefaultBaseURL = "https://api.openai.com/v1"

// Config configures a Provider. Only Model is required.
type Config struct {
	// BaseURL of the API ("/responses" is appended). Default
	// DefaultBaseURL. OPENAI_BASE_URL is not read.
	BaseURL string
	// APIKey is sent as a bearer token. OPENAI_API_KEY is not read.
	APIKey string
	// Model is the model name. Required.
	Model string
	// Temperature, if set, is sent as "temperature".
	Temperature *float64
	// ParallelToolCalls, if set, is sent as "parallel_tool_calls".
	ParallelToolCalls *bool
	// Reasoning, if set, is reasoning.effort: "low", "medium", "high",
	// or "off" (sent as "none"). Empty sends nothing: the model's default.
	Reasoning string
	// Store keeps responses on OpenAI's side (store: true) and continues
	// with previous_response_id; false (the default) is stateless, the
	// reasoning passed back as encrypted content.
	Store bool
	// MaxOutputTokens, if positive, is max_output_tokens.
	MaxOutputTokens int64
	// HTTPClient, if set, makes the requests. Default: one client shared
	// by every provider of the process.
	HTTPClient *http.Client
}

// Provider is a loop.Provider for the Responses API. It is safe for
// concurrent use.
type Provider struct {
	svc       oai.ResponseService
	cfg       Config
	info      loop.ProviderInfo
	noSummary atomic.Bool // the API refused reasoning summaries
}

// New returns a Provider for cfg. It fails if Model is empty, BaseURL is
// not an http(s) URL, or Reasoning is not one of its values.
func New(cfg Config) (*Provider, error) {
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("responses.Config.Model is required")
	}
	base, err := wire.BaseURL(cfg.BaseURL, DefaultBaseURL)
	if err != nil {
		return nil, fmt.Errorf("%w", err)
	}
	switch cfg.Reasoning {
	case "", "off", "low", "medium", "high":
	default:
		return nil, fmt.Errorf("responses.Config.Reasoning %q is not off, low, medium or high", cfg.Reasoning)
	}
	cfg.BaseURL = base
	p := &Provider{cfg: cfg, info: loop.ProviderInfo{
		API: "responses", System: wire.ProviderName(base, "openai"), Model: cfg.Model, Endpoint: base, StructuredOutput: true,
	}}
	p.svc = oai.NewResponseService(
		option.WithBaseURL(base+"/"),
		option.WithAPIKey(cfg.APIKey),
		option.WithMaxRetries(0), // the loop retries
		option.WithHTTPClient(wire.Client(cfg.HTTPClient)),
	)
	return p, nil
}

// Info implements loop.Provider.
func (p *Provider) Info() loop.ProviderInfo { return p.info }

// Request implements loop.Provider: one Responses request, streamed or
// not. It is made once more at once, without what the API refused, when
// the API refuses reasoning summaries (an organization that is not
// verified: summaries stay off for the provider's life) or does not know
// the previous response it was to continue (expired, or never stored:
// the whole conversation is sent instead).
func (p *Provider) Request(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	usePrevious := true
	for range 3 {
		rep, err := p.attempt(ctx, req, usePrevious)
		var api *loop.APIError
		switch {
		case err == nil || !errors.As(err, &api) || api.StatusCode != http.StatusBadRequest:
			return rep, err
		case api.Code == "previous_response_not_found" && usePrevious && p.cfg.Store:
			usePrevious = false
		case p.wantSummary() && strings.Contains(strings.ToLower(api.Message), "summar"):
			p.noSummary.Store(true)
		default:
			return rep, err
		}
	}
	return nil, errors.New("the API refused the request three times")
}

func (p *Provider) wantSummary() bool {
	_, ok := efforts[p.cfg.Reasoning]
	return ok && !p.noSummary.Load()
}

var efforts = map[string]bool{"low": true, "medium": true, "high": true}

func (p *Provider) attempt(ctx context.Context, req *loop.Request, usePrevious bool) (*loop.Reply, error) {
	params := p.params(req, usePrevious)
	ctx, rec := wire.Start(ctx, wire.BodyLimit(req.MaxReplyBytes))
	a := assembler{budget: wire.Budget{Max: req.MaxReplyBytes}, stored: p.cfg.Store}
	if !req.Stream {
		r, err := p.svc.New(ctx, params)
		if err != nil {
			return nil, wire.Error(ctx, rec, err)
		}
		if err := a.response(r); err != nil {
			return nil, err
		}
		return a.reply()
	}
	s := p.svc.NewStreaming(ctx, params)
	defer s.Close()
	for s.Next() {
		ev := s.Current()
		d, err := a.add(&ev)
		if err != nil {
			rep, _ := a.reply()
			return rep, err
		}
		if req.OnDelta != nil {
			req.OnDelta(d)
		}
		if a.done {
			break
		}
	}
	rep, err := a.reply()
	if err := s.Err(); err != nil && !a.done {
		return rep, wire.Error(ctx, rec, err)
	}
	if !a.done {
		return rep, &loop.IncompleteStreamError{Marker: "response.completed", Empty: a.events == 0}
	}
	return rep, err
}

// params builds the request.
func (p *Provider) params(req *loop.Request, usePrevious bool) oai.ResponseNewParams {
	rp := oai.ResponseNewParams{Model: shared.ResponsesModel(p.cfg.Model), Store: param.NewOpt(p.cfg.Store)}
	msgs := req.Messages
	// Continue from the last stored reply, unless the loop trimmed the
	// conversation (what the API holds would not shrink).
	if p.cfg.Store && usePrevious && !req.Trimmed {
		if id, rest := continueFrom(msgs); id != "" {
			rp.PreviousResponseID, msgs = param.NewOpt(id), rest
		}
	}
	if !p.cfg.Store {
		rp.Include = []oai.ResponseIncludable{oai.ResponseIncludableReasoningEncryptedContent}
	}
	rp.Input = oai.ResponseNewParamsInputUnion{OfInputItemList: toInput(msgs, p.cfg.Store)}
	if req.System != "" {
		rp.Instructions = param.NewOpt(req.System)
	}
	if p.cfg.Temperature != nil {
		rp.Temperature = param.NewOpt(*p.cfg.Temperature)
	}
	if p.cfg.MaxOutputTokens > 0 {
		rp.MaxOutputTokens = param.NewOpt(p.cfg.MaxOutputTokens)
	}
	switch p.cfg.Reasoning {
	case "off":
		rp.Reasoning.Effort = shared.ReasoningEffortNone
	case "low", "medium", "high":
		rp.Reasoning.Effort = shared.ReasoningEffort(p.cfg.Reasoning)
	}
	if p.wantSummary() {
		// The readable summary of the reasoning (--show-reasoning);
		// OpenAI asks organizations to be verified for it.
		rp.Reasoning.Summary = shared.ReasoningSummaryAuto
	}
	for _, d := range req.Tools {
		// strict is true by default in this API and then refuses schemas
		// outside its subset; the registry validates the arguments anyway.
		ft := &oai.FunctionToolParam{Name: d.Name, Parameters: wire.ToolSchema(d.Parameters), Strict: param.NewOpt(false)}
		if d.Description != "" {
			ft.Description = param.NewOpt(d.Description)
		}
		rp.Tools = append(rp.Tools, oai.ToolUnionParam{OfFunction: ft})
	}
	if len(rp.Tools) > 0 && p.cfg.ParallelToolCalls != nil {
		rp.ParallelToolCalls = param.NewOpt(*p.cfg.ParallelToolCalls)
	}
	if s := req.Schema; s != nil {
		var doc map[string]any
		_ = json.Unmarshal(s.Schema, &doc)
		f := oai.ResponseFormatTextConfigParamOfJSONSchema(s.Name, doc)
		if s.Strict {
			f.OfJSONSchema.Strict = param.NewOpt(true)
		}
		rp.Text = oai.ResponseTextConfigParam{Format: f}
	}
	return rp
}

// opaqueItem is one output item of a reply as the loop keeps it, in
// output order: a reasoning item whole (as it came, encrypted content
// included), or where the message and each function call stood, with
// their item ids: a reasoning item must come back followed by the item
// that followed it, which the API knows by its id.
type opaqueItem struct {
	Type string          `json:"type"`
	ID   string          `json:"id,omitempty"`
	Item json.RawMessage `json:"item,omitempty"`
}

type opaque struct {
	ResponseID string `json:"response_id,omitempty"`
	// Stored: the response was made with store true (OpenAI keeps it: a
	// later request may continue from it, and its items' ids name
	// stored items).
	Stored bool         `json:"stored,omitempty"`
	Items  []opaqueItem `json:"items,omitempty"`
}

// continueFrom finds the last assistant message that came from a stored
// response of this provider: its id, and the messages after it.
func continueFrom(msgs []loop.Message) (string, []loop.Message) {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Role != loop.RoleAssistant {
			continue
		}
		if m.Reasoning == nil {
			return "", msgs
		}
		var o opaque
		if json.Unmarshal(m.Reasoning.Opaque, &o) != nil || o.ResponseID == "" || !o.Stored {
			return "", msgs
		}
		return o.ResponseID, msgs[i+1:]
	}
	return "", msgs
}

// toInput converts the loop's messages to input items. An assistant
// message with reasoning is sent as its items were, in their order and
// with their ids: the reasoning items unchanged, the text as the output
// message it was, each call as a function_call.
func toInput(msgs []loop.Message, store bool) oai.ResponseInputParam {
	var in oai.ResponseInputParam
	for _, m := range msgs {
		switch m.Role {
		case loop.RoleSystem:
			in = append(in, oai.ResponseInputItemParamOfMessage(m.Content, oai.EasyInputMessageRoleDeveloper))
		case loop.RoleUser:
			in = append(in, oai.ResponseInputItemParamOfMessage(m.Content, oai.EasyInputMessageRoleUser))
		case loop.RoleTool:
			item := oai.ResponseInputItemParamOfFunctionCallOutput(m.Content)
			item.OfFunctionCallOutput.CallID = param.NewOpt(m.ToolCallID)
			in = append(in, item)
		case loop.RoleAssistant:
			in = append(in, assistantItems(m, store)...)
		}
	}
	return in
}

// usable reports whether a reply's items can go back as they came: with
// store false, only reasoning items that carry their encrypted content
// can (a bare id names an item the API did not keep), and only with
// them do the other items' ids mean anything.
func usable(o opaque, store bool) bool {
	if store {
		return o.Stored
	}
	for _, it := range o.Items {
		if it.Type == "reasoning" {
			var r struct {
				EncryptedContent string `json:"encrypted_content"`
			}
			if json.Unmarshal(it.Item, &r) != nil || r.EncryptedContent == "" {
				return false
			}
		}
	}
	return true
}

func assistantItems(m loop.Message, store bool) oai.ResponseInputParam {
	var out oai.ResponseInputParam
	text := func(id string) {
		if m.Content == "" {
			return
		}
		if id != "" {
			out = append(out, oai.ResponseInputItemParamOfOutputMessage([]oai.ResponseOutputMessageContentUnionParam{
				{OfOutputText: &oai.ResponseOutputTextParam{Text: m.Content, Annotations: []oai.ResponseOutputTextAnnotationUnionParam{}}},
			}, id, oai.ResponseOutputMessageStatusCompleted))
		} else {
			out = append(out, oai.ResponseInputItemParamOfMessage(m.Content, oai.EasyInputMessageRoleAssistant))
		}
		m.Content = ""
	}
	calls := m.ToolCalls
	call := func(id string) {
		if len(calls) > 0 {
			c := calls[0]
			calls = calls[1:]
			item := oai.ResponseInputItemParamOfFunctionCall(c.Arguments, c.ID, c.Name)
			if id != "" {
				item.OfFunctionCall.ID = param.NewOpt(id)
			}
			out = append(out, item)
		}
	}
	var o opaque
	if m.Reasoning != nil && json.Unmarshal(m.Reasoning.Opaque, &o) == nil && usable(o, store) {
		for _, it := range o.Items {
			switch it.Type {
			case "reasoning":
				out = append(out, param.Override[oai.ResponseInputItemUnionParam](it.Item))
			case "message":
				text(it.ID)
			case "function_call":
				call(it.ID)
			}
		}
	}
	text("")
	for len(calls) > 0 {
		call("")
	}
	return out
}

// assembler builds a reply from stream events (or a whole Response).
type assembler struct {
	budget     wire.Budget
	stored     bool // the request had store true
	id, model  string
	items      map[int64]*item
	order      []int64
	reasoning  strings.Builder
	usage      oai.ResponseUsage
	status     string
	incomplete string
	events     int
	done       bool
}

type item struct {
	typ, id, callID, name string
	text, args            strings.Builder
	argsDone              bool
	raw                   json.RawMessage // a reasoning item, whole
}

func (a *assembler) item(i int64, typ string) (*item, error) {
	if a.items == nil {
		a.items = map[int64]*item{}
	}
	it, ok := a.items[i]
	if !ok {
		if i < 0 || len(a.items) > 1<<16 {
			return nil, fmt.Errorf("%w: output item %d", loop.ErrBadResponse, i)
		}
		it = &item{typ: typ}
		a.items[i] = it
		a.order = append(a.order, i)
	}
	if it.typ == "" {
		it.typ = typ
	}
	return it, nil
}

// add takes one event and returns the text or reasoning it carried.
func (a *assembler) add(ev *oai.ResponseStreamEventUnion) (loop.Delta, error) {
	a.events++
	var d loop.Delta
	if err := a.budget.Charge(len(ev.Delta)+len(ev.Arguments), true); err != nil {
		return d, err
	}
	switch ev.Type {
	case "response.created", "response.in_progress":
		a.id, a.model = ev.Response.ID, string(ev.Response.Model)
	case "response.output_item.added", "response.output_item.done":
		if err := a.outputItem(ev.OutputIndex, &ev.Item, ev.Type == "response.output_item.done"); err != nil {
			return d, err
		}
	case "response.output_text.delta", "response.refusal.delta":
		it, err := a.item(ev.OutputIndex, "message")
		if err != nil {
			return d, err
		}
		it.text.WriteString(ev.Delta)
		d.Text = ev.Delta
	case "response.function_call_arguments.delta":
		it, err := a.item(ev.OutputIndex, "function_call")
		if err != nil {
			return d, err
		}
		it.args.WriteString(ev.Delta)
	case "response.function_call_arguments.done":
		it, err := a.item(ev.OutputIndex, "function_call")
		if err != nil {
			return d, err
		}
		it.args.Reset()
		it.args.WriteString(ev.Arguments)
		it.argsDone = true
	case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		a.reasoning.WriteString(ev.Delta)
		d.Reasoning = ev.Delta
	case "response.completed", "response.incomplete":
		a.finish(&ev.Response)
	case "response.failed":
		return d, failure(ev.Response.Error.Code, ev.Response.Error.Message)
	case "error":
		return d, failure(ev.Code, ev.Message)
	}
	return d, nil
}

// failure is the error of a response.failed or error event; the codes
// that mean "try again" keep the status they would have had (429, 500).
func failure[C ~string](code C, msg string) error {
	e := &loop.APIError{Code: textsafe.Clean(string(code), 200), Message: textsafe.Clean(msg, 2048)}
	switch e.Code {
	case "rate_limit_exceeded":
		e.StatusCode = http.StatusTooManyRequests
	case "server_error", "":
		e.StatusCode = http.StatusInternalServerError
	case "context_length_exceeded":
		e.StatusCode = http.StatusBadRequest
	}
	return e
}

func (a *assembler) outputItem(i int64, it *oai.ResponseOutputItemUnion, done bool) error {
	x, err := a.item(i, it.Type)
	if err != nil {
		return err
	}
	if err := a.budget.Charge(len(it.ID)+len(it.CallID)+len(it.Name), false); err != nil {
		return err
	}
	if it.CallID != "" {
		x.callID = it.CallID
	}
	if it.ID != "" {
		x.id = textsafe.Clean(it.ID, 200)
	}
	if it.Name != "" {
		x.name = it.Name
	}
	if it.Type == "function_call" && done && !x.argsDone && it.Arguments.OfString != "" {
		x.args.Reset()
		x.args.WriteString(it.Arguments.OfString)
	}
	if it.Type == "reasoning" && done {
		raw := it.RawJSON()
		if err := a.budget.Charge(len(raw), false); err != nil {
			return err
		}
		x.raw = json.RawMessage(raw)
	}
	return nil
}

// finish takes the final response object (response.completed).
func (a *assembler) finish(r *oai.Response) {
	a.done, a.usage, a.status = true, r.Usage, string(r.Status)
	a.incomplete = r.IncompleteDetails.Reason
	if r.ID != "" {
		a.id = r.ID
	}
	if r.Model != "" {
		a.model = string(r.Model)
	}
	// The final output is authoritative for items the stream left out.
	for i := range r.Output {
		it := &r.Output[i]
		if _, seen := a.items[int64(i)]; !seen {
			x, err := a.item(int64(i), it.Type)
			if err != nil {
				return
			}
			for _, c := range it.Content {
				x.text.WriteString(c.Text)
			}
		}
		_ = a.outputItem(int64(i), it, true)
	}
}

// response takes a whole (non-streamed) reply.
func (a *assembler) response(r *oai.Response) error {
	if r.Status == "failed" {
		return failure(r.Error.Code, r.Error.Message)
	}
	for _, it := range r.Output {
		for _, c := range it.Content {
			if err := a.budget.Charge(len(c.Text), false); err != nil {
				return err
			}
		}
		if err := a.budget.Charge(len(it.Arguments.OfString), false); err != nil {
			return err
		}
	}
	a.finish(r)
	for i := range r.Output {
		if r.Output[i].Type == "reasoning" {
			for _, s := range r.Output[i].Summary {
				a.reasoning.WriteString(s.Text)
			}
		}
	}
	return nil
}

// reply is what was assembled; it fails only for a reply whose output
// cannot be kept.
func (a *assembler) reply() (*loop.Reply, error) {
	r := &loop.Reply{ID: a.id, Model: textsafe.Clean(a.model, 200)}
	var text strings.Builder
	o := opaque{ResponseID: a.id, Stored: a.stored}
	hasReasoning := false
	slices.Sort(a.order) // output order: items the stream left out come where they stood
	for _, i := range a.order {
		it := a.items[i]
		switch it.typ {
		case "message":
			text.WriteString(it.text.String())
			o.Items = append(o.Items, opaqueItem{Type: "message", ID: it.id})
		case "function_call":
			r.Calls = append(r.Calls, loop.ToolCall{ID: it.callID, Name: it.name, Arguments: it.args.String()})
			o.Items = append(o.Items, opaqueItem{Type: "function_call", ID: it.id})
		case "reasoning":
			if len(it.raw) > 0 {
				o.Items = append(o.Items, opaqueItem{Type: "reasoning", Item: it.raw})
				hasReasoning = true
			}
		}
	}
	r.Content = text.String()
	switch {
	case len(r.Calls) > 0:
		r.FinishReason = "tool_calls"
	case a.incomplete == "max_output_tokens":
		r.FinishReason = "length"
	case a.incomplete == "content_filter":
		r.FinishReason = "content_filter"
	case a.done:
		r.FinishReason = "stop"
	}
	if hasReasoning || a.reasoning.Len() > 0 || a.id != "" {
		b, err := json.Marshal(o)
		if err != nil {
			return r, fmt.Errorf("%w: %w", loop.ErrBadResponse, err)
		}
		r.Reasoning = &loop.Reasoning{Text: a.reasoning.String(), Opaque: b}
	}
	u := a.usage
	r.Usage = loop.Usage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.TotalTokens,
		CachedTokens: u.InputTokensDetails.CachedTokens, ReasoningTokens: u.OutputTokensDetails.ReasoningTokens}
	return r, nil
}

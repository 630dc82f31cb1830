// Package gemini is the loop's adapter for the Gemini API
// (generativelanguage.googleapis.com, v1beta generateContent), over
// google.golang.org/genai.
//
//	p, err := gemini.New(gemini.Config{APIKey: key, Model: "gemini-2.5-flash"})
//	if err != nil { ... }
//	c, err := loop.New(loop.Config{Provider: p})
//
// Thought signatures survive tool calls: the signature of each part that
// carried one (a function call, the text, a thought) is kept with the
// assistant message and sent back on the same part, to the same endpoint
// and model (Gemini 3 refuses a function call turn without it). A
// function call's id is sent back only when the API gave one. The key is
// sent as the x-goog-api-key header; no GOOGLE_* or GEMINI_* variable is
// read.
package gemini

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/loop/internal/wire"
	"google.golang.org/genai"
)

// DefaultBaseURL is the base URL of a zero Config.BaseURL.
const DefaultBaseURL = "https://generativelanguage.googleapis.com"

// The thinkingConfig.thinkingBudget Config.Reasoning asks for: off 0 (no
// thinking, where the model allows it), low 1024, medium 8192, high 24576.
var thinkingBudget = map[string]int32{"off": 0, "low": 1024, "medium": 8192, "high": 24576}

// ThinkingBudget is the thinking budget of a Config.Reasoning level, and
// false for "" (no thinkingConfig: the model's default) and unknown ones.
func ThinkingBudget(reasoning string) (int32, bool) {
	b, ok := thinkingBudget[reasoning]
	return b, ok
}

// Config configures a Provider. Only Model is required.
type Config struct {
	// BaseURL of the API ("/v1beta/models/MODEL:generateContent" is
	// appended). Default DefaultBaseURL.
	BaseURL string
	// APIKey is sent as the x-goog-api-key header.
	APIKey string
	// Model is the model name ("gemini-2.5-flash"). Required.
	Model string
	// Temperature, if set, is generationConfig.temperature.
	Temperature *float64
	// Reasoning is the thinking budget (ThinkingBudget), with thought
	// summaries included; "" sends no thinkingConfig (the model's
	// default).
	Reasoning string
	// MaxOutputTokens, if positive, is generationConfig.maxOutputTokens.
	MaxOutputTokens int64
	// HTTPClient, if set, makes the requests. Default: one client shared
	// by every provider of the process.
	HTTPClient *http.Client
}

// Provider is a loop.Provider for the Gemini API. It is safe for
// concurrent use.
type Provider struct {
	client *genai.Client
	cfg    Config
	info   loop.ProviderInfo
}

// New returns a Provider for cfg. It fails if Model is empty, BaseURL is
// not an http(s) URL, or Reasoning is not one of its values.
func New(cfg Config) (*Provider, error) {
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("gemini.Config.Model is required")
	}
	base, err := wire.BaseURL(cfg.BaseURL, DefaultBaseURL)
	if err != nil {
		return nil, fmt.Errorf("%w", err)
	}
	if _, ok := thinkingBudget[cfg.Reasoning]; !ok && cfg.Reasoning != "" {
		return nil, fmt.Errorf("gemini.Config.Reasoning %q is not off, low, medium or high", cfg.Reasoning)
	}
	cfg.BaseURL = base
	hc, key := wire.Client(cfg.HTTPClient), cfg.APIKey
	if key == "" {
		// genai reads GOOGLE_API_KEY or GEMINI_API_KEY when given no key:
		// a key the caller did not choose would go to this endpoint. It
		// gets a placeholder, and the header is removed before sending.
		key = "unset"
		hc.Transport = noKey{hc.Transport}
	}
	client, err := genai.NewClient(context.Background(), &genai.ClientConfig{
		APIKey:      key,
		Backend:     genai.BackendGeminiAPI,
		HTTPClient:  hc,
		HTTPOptions: genai.HTTPOptions{BaseURL: base + "/", APIVersion: "v1beta"},
	})
	if err != nil {
		return nil, fmt.Errorf("%w", err)
	}
	return &Provider{client: client, cfg: cfg, info: loop.ProviderInfo{
		API: "gemini", System: "gcp.gemini", Model: cfg.Model, Endpoint: base, StructuredOutput: true,
	}}, nil
}

// noKey sends requests without an API key.
type noKey struct{ next http.RoundTripper }

func (t noKey) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Del("x-goog-api-key")
	return t.next.RoundTrip(r)
}

// Info implements loop.Provider.
func (p *Provider) Info() loop.ProviderInfo { return p.info }

// Request implements loop.Provider: one generateContent request, or
// streamGenerateContent (alt=sse).
func (p *Provider) Request(ctx context.Context, req *loop.Request) (*loop.Reply, error) {
	contents, config := p.params(req)
	ctx, rec := wire.Start(ctx, wire.BodyLimit(req.MaxReplyBytes))
	a := assembler{budget: wire.Budget{Max: req.MaxReplyBytes}}
	if !req.Stream {
		r, err := p.client.Models.GenerateContent(ctx, p.cfg.Model, contents, config)
		if err != nil {
			return nil, requestError(ctx, rec, err)
		}
		if _, err := a.add(r); err != nil {
			return nil, err
		}
		if !a.finished {
			return nil, fmt.Errorf("%w: no candidate with a finishReason", loop.ErrBadResponse)
		}
		if err := a.failure(); err != nil {
			return nil, err
		}
		return a.reply(), nil
	}
	for r, err := range p.client.Models.GenerateContentStream(ctx, p.cfg.Model, contents, config) {
		if err != nil {
			return a.reply(), requestError(ctx, rec, err)
		}
		d, err := a.add(r)
		if err != nil {
			return a.reply(), err
		}
		if req.OnDelta != nil {
			req.OnDelta(d)
		}
	}
	if !a.finished {
		return a.reply(), &loop.IncompleteStreamError{Marker: "finishReason", Empty: a.events == 0}
	}
	if err := a.failure(); err != nil {
		return nil, err
	}
	return a.reply(), nil
}

// requestError classifies a failure: an error object inside a 200 stream
// keeps the status it names; Google's RetryInfo becomes RetryAfter.
func requestError(ctx context.Context, rec *wire.Recording, err error) error {
	var ae genai.APIError
	if ctx.Err() == nil && errors.As(err, &ae) && rec.Status() > 0 && rec.Status() < 400 {
		return &loop.APIError{StatusCode: ae.Code, Type: textsafe.Clean(ae.Status, 200),
			Message: textsafe.Clean(ae.Message, 2048), RetryAfter: retryDelay(ae.Details), Err: err}
	}
	e := wire.Error(ctx, rec, err)
	var api *loop.APIError
	if errors.As(e, &api) {
		if api.Code == strconv.Itoa(api.StatusCode) {
			api.Code = "" // Google's numeric code repeats the HTTP status
		}
		var body struct {
			Error struct {
				Details []map[string]any `json:"details"`
			} `json:"error"`
		}
		if json.Unmarshal(rec.Body(), &body) == nil {
			api.RetryAfter = retryDelay(body.Error.Details)
		}
	}
	return e
}

// retryDelay reads google.rpc.RetryInfo's retryDelay ("37s") from an
// error's details.
func retryDelay(details []map[string]any) time.Duration {
	for _, d := range details {
		if t, _ := d["@type"].(string); !strings.HasSuffix(t, "google.rpc.RetryInfo") {
			continue
		}
		if s, _ := d["retryDelay"].(string); s != "" {
			if v, err := time.ParseDuration(s); err == nil && v > 0 {
				return min(v, time.Hour)
			}
		}
	}
	return 0
}

// params builds the request.
func (p *Provider) params(req *loop.Request) ([]*genai.Content, *genai.GenerateContentConfig) {
	cfg := &genai.GenerateContentConfig{}
	if req.System != "" {
		cfg.SystemInstruction = &genai.Content{Parts: []*genai.Part{{Text: req.System}}}
	}
	if t := p.cfg.Temperature; t != nil {
		v := float32(*t)
		cfg.Temperature = &v
	}
	if n := p.cfg.MaxOutputTokens; n > 0 {
		cfg.MaxOutputTokens = int32(min(n, 1<<31-1))
	}
	if b, ok := thinkingBudget[p.cfg.Reasoning]; ok {
		cfg.ThinkingConfig = &genai.ThinkingConfig{ThinkingBudget: &b, IncludeThoughts: b > 0}
	}
	if len(req.Tools) > 0 {
		t := &genai.Tool{}
		for _, d := range req.Tools {
			t.FunctionDeclarations = append(t.FunctionDeclarations, &genai.FunctionDeclaration{
				Name: d.Name, Description: d.Description, ParametersJsonSchema: wire.ToolSchema(d.Parameters)})
		}
		cfg.Tools = []*genai.Tool{t}
	}
	if s := req.Schema; s != nil {
		var doc map[string]any
		_ = json.Unmarshal(s.Schema, &doc)
		cfg.ResponseMIMEType, cfg.ResponseJsonSchema = "application/json", doc
	}
	return toContents(req.Messages), cfg
}

// opaquePart is where a part of a reply stood, in order, and the
// thought signature it carried: "thought" (a thought summary, its text
// kept), "text" (the reply's text), "call" (the next function call; ID
// says the API gave it an id).
type opaquePart struct {
	Kind      string `json:"kind"`
	Text      string `json:"text,omitempty"`
	ID        bool   `json:"id,omitempty"`
	Signature []byte `json:"sig,omitempty"`
}

// toContents converts the loop's messages: tool results are function
// responses (one user turn for the results of one model turn), a system
// message in the middle of the history is a user text.
func toContents(msgs []loop.Message) []*genai.Content {
	var out []*genai.Content
	var results *genai.Content
	ids := map[string]bool{} // call ids the API gave
	for _, m := range msgs {
		if m.Role != loop.RoleTool {
			results = nil
		}
		switch m.Role {
		case loop.RoleUser, loop.RoleSystem:
			text := m.Content
			if m.Role == loop.RoleSystem {
				text = "[system] " + text
			}
			out = append(out, &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{{Text: text}}})
		case loop.RoleTool:
			if results == nil {
				results = &genai.Content{Role: genai.RoleUser}
				out = append(out, results)
			}
			fr := &genai.FunctionResponse{Name: m.Name, Response: response(m.Content)}
			if ids[m.ToolCallID] {
				fr.ID = m.ToolCallID
			}
			results.Parts = append(results.Parts, &genai.Part{FunctionResponse: fr})
		case loop.RoleAssistant:
			out = append(out, modelContent(m, ids))
		}
	}
	return out
}

// response is a tool message as a function response: {"error": text} for
// an error, else {"output": the result's JSON, or its text}.
func response(content string) map[string]any {
	if strings.HasPrefix(content, "error (") {
		return map[string]any{"error": content}
	}
	d := json.NewDecoder(strings.NewReader(content))
	d.UseNumber() // large integers stay exact
	var v any
	if d.Decode(&v) == nil && !d.More() {
		return map[string]any{"output": v}
	}
	return map[string]any{"output": content}
}

func modelContent(m loop.Message, ids map[string]bool) *genai.Content {
	c := &genai.Content{Role: genai.RoleModel}
	calls := m.ToolCalls
	text := m.Content
	addText := func(sig []byte) {
		if text != "" || len(sig) > 0 {
			c.Parts = append(c.Parts, &genai.Part{Text: text, ThoughtSignature: sig})
			text = ""
		}
	}
	addCall := func(id bool, sig []byte) {
		if len(calls) == 0 {
			return
		}
		tc := calls[0]
		calls = calls[1:]
		fc := &genai.FunctionCall{Name: tc.Name, Args: wire.Object(tc.Arguments)}
		if id {
			fc.ID = tc.ID
			ids[tc.ID] = true
		}
		c.Parts = append(c.Parts, &genai.Part{FunctionCall: fc, ThoughtSignature: sig})
	}
	if m.Reasoning != nil {
		var parts []opaquePart
		_ = json.Unmarshal(m.Reasoning.Opaque, &parts)
		for _, p := range parts {
			switch p.Kind {
			case "thought":
				if len(p.Signature) > 0 {
					c.Parts = append(c.Parts, &genai.Part{Text: p.Text, Thought: true, ThoughtSignature: p.Signature})
				}
			case "text":
				addText(p.Signature)
			case "call":
				addCall(p.ID, p.Signature)
			}
		}
	}
	addText(nil)
	for len(calls) > 0 {
		addCall(false, nil)
	}
	if len(c.Parts) == 0 {
		c.Parts = []*genai.Part{{Text: " "}}
	}
	return c
}

// assembler builds a reply from response chunks.
type assembler struct {
	budget   wire.Budget
	id       string
	model    string
	text     strings.Builder
	thoughts strings.Builder
	parts    []opaquePart
	// thoughtText holds, for each part of kind "thought", its text.
	thoughtText []*strings.Builder
	calls       []loop.ToolCall
	finish      genai.FinishReason
	usage       *genai.GenerateContentResponseUsageMetadata
	events      int
	finished    bool
}

// add takes one chunk (or a whole response) and returns the text and
// thoughts it carried.
func (a *assembler) add(r *genai.GenerateContentResponse) (loop.Delta, error) {
	a.events++
	var d loop.Delta
	if err := a.budget.Charge(0, true); err != nil {
		return d, err
	}
	if r.ResponseID != "" {
		a.id = r.ResponseID
	}
	if r.ModelVersion != "" {
		a.model = r.ModelVersion
	}
	if r.UsageMetadata != nil {
		a.usage = r.UsageMetadata
	}
	if len(r.Candidates) == 0 || r.Candidates[0] == nil {
		if r.PromptFeedback != nil && r.PromptFeedback.BlockReason != "" {
			a.finish, a.finished = genai.FinishReasonProhibitedContent, true
		}
		return d, nil
	}
	cand := r.Candidates[0]
	if cand.FinishReason != "" {
		a.finish, a.finished = cand.FinishReason, true
	}
	if cand.Content == nil {
		return d, nil
	}
	var text, thought strings.Builder
	for _, p := range cand.Content.Parts {
		if p == nil {
			continue
		}
		if err := a.budget.Charge(len(p.Text)+len(p.ThoughtSignature), false); err != nil {
			return d, err
		}
		switch {
		case p.FunctionCall != nil:
			args, err := json.Marshal(p.FunctionCall.Args)
			if err != nil || p.FunctionCall.Args == nil {
				args = []byte("{}")
			}
			if err := a.budget.Charge(len(args)+len(p.FunctionCall.Name)+len(p.FunctionCall.ID), false); err != nil {
				return d, err
			}
			a.calls = append(a.calls, loop.ToolCall{ID: p.FunctionCall.ID, Name: p.FunctionCall.Name, Arguments: string(args)})
			a.parts = append(a.parts, opaquePart{Kind: "call", ID: p.FunctionCall.ID != "", Signature: p.ThoughtSignature})
			a.thoughtText = append(a.thoughtText, nil)
		case p.Thought:
			a.thoughts.WriteString(p.Text)
			thought.WriteString(p.Text)
			// A thought streams in pieces until one carries its signature;
			// its text is kept (with a builder: pieces may be many) only to
			// go back with that signature.
			if n := len(a.parts); n > 0 && a.parts[n-1].Kind == "thought" && len(a.parts[n-1].Signature) == 0 {
				a.thoughtText[n-1].WriteString(p.Text)
				a.parts[n-1].Signature = p.ThoughtSignature
			} else {
				a.parts = append(a.parts, opaquePart{Kind: "thought", Signature: p.ThoughtSignature})
				a.thoughtText = append(a.thoughtText, nil)
				a.thoughtText[len(a.parts)-1] = &strings.Builder{}
				a.thoughtText[len(a.parts)-1].WriteString(p.Text)
			}
		default:
			a.text.WriteString(p.Text)
			text.WriteString(p.Text)
			a.textPart(p.ThoughtSignature)
		}
	}
	d.Text, d.Reasoning = text.String(), thought.String()
	return d, nil
}

// textPart records where the reply's text stands, with the last
// signature a text part carried.
func (a *assembler) textPart(sig []byte) {
	for i := range a.parts {
		if a.parts[i].Kind == "text" {
			if len(sig) > 0 {
				a.parts[i].Signature = sig
			}
			return
		}
	}
	a.parts = append(a.parts, opaquePart{Kind: "text", Signature: sig})
	a.thoughtText = append(a.thoughtText, nil)
}

// finishReasons maps Gemini's finishReason onto the loop's.
var finishReasons = map[genai.FinishReason]string{
	genai.FinishReasonStop: "stop", genai.FinishReasonMaxTokens: "length",
	genai.FinishReasonSafety: "content_filter", genai.FinishReasonRecitation: "content_filter",
	genai.FinishReasonBlocklist: "content_filter", genai.FinishReasonProhibitedContent: "content_filter",
	genai.FinishReasonSPII: "content_filter",
}

// failedCalls are the finish reasons of a reply whose function calls
// failed on the model's side: the reply is the provider's error, not an
// empty answer.
var failedCalls = map[genai.FinishReason]string{
	genai.FinishReasonMalformedFunctionCall: "the model produced a malformed function call",
	genai.FinishReasonUnexpectedToolCall:    "the model called a tool that was not offered",
	genai.FinishReasonTooManyToolCalls:      "the model made too many tool calls",
}

// failure is the error of a reply that finished with a failed call.
func (a *assembler) failure() error {
	if msg, ok := failedCalls[a.finish]; ok {
		return &loop.APIError{Type: string(a.finish), Message: msg}
	}
	return nil
}

func (a *assembler) reply() *loop.Reply {
	r := &loop.Reply{ID: a.id, Model: textsafe.Clean(a.model, 200), Content: a.text.String(), Calls: a.calls}
	if a.finished {
		r.FinishReason = finishReasons[a.finish]
		if r.FinishReason == "" {
			r.FinishReason = "stop"
		}
	}
	// What goes back: every part's place and signature; a thought only
	// when signed (its text with it): an unsigned thought summary is
	// not needed back, and its text is Reasoning.Text already.
	var parts []opaquePart
	signed := false
	for i, p := range a.parts {
		if p.Kind == "thought" {
			if len(p.Signature) == 0 {
				continue
			}
			p.Text = a.thoughtText[i].String()
		}
		signed = signed || len(p.Signature) > 0
		parts = append(parts, p)
	}
	if signed || a.thoughts.Len() > 0 {
		var o []byte
		if signed {
			o, _ = json.Marshal(parts)
		}
		r.Reasoning = &loop.Reasoning{Text: a.thoughts.String(), Opaque: o}
	}
	if u := a.usage; u != nil {
		// candidatesTokenCount leaves out the thoughts; the loop's
		// completion tokens include them (as OpenAI's do).
		out := int64(u.CandidatesTokenCount) + int64(u.ThoughtsTokenCount)
		r.Usage = loop.Usage{PromptTokens: int64(u.PromptTokenCount), CompletionTokens: out, TotalTokens: int64(u.TotalTokenCount),
			CachedTokens: int64(u.CachedContentTokenCount), ReasoningTokens: int64(u.ThoughtsTokenCount)}
		if r.Usage.TotalTokens == 0 {
			r.Usage.TotalTokens = r.Usage.PromptTokens + out
		}
	}
	return r
}

package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/registry"
)

// SchemaMode says how Config.ResponseSchema is asked of the provider.
type SchemaMode string

// The ways of asking for a structured answer.
const (
	// SchemaAuto (the zero value) sends response_format json_schema —
	// strict when the schema meets OpenAI's strict subset (every object
	// lists all its properties in "required" and has
	// "additionalProperties": false), else not strict — and, if the
	// provider refuses the request with a 400 or 422 that names
	// response_format or json_schema, falls back to SchemaPrompt for the
	// rest of the Cycle's life (the refused request is made again).
	SchemaAuto SchemaMode = ""
	// SchemaNative always sends response_format json_schema; a provider
	// that refuses it fails the run.
	SchemaNative SchemaMode = "native"
	// SchemaPrompt sends no response_format: the schema and the
	// instruction to answer with only matching JSON are added to the
	// system prompt (for providers without structured outputs).
	SchemaPrompt SchemaMode = "prompt"
)

// ErrInvalidOutput: with Config.ResponseSchema, the final answer was not
// JSON matching the schema, also after the loop told the model why and
// asked once more. The run's kind is KindInvalidOutput; the history keeps
// both answers and the correction between them.
var ErrInvalidOutput = errors.New("the final answer does not match the response schema")

// StructuredOutput reports the check of a final answer against
// Config.ResponseSchema; it follows the TurnComplete of every reply
// without tool calls. Valid: Output is the answer's JSON (cleaned of
// unsafe runes, a ```json fence removed) and the run ends. Not valid:
// Error says why; with Retry the model is asked again (a user message
// holding the error is appended), else the run fails with
// ErrInvalidOutput. An answer is at most registry.DefaultMaxArgsBytes
// (1 MiB), decoded as strictly as tool arguments.
type StructuredOutput struct {
	Output json.RawMessage
	Valid  bool
	Error  string
	Retry  bool
}

// EventType implements Event.
func (*StructuredOutput) EventType() string { return "structured_output" }

// MarshalJSON gives {"type":"structured_output","valid":true,"output":<JSON>}
// or {"type":"structured_output","valid":false,"error":"...","retry":true}.
func (e *StructuredOutput) MarshalJSON() ([]byte, error) {
	if e.Valid {
		return json.Marshal(struct {
			Type   string          `json:"type"`
			Valid  bool            `json:"valid"`
			Output json.RawMessage `json:"output"`
		}{e.EventType(), true, safeJSON(e.Output)})
	}
	return json.Marshal(struct {
		Type  string `json:"type"`
		Valid bool   `json:"valid"`
		Error string `json:"error"`
		Retry bool   `json:"retry"`
	}{e.EventType(), false, e.Error, e.Retry})
}

// responseSchema is a compiled Config.ResponseSchema.
type responseSchema struct {
	schema *registry.Schema
	doc    map[string]any // the schema as JSON
	strict bool
	text   string // the schema as sent and as shown in the prompt instruction
}

// compileResponseSchema checks raw with the registry's validator (its
// size, strictness and cost caps); nil for an empty schema.
func compileResponseSchema(raw json.RawMessage) (*responseSchema, error) {
	if len(strings.TrimSpace(string(raw))) == 0 {
		return nil, nil
	}
	s, err := registry.CompileSchema(raw)
	if err != nil {
		return nil, fmt.Errorf("loop.Config.ResponseSchema (the root must be an object schema): %w", err)
	}
	rs := &responseSchema{schema: s}
	_ = json.Unmarshal(raw, &rs.doc)
	rs.strict = strictSubset(rs.doc)
	rs.text = string(marshalNoHTML(rs.doc))
	return rs, nil
}

// strictSubset reports whether every object schema in v lists all its
// properties as required and forbids others, as OpenAI's strict mode
// demands.
func strictSubset(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		if props, ok := x["properties"].(map[string]any); ok || x["type"] == "object" {
			if ap, ok := x["additionalProperties"].(bool); !ok || ap {
				return false
			}
			req, _ := x["required"].([]any)
			if len(req) != len(props) {
				return false
			}
			for _, r := range req {
				if name, _ := r.(string); props[name] == nil {
					return false
				}
			}
		}
		for _, sub := range x {
			if !strictSubset(sub) {
				return false
			}
		}
	case []any:
		for _, sub := range x {
			if !strictSubset(sub) {
				return false
			}
		}
	}
	return true
}

// schemaByPrompt reports whether the schema goes in the system prompt
// rather than in response_format.
func (c *Cycle) schemaByPrompt() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg.SchemaMode == SchemaPrompt || c.schemaFallback || !c.info.StructuredOutput
}

// applySchema adds the schema to a request: Request.Schema, or the
// instruction in the system prompt (returned as the new system prompt and
// history to convert).
func (c *Cycle) applySchema(req *Request, system string, history []Message) (string, []Message) {
	rs := c.schema
	if rs == nil {
		return system, history
	}
	if !c.schemaByPrompt() {
		req.Schema = &ResponseFormat{Name: "final_answer", Schema: json.RawMessage(rs.text), Strict: rs.strict}
		return system, history
	}
	instr := "When you give your final answer (not a tool call), reply with only a JSON value that matches this JSON Schema, with no other text and no code fence:\n" + rs.text
	if len(history) > 0 && history[0].Role == RoleSystem {
		history = append([]Message{history[0]}, history[1:]...)
		history[0].Content += "\n\n" + instr
		return system, history
	}
	return strings.TrimSpace(system + "\n\n" + instr), history
}

// schemaPhrases are the words of a provider refusing a response schema:
// response_format (Chat Completions), text.format (Responses),
// output_config / output_format (Anthropic), responseMimeType /
// responseJsonSchema (Gemini).
var schemaPhrases = []string{"response_format", "json_schema", "structured output", "text.format",
	"output_config", "output_format", "response_mime_type", "responsemimetype", "response mime type",
	"response_schema", "responseschema", "responsejsonschema", "response_json_schema"}

// schemaRefused reports whether err is a provider refusing
// response_format under SchemaAuto; it then switches the Cycle to the
// prompt instruction.
func (c *Cycle) schemaRefused(err error) bool {
	var api *APIError
	if c.schema == nil || c.cfg.SchemaMode != SchemaAuto || c.schemaByPrompt() || !errors.As(err, &api) ||
		(api.StatusCode != 400 && api.StatusCode != 422) {
		return false
	}
	msg := strings.ToLower(api.Message + " " + api.Code + " " + api.Type)
	if !slices.ContainsFunc(schemaPhrases, func(p string) bool { return strings.Contains(msg, p) }) {
		return false
	}
	c.mu.Lock()
	c.schemaFallback = true
	c.mu.Unlock()
	return true
}

// checkOutput checks a final answer against the response schema. It
// returns the answer's JSON when it matches; when it does not, again says
// the model was asked once more (a correction was appended), else err is
// ErrInvalidOutput.
func (r *runState) checkOutput(ctx context.Context, content string) (out json.RawMessage, again bool, err error) {
	rs := r.c.schema
	text := strings.TrimSpace(content)
	if t, ok := strings.CutPrefix(text, "```"); ok { // a fenced answer, ```json ... ```
		if body, ok := strings.CutSuffix(t, "```"); ok {
			_, body, _ = strings.Cut(body, "\n")
			text = strings.TrimSpace(body)
		}
	}
	var verr error
	switch {
	case len(text) > registry.DefaultMaxArgsBytes: // decoding is not free either
		verr = fmt.Errorf("the answer is %d bytes, more than the %d a structured answer may have", len(text), registry.DefaultMaxArgsBytes)
	case !json.Valid([]byte(text)):
		verr = errors.New("not JSON")
	default:
		out = cleanOutput(json.RawMessage(text))
		verr = rs.schema.ValidateJSON(ctx, out)
	}
	if verr == nil {
		if !r.emit(&StructuredOutput{Output: out, Valid: true}) {
			return nil, false, errStopped
		}
		return out, false, nil
	}
	if ctx.Err() != nil {
		return nil, false, fmt.Errorf("run cancelled while checking the answer: %w", ctx.Err())
	}
	why := textsafe.Clean(verr.Error(), 2000)
	retry := !r.schemaRetried
	if !r.emit(&StructuredOutput{Valid: false, Error: why, Retry: retry}) {
		return nil, false, errStopped
	}
	if !retry {
		return nil, false, fmt.Errorf("%w: %s", ErrInvalidOutput, why)
	}
	r.schemaRetried = true
	// The schema goes with the error: a provider may have ignored
	// response_format without refusing it.
	r.c.appendMessage(Message{Role: RoleUser, Content: "[agrun: your answer does not match the required JSON Schema: " + why +
		". Answer again with only a JSON value that matches this schema, no other text: " + rs.text + "]"})
	return nil, true, nil
}

package mcp

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/registry"
)

// Elicitation is a server's question for the person using agrun
// (elicitation/create in form mode), as ClientOptions.Elicit gets it:
// every string cleaned (SanitizeText) and cut, the requested schema
// flattened into its fields. The go-sdk has checked the schema is MCP's
// flat form (primitive properties only); the answer is checked against it,
// and its defaults applied, after Elicit returns.
type Elicitation struct {
	Server  string         // the server's name (the Client's)
	Message string         // what the server asks, at most MaxDescriptionBytes
	Fields  []ElicitField  // the answer's fields, in name order
	Schema  map[string]any // the requested schema, its text cleaned
}

// ElicitField is one field of an Elicitation's answer.
type ElicitField struct {
	Name, Type, Title, Description string
	Required                       bool
	Enum                           []string // the allowed values of a string field, if any
	Default                        any      // nil if none
}

// ElicitAnswer is the person's answer: Action "accept" (with Content),
// "decline" or "cancel".
type ElicitAnswer struct {
	Action  string
	Content map[string]any
}

// Bounds of elicitation requests from one server.
const (
	// MaxElicitFields bounds the fields of one request; a larger one is
	// declined without asking.
	MaxElicitFields = 32
	// MaxElicitationsPerMinute bounds how often a server may ask; beyond
	// it, requests are declined without asking.
	MaxElicitationsPerMinute = 10
	// MaxElicitSchemaBytes bounds a request's schema (MCP's is flat:
	// an object of primitive fields); a larger one is declined.
	MaxElicitSchemaBytes = 16 << 10
	// MaxElicitDepth bounds the nesting of a request's schema (the flat
	// form needs 4: object, properties, field, enum); a deeper one is
	// declined.
	MaxElicitDepth = 8
	// MaxElicitEnum bounds the values a field may offer; a request with
	// more is declined.
	MaxElicitEnum = 64
	// maxElicitFieldText bounds a field's title, description and
	// default as shown.
	maxElicitFieldText = 512
)

// elicitGate serializes a Client's questions (one at a time: a person
// answers one) and bounds their rate.
type elicitGate struct {
	mu     sync.Mutex
	recent []time.Time
	busy   bool
}

// admit reports whether a question (a sampling request) may be asked
// now: none pending, fewer than perMinute in the last minute.
func (g *elicitGate) admit(now time.Time, perMinute int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.recent = slices.DeleteFunc(g.recent, func(t time.Time) bool { return now.Sub(t) > time.Minute })
	if g.busy || len(g.recent) >= perMinute {
		return false
	}
	g.busy = true
	g.recent = append(g.recent, now)
	return true
}

func (g *elicitGate) done() {
	g.mu.Lock()
	g.busy = false
	g.mu.Unlock()
}

var declined = &sdk.ElicitResult{Action: "decline"}

// elicit is the go-sdk's ElicitationHandler: the request bounded and
// cleaned, then ClientOptions.Elicit. URL mode (open this URL) is always
// declined: a server cannot make agrun open a browser or a URL.
func (c *Client) elicit(ctx context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
	p := req.Params
	if p == nil || p.Mode == "url" || p.URL != "" {
		c.log.Warn("elicitation declined: a server may not ask agrun to open a URL", "server", c.name)
		return declined, nil
	}
	raw, err := json.Marshal(p.RequestedSchema)
	if err != nil || len(raw) > MaxElicitSchemaBytes || jsonDepth(raw) > MaxElicitDepth {
		c.log.Warn("elicitation declined: its schema is unusable, over the size limit or nested too deep", "server", c.name, "bytes", len(raw))
		return declined, nil
	}
	clean, err := registry.CleanSchema(json.RawMessage(raw))
	if err != nil {
		return declined, nil
	}
	var schema map[string]any
	json.Unmarshal(clean, &schema)
	fields := elicitFields(schema)
	if len(fields) > MaxElicitFields {
		c.log.Warn("elicitation declined: too many fields", "server", c.name, "fields", len(fields))
		return declined, nil
	}
	for _, f := range fields {
		if len(f.Enum) > MaxElicitEnum {
			c.log.Warn("elicitation declined: a field offers too many values", "server", c.name, "values", len(f.Enum))
			return declined, nil
		}
	}
	if !c.gate.admit(time.Now(), MaxElicitationsPerMinute) {
		c.log.Warn("elicitation declined: another is pending, or the server asked too often", "server", c.name)
		return declined, nil
	}
	defer c.gate.done()
	ans, err := c.opts.Elicit(ctx, &Elicitation{Server: c.name, Message: SanitizeText(p.Message, MaxDescriptionBytes), Fields: fields, Schema: schema})
	if err != nil {
		return nil, err
	}
	switch {
	case ans == nil:
		return declined, nil
	case ans.Action == "accept":
		content := ans.Content
		if content == nil {
			content = map[string]any{}
		}
		return &sdk.ElicitResult{Action: "accept", Content: content}, nil
	case ans.Action == "cancel":
		return &sdk.ElicitResult{Action: "cancel"}, nil
	}
	return declined, nil
}

// elicitFields lists the properties of a (cleaned) elicitation schema.
func elicitFields(schema map[string]any) []ElicitField {
	props, _ := schema["properties"].(map[string]any)
	var req []string
	if r, ok := schema["required"].([]any); ok {
		for _, x := range r {
			if s, ok := x.(string); ok {
				req = append(req, s)
			}
		}
	}
	var out []ElicitField
	for name, v := range props {
		m, _ := v.(map[string]any)
		f := ElicitField{Name: SanitizeText(name, 200), Required: slices.Contains(req, name), Default: m["default"]}
		f.Type, _ = m["type"].(string)
		f.Title, _ = m["title"].(string)
		f.Description, _ = m["description"].(string)
		f.Title, f.Description = SanitizeText(f.Title, maxElicitFieldText), SanitizeText(f.Description, maxElicitFieldText)
		if d, ok := f.Default.(string); ok {
			f.Default = SanitizeText(d, maxElicitFieldText)
		}
		if e, ok := m["enum"].([]any); ok {
			for _, x := range e {
				if s, ok := x.(string); ok {
					f.Enum = append(f.Enum, SanitizeText(s, 200))
				}
			}
		}
		f.Type = SanitizeText(f.Type, 40)
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// jsonDepth is the nesting depth of a JSON document (0 for a scalar), in
// one pass over its bytes; data is valid JSON (json.Marshal's).
func jsonDepth(data []byte) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, b := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
		case b == '"':
			inString = true
		case b == '{' || b == '[':
			depth++
			deepest = max(deepest, depth)
		case b == '}' || b == ']':
			depth--
		}
	}
	return deepest
}

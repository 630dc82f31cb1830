package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/agcore/agrun/internal/textsafe"
)

// MaxDescriptionBytes caps a tool description (and every description and
// title inside its schema) taken from an untrusted source, such as an MCP
// server or a plug-in's tool list; longer ones are cut (at a rune
// boundary) and end in "…".
const MaxDescriptionBytes = 4 << 10

// PrefixedName returns the registry name of the tool called tool in the
// tool source called prefix (an MCP server, an MCP-style plug-in):
// "<prefix>__<tool>" with every character outside [a-zA-Z0-9_-] replaced
// by '_'. A name longer than 64 bytes is cut and ends in '_' and 8 hex
// digits of the SHA-256 of "<prefix>\x00<tool>", so it is stable across
// runs and distinct names stay distinct with high probability. Two
// different tools may still map to one name (say "a.b" and "a_b"): a
// caller registering a list must report that instead of dropping one.
func PrefixedName(prefix, tool string) string {
	var b strings.Builder
	for _, r := range prefix + "__" + tool {
		if r < utf8.RuneSelf && (r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) <= maxNameLen {
		return name
	}
	sum := sha256.Sum256([]byte(prefix + "\x00" + tool))
	suffix := "_" + hex.EncodeToString(sum[:4])
	return name[:maxNameLen-len(suffix)] + suffix
}

// maxNameLen is the longest tool name (NamePattern).
const maxNameLen = 64

// CleanSchema returns an input schema taken from an untrusted source as
// JSON with every "description" and "title" string in it passed through
// textsafe.Clean and cut to MaxDescriptionBytes (the model reads them
// too). Property names and every other value are kept: the model must
// send them back verbatim, so a key or another string value with an
// unsafe character refuses the schema, as does nesting deeper than
// MaxDepth. A nil schema is {"type":"object"}; one larger than
// MaxSchemaBytes, or not JSON, is refused. The result still has to
// pass CompileSchema (Register checks it).
func CleanSchema(schema any) (json.RawMessage, error) {
	if schema == nil {
		return json.RawMessage(`{"type":"object"}`), nil
	}
	raw, ok := schema.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(schema); err != nil {
			return nil, fmt.Errorf("input schema: %w", err)
		}
	}
	if len(raw) > MaxSchemaBytes {
		return nil, fmt.Errorf("input schema is %d bytes, at most %d", len(raw), MaxSchemaBytes)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	if v == nil {
		return json.RawMessage(`{"type":"object"}`), nil
	}
	v, err := cleanSchemaValue(v, 0)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	return json.Marshal(v)
}

// cleanSchemaValue cleans the description and title strings of a schema
// at every depth, and refuses what it could not make safe without
// changing what the model must send back: a key or another string with an
// unsafe character (a property name, an enum value, a default), or
// nesting deeper than MaxDepth.
func cleanSchemaValue(v any, depth int) (any, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", MaxDepth)
	}
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if !textsafe.IsSafe(k) {
				return nil, fmt.Errorf("the key %q holds an unsafe character", textsafe.Escape(textsafe.Truncate(k, 80)))
			}
			if s, ok := e.(string); ok && (k == "description" || k == "title") {
				x[k] = textsafe.Clean(s, MaxDescriptionBytes)
				continue
			}
			c, err := cleanSchemaValue(e, depth+1)
			if err != nil {
				return nil, err
			}
			x[k] = c
		}
	case []any:
		for i, e := range x {
			c, err := cleanSchemaValue(e, depth+1)
			if err != nil {
				return nil, err
			}
			x[i] = c
		}
	case string:
		if !textsafe.IsSafe(x) {
			return nil, fmt.Errorf("the value %q holds an unsafe character", textsafe.Escape(textsafe.Truncate(x, 80)))
		}
	}
	return v, nil
}

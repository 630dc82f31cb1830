package mcp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/registry"
)

// maxNameLen is the longest registry tool name (registry.ValidName).
const maxNameLen = 64

// MaxDescriptionBytes caps a tool description taken from a server; longer
// descriptions are cut (at a rune boundary) and end in "…".
const MaxDescriptionBytes = 4 << 10

// MaxErrorTextBytes caps the message of an execution_failed error taken
// from the text of an isError result; longer messages are cut (at a rune
// boundary) and end in "…".
const MaxErrorTextBytes = 4 << 10

// ToolName returns the registry name of the tool called tool on the server
// called server: "<server>__<tool>" with every character outside
// [a-zA-Z0-9_-] replaced by '_'. A name longer than 64 bytes is cut and ends
// in '_' and 8 hex digits of the SHA-256 of "<server>\x00<tool>", so it is
// stable across runs and distinct names stay distinct with high
// probability. Two different tools may still map to one name (say "a.b" and
// "a_b"); the Client reports that as an error instead of dropping one.
func ToolName(server, tool string) string {
	var b strings.Builder
	for _, r := range server + "__" + tool {
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
	sum := sha256.Sum256([]byte(server + "\x00" + tool))
	suffix := "_" + hex.EncodeToString(sum[:4])
	return name[:maxNameLen-len(suffix)] + suffix
}

// SanitizeText makes text from an untrusted server safe to show a model or a
// terminal: it is textsafe.Clean, agrun's one definition of unsafe text.
// Invalid UTF-8 becomes U+FFFD; control characters other than newline and
// tab are dropped, and so are invisible characters that can hide
// instructions from a human reader (format characters such as zero-width
// spaces, bidirectional overrides and Unicode tag characters, variation
// selectors, Hangul fillers, line and paragraph separators, private-use
// characters, noncharacters); the result is cut to at most max bytes (at a
// rune boundary, ending in "…"). max <= 0 means no cut.
func SanitizeText(s string, max int) string { return textsafe.Clean(s, max) }

// sanitizeSchema returns the tool's input schema as JSON with every
// "description" and "title" string in it sanitized like a description (the
// model reads them too). Property names and every other value are kept: the
// model must send them back verbatim. Schemas larger than
// registry.MaxSchemaBytes are refused.
func sanitizeSchema(schema any) (json.RawMessage, error) {
	if schema == nil {
		return json.RawMessage(`{"type":"object"}`), nil
	}
	raw, err := json.Marshal(schema)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	if len(raw) > registry.MaxSchemaBytes {
		return nil, fmt.Errorf("input schema is %d bytes, at most %d", len(raw), registry.MaxSchemaBytes)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	v = sanitizeSchemaValue(v, 0)
	return json.Marshal(v)
}

func sanitizeSchemaValue(v any, depth int) any {
	if depth > 64 { // registry's strict decoder refuses deeper documents anyway
		return v
	}
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && (k == "description" || k == "title") {
				x[k] = SanitizeText(s, MaxDescriptionBytes)
				continue
			}
			x[k] = sanitizeSchemaValue(e, depth+1)
		}
	case []any:
		for i, e := range x {
			x[i] = sanitizeSchemaValue(e, depth+1)
		}
	}
	return v
}

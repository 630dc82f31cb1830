package mcp

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/registry"
)

// MaxDescriptionBytes caps a tool description taken from a server; longer
// descriptions are cut (at a rune boundary) and end in "…". It is
// registry.MaxDescriptionBytes, the one cap of untrusted descriptions.
const MaxDescriptionBytes = registry.MaxDescriptionBytes

// MaxErrorTextBytes caps the message of an execution_failed error taken
// from the text of an isError result; longer messages are cut (at a rune
// boundary) and end in "…".
const MaxErrorTextBytes = 4 << 10

// ToolName returns the registry name of the tool called tool on the server
// called server: registry.PrefixedName(server, tool), "<server>__<tool>"
// with every character outside [a-zA-Z0-9_-] replaced by '_' and a long
// name cut and ended with 8 hex digits of a hash. Two different tools may
// still map to one name (say "a.b" and "a_b"); the Client reports that as
// an error instead of dropping one.
func ToolName(server, tool string) string { return registry.PrefixedName(server, tool) }

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
// "description" and "title" string in it sanitized like a description:
// registry.CleanSchema, the one cleaning of untrusted schemas.
func sanitizeSchema(schema any) (json.RawMessage, error) { return registry.CleanSchema(schema) }

// maxTitleBytes caps a tool title taken from a server.
const maxTitleBytes = 256

// outputSchema is a server tool's output schema, cleaned as input schemas
// are, or nil when there is none or it is unusable (not an object schema,
// too large, not compilable): a missing output schema only means less is
// known, so it is dropped rather than the tool.
func outputSchema(schema any) json.RawMessage {
	if schema == nil {
		return nil
	}
	raw, err := sanitizeSchema(schema)
	if err != nil {
		return nil
	}
	var top struct {
		Type any `json:"type"`
	}
	if json.Unmarshal(raw, &top) != nil || top.Type != "object" {
		return nil
	}
	if _, err := registry.CompileSchema(raw); err != nil {
		return nil
	}
	return raw
}

// fileRoots turns absolute directory paths into file:// roots.
//
//lint:ignore SA1019 roots are offered to servers on protocol versions before 2026-07-28 (SEP-2577 deprecates them, with a 12-month window; docs/MCP.md)
func fileRoots(dirs []string) ([]*sdk.Root, error) {
	var out []*sdk.Root //lint:ignore SA1019 as above
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			return nil, fmt.Errorf("root %q: an absolute path is needed", d)
		}
		u := url.URL{Scheme: "file", Path: filepath.ToSlash(filepath.Clean(d))}
		out = append(out, &sdk.Root{URI: u.String(), Name: filepath.Base(d)}) //lint:ignore SA1019 as above
	}
	return out, nil
}

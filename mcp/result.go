package mcp

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agcore/agrun/internal/textsafe"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// resultJSON maps a tools/call result to what the model is given:
//
//   - structuredContent, when present, is returned as JSON, with every
//     string in it (object keys included) passed through SanitizeText
//     (textsafe.CleanJSON);
//   - otherwise the content blocks become one JSON string: text blocks as
//     they are, images and audio as a short placeholder (type, MIME type,
//     size) instead of their base64 data, resource links as their URI,
//     embedded resources as their text (or a placeholder for a blob), all
//     joined with newlines and passed through SanitizeText.
//
// Either way no control character but newline and tab, and no invisible
// character, reaches the model or a terminal, and the JSON stays valid.
// For an isError result, use contentText for the message instead.
func resultJSON(res *sdk.CallToolResult) (json.RawMessage, error) {
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return nil, fmt.Errorf("structuredContent: %w", err)
		}
		b, err = textsafe.CleanJSON(b)
		if err != nil {
			return nil, fmt.Errorf("structuredContent: %w", err)
		}
		return b, nil
	}
	b, err := json.Marshal(SanitizeText(contentText(res.Content), 0))
	if err != nil {
		return nil, err
	}
	return b, nil
}

// cleanOutput returns a registry tool's output as agrun mcp serve passes
// it to its client: every string in it passed through SanitizeText
// (textsafe.CleanJSON), so that a JSON escape such as "\u001b" cannot
// become a raw control character once the client decodes it; output that
// is not JSON is cleaned as text.
func cleanOutput(out json.RawMessage) json.RawMessage {
	if c, err := textsafe.CleanJSON(out); err == nil {
		return c
	}
	return json.RawMessage(SanitizeText(string(out), 0))
}

// contentText renders content blocks as text (see resultJSON).
func contentText(content []sdk.Content) string {
	parts := make([]string, 0, len(content))
	for _, c := range content {
		switch c := c.(type) {
		case *sdk.TextContent:
			parts = append(parts, c.Text)
		case *sdk.ImageContent:
			parts = append(parts, placeholder("image", c.MIMEType, len(c.Data)))
		case *sdk.AudioContent:
			parts = append(parts, placeholder("audio", c.MIMEType, len(c.Data)))
		case *sdk.ResourceLink:
			parts = append(parts, c.URI)
		case *sdk.EmbeddedResource:
			r := c.Resource
			switch {
			case r == nil:
				parts = append(parts, "[resource]")
			case r.Blob != nil:
				parts = append(parts, fmt.Sprintf("[resource %s: %s, %d bytes]", r.URI, orUnknown(r.MIMEType), len(r.Blob)))
			default:
				parts = append(parts, r.Text)
			}
		default:
			parts = append(parts, fmt.Sprintf("[%T content]", c))
		}
	}
	return strings.Join(parts, "\n")
}

func placeholder(kind, mime string, size int) string {
	return fmt.Sprintf("[%s: %s, %d bytes]", kind, orUnknown(mime), size)
}

func orUnknown(mime string) string {
	if mime == "" {
		return "unknown type"
	}
	return SanitizeText(mime, 100)
}

package registry

import "encoding/json"

// A Presented tool says more about itself than Tool requires, for clients
// that show or check it (agrun mcp serve passes both on): a short
// human-readable title, and the JSON Schema of its output (an object
// schema; a result then is an object that conforms). Either may be empty.
// An MCP server's tools re-served by agrun keep the title and output
// schema their server gave.
type Presented interface {
	Tool
	Title() string
	OutputSchema() json.RawMessage
}

// PresentationOf returns t's title and output schema if t is Presented,
// else empty ones.
func PresentationOf(t Tool) (title string, outputSchema json.RawMessage) {
	if p, ok := t.(Presented); ok {
		return p.Title(), p.OutputSchema()
	}
	return "", nil
}

// Command schemabomb is an MCP server whose tools' input schemas cost
// their client exponential validation work: "anyof" and "allof" chain
// $defs by anyOf / allOf of two $refs to the next (26 and 40 levels, the
// shapes of issue 14), "levels" is cheap per value but doubles its work at
// every level of the arguments, and "fine" is a short chain under the cap.
// Every tool answers "ran".
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// chain is properties.x -> d0, each di a kw of two $refs to d(i+1).
func chain(kw string, n int) json.RawMessage {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{"x":{"$ref":"#/$defs/d0"}},"$defs":{`)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `"d%d":{"%s":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]},`, i, kw, i+1, i+1)
	}
	fmt.Fprintf(&b, `"d%d":{"type":"string"}}}`, n)
	return json.RawMessage(b.String())
}

const levels = `{"type":"object","allOf":[{"properties":{"a":{"$ref":"#"}}},{"properties":{"a":{"$ref":"#"}}}]}`

func main() {
	s := sdk.NewServer(&sdk.Implementation{Name: "schemabomb", Version: "1"}, nil)
	ran := func(ctx context.Context, r *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "ran"}}}, nil
	}
	for name, schema := range map[string]json.RawMessage{
		"anyof":  chain("anyOf", 26),
		"allof":  chain("allOf", 40),
		"levels": json.RawMessage(levels),
		"fine":   chain("anyOf", 8),
	} {
		s.AddTool(&sdk.Tool{Name: name, Description: "a costly schema", InputSchema: schema}, ran)
	}
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		log.Print(err)
	}
}

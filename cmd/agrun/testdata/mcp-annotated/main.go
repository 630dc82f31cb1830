// Command mcp-annotated is an MCP server over stdio for the approvals
// tests: "read" says it is read-only, "rm" leaves destructiveHint unset
// (MCP: destructive) and says it is closed-world.
package main

import (
	"context"
	"log"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

type pathIn struct {
	Path string `json:"path"`
}

func main() {
	f := false
	s := sdk.NewServer(&sdk.Implementation{Name: "annotated", Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "read", Description: "Reads a path.", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &f}},
		func(ctx context.Context, r *sdk.CallToolRequest, in pathIn) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "contents of " + in.Path}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "rm", Description: "Removes a path.", Annotations: &sdk.ToolAnnotations{OpenWorldHint: &f}},
		func(ctx context.Context, r *sdk.CallToolRequest, in pathIn) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "removed " + in.Path}}}, nil, nil
		})
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}

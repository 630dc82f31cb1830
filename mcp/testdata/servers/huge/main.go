// Command huge is an MCP server whose tool "huge" answers with one message
// of HUGE_BYTES bytes (default 17 MiB, over the client's 16 MiB cap); tool
// "big" answers with 1 MiB, under it.
package main

import (
	"context"
	"os"
	"strconv"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	n := 17 << 20
	if v, err := strconv.Atoi(os.Getenv("HUGE_BYTES")); err == nil {
		n = v
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "huge", Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "huge"}, func(ctx context.Context, r *sdk.CallToolRequest, in struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Repeat("x", n)}}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "big"}, func(ctx context.Context, r *sdk.CallToolRequest, in struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Repeat("y", 1<<20)}}}, nil, nil
	})
	_ = s.Run(context.Background(), &sdk.StdioTransport{})
}

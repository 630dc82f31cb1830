// Command garbage is an MCP server that writes things other than JSON-RPC
// to stdout: a banner before the handshake, and, in tool "noisy", plain
// text, broken JSON and control bytes before its answer.
package main

import (
	"context"
	"os"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

type echoIn struct {
	Text string `json:"text"`
}

func main() {
	os.Stdout.WriteString("Starting garbage server v1.0...\n\n")
	s := sdk.NewServer(&sdk.Implementation{Name: "garbage", Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "echo"}, func(ctx context.Context, r *sdk.CallToolRequest, in echoIn) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: in.Text}}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "noisy"}, func(ctx context.Context, r *sdk.CallToolRequest, in struct{}) (*sdk.CallToolResult, any, error) {
		os.Stdout.WriteString("DEBUG: computing the answer\n")
		os.Stdout.WriteString("{\"jsonrpc\":\"2.0\",\"broken\n")
		os.Stdout.WriteString("\x00\x01\x02\xff\xfe binary junk\n")
		os.Stdout.WriteString("42\n")
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "quiet now"}}}, nil, nil
	})
	_ = s.Run(context.Background(), &sdk.StdioTransport{})
}

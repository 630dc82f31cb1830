// Command hang is an MCP server that never answers: tool "hang" blocks
// forever (ignoring cancellation); with HANG_INIT=1 it does not even answer
// the handshake.
package main

import (
	"context"
	"io"
	"os"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

type echoIn struct {
	Text string `json:"text"`
}

func main() {
	if os.Getenv("HANG_INIT") == "1" {
		_, _ = io.Copy(io.Discard, os.Stdin) // read everything, answer nothing
		select {}
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "hang", Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "echo"}, func(ctx context.Context, r *sdk.CallToolRequest, in echoIn) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: in.Text}}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "hang"}, func(ctx context.Context, r *sdk.CallToolRequest, in struct{}) (*sdk.CallToolResult, any, error) {
		select {}
	})
	_ = s.Run(context.Background(), &sdk.StdioTransport{})
}

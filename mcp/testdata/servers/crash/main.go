// Command crash is an MCP server that exits in the middle of a call (tool
// "crash"), or at once when CRASH_AT_START=1. Each start appends the
// process id to $PIDFILE, so tests can count restarts.
package main

import (
	"context"
	"fmt"
	"os"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

type echoIn struct {
	Text string `json:"text"`
}

func main() {
	if f := os.Getenv("PIDFILE"); f != "" {
		pf, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintln(pf, os.Getpid())
			pf.Close()
		}
	}
	if os.Getenv("CRASH_AT_START") == "1" {
		fmt.Fprintln(os.Stderr, "crash: dying at start")
		os.Exit(4)
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "crash", Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "echo"}, func(ctx context.Context, r *sdk.CallToolRequest, in echoIn) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: in.Text}}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "crash"}, func(ctx context.Context, r *sdk.CallToolRequest, in struct{}) (*sdk.CallToolResult, any, error) {
		fmt.Fprintln(os.Stderr, "crash: exiting mid-call")
		os.Exit(3)
		return nil, nil, nil
	})
	_ = s.Run(context.Background(), &sdk.StdioTransport{})
}

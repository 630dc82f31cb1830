// Command stderrflood is an MCP server that writes STDERR_MB (default 32)
// MiB to stderr before it starts serving: a client that does not drain
// stderr would deadlock it.
package main

import (
	"bytes"
	"context"
	"os"
	"strconv"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

type echoIn struct {
	Text string `json:"text"`
}

func main() {
	mb := 32
	if v, err := strconv.Atoi(os.Getenv("STDERR_MB")); err == nil {
		mb = v
	}
	line := append(bytes.Repeat([]byte("e"), 1023), '\n')
	chunk := bytes.Repeat(line, 1024) // 1 MiB
	for range mb {
		os.Stderr.Write(chunk)
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "stderrflood", Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "echo"}, func(ctx context.Context, r *sdk.CallToolRequest, in echoIn) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: in.Text}}}, nil, nil
	})
	_ = s.Run(context.Background(), &sdk.StdioTransport{})
}

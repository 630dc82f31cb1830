// Command grandchild is an MCP server that starts a long-lived child
// ("sleep 600", which inherits its stdout) and writes the child's process
// id to $PIDFILE. Tool "die" exits at once, leaving the child holding
// stdout open. When its stdin closes the server exits with status 1 (a
// normal shutdown, as far as the client is concerned). With STUBBORN=1 it
// ignores SIGTERM and the end of its stdin, so only SIGKILL ends it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

type echoIn struct {
	Text string `json:"text"`
}

func main() {
	child := exec.Command("sleep", "600")
	child.Stdout = os.Stdout
	if err := child.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "grandchild:", err)
		os.Exit(2)
	}
	if f := os.Getenv("PIDFILE"); f != "" {
		os.WriteFile(f, []byte(fmt.Sprint(child.Process.Pid)), 0o644)
	}
	stubborn := os.Getenv("STUBBORN") == "1"
	if stubborn {
		signal.Ignore(syscall.SIGTERM)
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "grandchild", Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "echo"}, func(ctx context.Context, r *sdk.CallToolRequest, in echoIn) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: in.Text}}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "die"}, func(ctx context.Context, r *sdk.CallToolRequest, in struct{}) (*sdk.CallToolResult, any, error) {
		os.Exit(5)
		return nil, nil, nil
	})
	_ = s.Run(context.Background(), &sdk.StdioTransport{})
	if stubborn {
		select {}
	}
	os.Exit(1)
}

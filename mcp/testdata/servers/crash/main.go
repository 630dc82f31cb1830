// Command crash is an MCP server that exits in the middle of a call (tool
// "crash"), or at once when CRASH_AT_START=1. Each start appends the
// process id to $PIDFILE, so tests can count restarts. With
// CRASH_TOGETHER=N its first start exits only once N crash calls are in
// progress (or after 10 s), so that they are all pending when it dies.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

type echoIn struct {
	Text string `json:"text"`
}

func main() {
	first := true
	if f := os.Getenv("PIDFILE"); f != "" {
		if b, err := os.ReadFile(f); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			first = false
		}
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
	together, _ := strconv.Atoi(os.Getenv("CRASH_TOGETHER"))
	var pending atomic.Int32
	sdk.AddTool(s, &sdk.Tool{Name: "crash"}, func(ctx context.Context, r *sdk.CallToolRequest, in struct{}) (*sdk.CallToolResult, any, error) {
		pending.Add(1)
		for deadline := time.Now().Add(10 * time.Second); first && int(pending.Load()) < together && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		fmt.Fprintln(os.Stderr, "crash: exiting mid-call")
		os.Exit(3)
		return nil, nil, nil
	})
	_ = s.Run(context.Background(), &sdk.StdioTransport{})
}

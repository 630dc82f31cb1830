// Command mcpserver is the MCP side of the comparison in internal/cmd/bench: a
// long-running stdio MCP server (go-sdk) with one tool, word_count, doing
// the work of testdata/word_count with the same arguments and result.
package main

import (
	"context"
	"log"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Args are the tool's arguments.
type Args struct {
	Text string `json:"text"`
}

// Result is the tool's answer.
type Result struct {
	Words int `json:"words"`
	Lines int `json:"lines"`
	Chars int `json:"chars"`
	Bytes int `json:"bytes"`
}

func main() {
	s := sdk.NewServer(&sdk.Implementation{Name: "bench-wc", Version: "1.0.0"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "word_count", Description: "Count the words of a text."},
		func(_ context.Context, _ *sdk.CallToolRequest, in Args) (*sdk.CallToolResult, Result, error) {
			lines := strings.Count(in.Text, "\n")
			if in.Text != "" && !strings.HasSuffix(in.Text, "\n") {
				lines++
			}
			return nil, Result{
				Words: len(strings.Fields(in.Text)),
				Lines: lines,
				Chars: utf8.RuneCountInString(in.Text),
				Bytes: len(in.Text),
			}, nil
		})
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}

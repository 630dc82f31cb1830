//go:build wasip1

// Command textkit is an MCP-style plug-in in hyper-mcp's plug-in
// interface (the exports and JSON of hyper-mcp's Go template: list_tools
// and call_tool, MCP's ListToolsResult and CallToolResult), written with
// Extism's Go PDK: the example of README's "Use Extism and hyper-mcp
// plug-ins", of wasmtools' MCP-style plug-in tests and of the
// differential test.
//
// Tools:
//   - reverse: {"text": "..."} -> the text reversed, as a text block.
//   - stats: {"text": "..."} -> structuredContent {"words": N, "runes": N}.
//
// An empty text, or an unknown tool, is an isError result.
package main

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/extism/go-pdk"
)

type tool struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"inputSchema"`
}

type listToolsResult struct {
	Tools []tool `json:"tools"`
}

type callToolRequest struct {
	Request struct {
		Name      string `json:"name"`
		Arguments struct {
			Text string `json:"text"`
		} `json:"arguments"`
	} `json:"request"`
}

type content struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type callToolResult struct {
	Content           []content      `json:"content"`
	IsError           bool           `json:"isError,omitempty"`
	StructuredContent map[string]any `json:"structuredContent,omitempty"`
}

var textSchema = map[string]any{
	"type":       "object",
	"properties": map[string]any{"text": map[string]any{"type": "string", "description": "The text"}},
	"required":   []string{"text"},
}

//go:wasmexport list_tools
func listTools() int32 {
	pdk.Log(pdk.LogDebug, "list_tools")
	if err := pdk.OutputJSON(listToolsResult{Tools: []tool{
		{Name: "reverse", Description: "Reverse a text", InputSchema: textSchema},
		{Name: "stats", Description: "Count the words and characters of a text", InputSchema: textSchema},
	}}); err != nil {
		pdk.SetError(err)
		return 1
	}
	return 0
}

//go:wasmexport call_tool
func callTool() int32 {
	var in callToolRequest
	if err := pdk.InputJSON(&in); err != nil {
		pdk.SetError(err)
		return 1
	}
	if err := pdk.OutputJSON(call(in)); err != nil {
		pdk.SetError(err)
		return 1
	}
	return 0
}

func call(in callToolRequest) callToolResult {
	text := in.Request.Arguments.Text
	if text == "" {
		return failed("text is empty")
	}
	switch in.Request.Name {
	case "reverse":
		r := []rune(text)
		for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
			r[i], r[j] = r[j], r[i]
		}
		return callToolResult{Content: []content{{Type: "text", Text: string(r)}}}
	case "stats":
		words, runes := len(strings.Fields(text)), utf8.RuneCountInString(text)
		return callToolResult{
			Content:           []content{{Type: "text", Text: fmt.Sprintf("%d words, %d characters", words, runes)}},
			StructuredContent: map[string]any{"words": words, "runes": runes},
		}
	}
	return failed("no tool " + in.Request.Name)
}

func failed(msg string) callToolResult {
	return callToolResult{Content: []content{{Type: "text", Text: msg}}, IsError: true}
}

func main() {}

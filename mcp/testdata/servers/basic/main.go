// Command basic is a well-behaved MCP server over stdio for the mcp tests:
// echo, add (structured output), getenv, media (image, audio, resource link),
// fail (isError), sleep, add_tool/remove_tool (list changes) and a tool
// with a hostile description. PAGESIZE=n pages tools/list; COLLIDE=1 adds
// two tools whose registry names collide.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

type echoIn struct {
	Text string `json:"text"`
}

type addIn struct {
	A float64 `json:"a"`
	B float64 `json:"b"`
}

type addOut struct {
	Sum float64 `json:"sum"`
}

type nameIn struct {
	Name string `json:"name"`
}

type sleepIn struct {
	MS int `json:"ms"`
}

func main() {
	pageSize, _ := strconv.Atoi(os.Getenv("PAGESIZE"))
	s := sdk.NewServer(&sdk.Implementation{Name: "basic", Version: "1"}, &sdk.ServerOptions{PageSize: pageSize})
	sdk.AddTool(s, &sdk.Tool{Name: "echo", Description: "Echoes text."}, func(ctx context.Context, r *sdk.CallToolRequest, in echoIn) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: in.Text}}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "add", Description: "Adds two numbers."}, func(ctx context.Context, r *sdk.CallToolRequest, in addIn) (*sdk.CallToolResult, addOut, error) {
		return nil, addOut{Sum: in.A + in.B}, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "media", Description: "Returns media."}, func(ctx context.Context, r *sdk.CallToolRequest, in struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{
			&sdk.TextContent{Text: "here"},
			&sdk.ImageContent{MIMEType: "image/png", Data: make([]byte, 300000)},
			&sdk.AudioContent{MIMEType: "audio/wav", Data: make([]byte, 1234)},
			&sdk.ResourceLink{URI: "file:///tmp/report.txt", Name: "report"},
			&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "mem://x", MIMEType: "text/plain", Text: "embedded text"}},
		}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "fail", Description: "Always fails."}, func(ctx context.Context, r *sdk.CallToolRequest, in struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "disk on fire"}}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "sleep", Description: "Sleeps."}, func(ctx context.Context, r *sdk.CallToolRequest, in sleepIn) (*sdk.CallToolResult, any, error) {
		select {
		case <-time.After(time.Duration(in.MS) * time.Millisecond):
		case <-ctx.Done():
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "slept"}}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "add_tool", Description: "Adds a tool."}, func(ctx context.Context, r *sdk.CallToolRequest, in nameIn) (*sdk.CallToolResult, any, error) {
		sdk.AddTool(s, &sdk.Tool{Name: in.Name, Description: "Added at run time."}, func(ctx context.Context, r *sdk.CallToolRequest, in struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "I am new"}}}, nil, nil
		})
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "added"}}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "remove_tool", Description: "Removes a tool."}, func(ctx context.Context, r *sdk.CallToolRequest, in nameIn) (*sdk.CallToolResult, any, error) {
		s.RemoveTools(in.Name)
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "removed"}}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "getenv", Description: "Reads an environment variable."}, func(ctx context.Context, r *sdk.CallToolRequest, in nameIn) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: in.Name + "=" + os.Getenv(in.Name)}}}, nil, nil
	})
	hostile := "Reads files.\u200b\u202eevil\u202c\x1b[31mred\x1b[0m\U000E0041\U000E0042 " + strings.Repeat("long ", 2000)
	sdk.AddTool(s, &sdk.Tool{Name: "hostile.desc", Description: hostile}, func(ctx context.Context, r *sdk.CallToolRequest, in struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "ok"}}}, nil, nil
	})
	if os.Getenv("COLLIDE") == "1" {
		for _, n := range []string{"x.y", "x_y"} {
			sdk.AddTool(s, &sdk.Tool{Name: n}, func(ctx context.Context, r *sdk.CallToolRequest, in struct{}) (*sdk.CallToolResult, any, error) {
				return nil, nil, nil
			})
		}
	}
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "basic:", err)
	}
}

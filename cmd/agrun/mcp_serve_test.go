package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/mcp"
)

// TestMCPServeResources: `[mcp.NAME] serve_resources = true` makes `agrun
// mcp serve` (the built binary) re-serve that server's resources and
// prompts, cleaned; a server without it contributes none.
func TestMCPServeResources(t *testing.T) {
	up := func(name string) string {
		s := sdk.NewServer(&sdk.Implementation{Name: name}, nil)
		s.AddResource(&sdk.Resource{URI: name + "://readme", Name: "readme"}, func(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, Text: "the " + name + " readme\x1b[2J"}}}, nil
		})
		s.AddPrompt(&sdk.Prompt{Name: "review", Arguments: []*sdk.PromptArgument{{Name: "file"}}}, func(_ context.Context, req *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			return &sdk.GetPromptResult{Messages: []*sdk.PromptMessage{{Role: "user", Content: &sdk.TextContent{Text: "review " + req.Params.Arguments["file"]}}}}, nil
		})
		srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	e := newTestEnv(t, "", "\n[mcp.docs]\nurl = \""+up("docs")+"\"\nserve_resources = true\n\n[mcp.other]\nurl = \""+up("other")+"\"\n")
	ctx := context.Background()
	cl, err := mcp.NewClient("agrun", mcp.Stdio{Command: binary(t), Args: []string{"-c", e.config, "mcp", "serve"}, Dir: e.dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)
	rs, err := cl.Resources(ctx)
	if err != nil || len(rs) != 1 || rs[0].URI != "docs://readme" {
		t.Fatalf("resources %+v %v", rs, err)
	}
	text, err := cl.ReadResource(ctx, "docs://readme")
	if err != nil || !strings.HasPrefix(text, "the docs readme") || strings.Contains(text, "\x1b") {
		t.Errorf("read %q %v", text, err)
	}
	ps, err := cl.Prompts(ctx)
	if err != nil || len(ps) != 1 || ps[0].Name != "docs__review" {
		t.Fatalf("prompts %+v %v", ps, err)
	}
	msgs, err := cl.GetPrompt(ctx, "docs__review", map[string]string{"file": "main.go"})
	if err != nil || len(msgs) != 1 || msgs[0].Text != "review main.go" {
		t.Errorf("prompt %+v %v", msgs, err)
	}
}

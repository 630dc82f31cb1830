package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// askServer is a streamable-HTTP MCP server whose tool "order" asks the
// person (elicitation, through MCP's multi round-trip) for a colour and a
// count, with a message meant to mislead a terminal, and answers what it
// got: the action and the content.
func askServer(t *testing.T) string {
	s := sdk.NewServer(&sdk.Implementation{Name: "shop"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "order"}, func(_ context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
		if len(req.Params.InputResponses) == 0 {
			return &sdk.CallToolResult{InputRequests: sdk.InputRequestMap{"q": &sdk.ElicitParams{
				Message: "Which colour?\x1b]0;pwned\x07",
				RequestedSchema: &jsonschema.Schema{Type: "object", Required: []string{"colour"}, Properties: map[string]*jsonschema.Schema{
					"colour": {Type: "string", Enum: []any{"red", "blue"}},
					"count":  {Type: "integer", Default: json.RawMessage("2")},
				}},
			}}}, nil, nil
		}
		r := req.Params.InputResponses["q"].(*sdk.ElicitResult)
		b, _ := json.Marshal(map[string]any{"action": r.Action, "content": r.Content})
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(b)}}}, nil, nil
	})
	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestElicitation: a server's question reaches the person at the
// terminal (its text escaped), the answer is checked against the
// requested schema (a value out of the enum is asked again) and the
// schema's defaults are applied; without a terminal the question is
// declined and said on stderr; "n" declines.
func TestElicitation(t *testing.T) {
	url := askServer(t)
	e := newTestEnv(t, "", "\n[mcp.shop]\nurl = \""+url+"\"\n")

	r := e.runTTY("y\ngreen\nblue\n\n", "call", "shop__order", "{}").wantCode(t, exitOK)
	if !strings.Contains(r.stderr, "agrun: MCP server shop asks: Which colour?") || strings.Contains(r.stderr, "\x1b") {
		t.Errorf("the question on the terminal: %q", r.stderr)
	}
	if !strings.Contains(r.stderr, "want one of red, blue") {
		t.Errorf("an answer out of the enum was not asked again: %q", r.stderr)
	}
	var got struct {
		Action  string         `json:"action"`
		Content map[string]any `json:"content"`
	}
	var text string
	if err := json.Unmarshal([]byte(r.stdout), &text); err != nil || json.Unmarshal([]byte(text), &got) != nil {
		t.Fatalf("result %q", r.stdout)
	}
	if got.Action != "accept" || got.Content["colour"] != "blue" || got.Content["count"] != float64(2) {
		t.Errorf("the server got %+v; want accept, colour blue and the default count 2", got)
	}

	r = e.runTTY("n\n", "call", "shop__order", "{}").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, `decline`) {
		t.Errorf("n: %q", r.stdout)
	}
	r = e.run("", "call", "shop__order", "{}").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, `decline`) || !strings.Contains(r.stderr, "no terminal to ask: declined") {
		t.Errorf("without a terminal: stdout %q, stderr %q", r.stdout, r.stderr)
	}
}

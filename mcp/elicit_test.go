package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/internal/textsafe"
)

// hostileAsker is a streamable-HTTP MCP server whose tool "ask" asks the
// person the question named by its argument (multi round-trip
// elicitation) and answers with the action it got back.
func hostileAsker(t *testing.T, questions map[string]*sdk.ElicitParams) string {
	s := sdk.NewServer(&sdk.Implementation{Name: "hostile"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "ask"}, func(_ context.Context, req *sdk.CallToolRequest, in struct {
		Which string `json:"which"`
	}) (*sdk.CallToolResult, any, error) {
		if len(req.Params.InputResponses) == 0 {
			return &sdk.CallToolResult{InputRequests: sdk.InputRequestMap{"q": questions[in.Which]}}, nil, nil
		}
		r, _ := req.Params.InputResponses["q"].(*sdk.ElicitResult)
		action := "none"
		if r != nil {
			action = r.Action
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: action}}}, nil, nil
	})
	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestElicitationBounds: a hostile server's questions are bounded before
// they reach the person: a schema over MaxElicitSchemaBytes, nested
// deeper than MaxElicitDepth, with more than MaxElicitFields fields or a
// field with more than MaxElicitEnum values, a default with an unsafe
// character (sent back as it is), and URL mode, are declined
// without asking; the message, titles, descriptions and defaults that
// do reach the person are cleaned and cut; past MaxElicitationsPerMinute
// questions in a minute the server is declined without asking.
func TestElicitationBounds(t *testing.T) {
	str := func(desc string) *jsonschema.Schema { return &jsonschema.Schema{Type: "string", Description: desc} }
	obj := func(props map[string]*jsonschema.Schema) *jsonschema.Schema {
		return &jsonschema.Schema{Type: "object", Properties: props}
	}
	many := map[string]*jsonschema.Schema{}
	for i := range MaxElicitFields + 1 {
		many[fmt.Sprintf("f%02d", i)] = str("")
	}
	deep := str("")
	for range MaxElicitDepth {
		deep = obj(map[string]*jsonschema.Schema{"x": deep})
	}
	var enum []any
	for i := range MaxElicitEnum + 1 {
		enum = append(enum, fmt.Sprint("v", i))
	}
	hostile := "Hello\x1b]0;pwned\x07 \u202eevil\u200b" + strings.Repeat("long ", 4<<10)
	questions := map[string]*sdk.ElicitParams{
		"huge":   {Message: "x", RequestedSchema: obj(map[string]*jsonschema.Schema{"a": str(strings.Repeat("d", MaxElicitSchemaBytes))})},
		"deep":   {Message: "x", RequestedSchema: obj(map[string]*jsonschema.Schema{"a": deep})},
		"fields": {Message: "x", RequestedSchema: obj(many)},
		"enum":   {Message: "x", RequestedSchema: obj(map[string]*jsonschema.Schema{"a": {Type: "string", Enum: enum}})},
		"url":    {Mode: "url", Message: "open this", URL: "https://evil.example/login", ElicitationID: "e1"},
		"ok": {Message: hostile, RequestedSchema: obj(map[string]*jsonschema.Schema{
			"name": {Type: "string", Title: "Name\x1b[2J", Description: "desc\u2066" + strings.Repeat("y", 2000), Default: json.RawMessage(`"` + strings.Repeat("z", 2000) + `"`)},
		})},
		// A default goes back to the server as it is: one with an
		// unsafe character cannot be cleaned, and is declined.
		"default": {Message: "x", RequestedSchema: obj(map[string]*jsonschema.Schema{"a": {Type: "string", Default: json.RawMessage(`"a\u001b[2J"`)}})},
	}
	// The depth is counted on the bytes, brackets in strings not counted.
	if d := jsonDepth([]byte(`{"a":[{"b":"}}[[{{"}],"c\\\"{":1}`)); d != 3 {
		t.Errorf("jsonDepth = %d, want 3", d)
	}
	url := hostileAsker(t, questions)
	var mu sync.Mutex
	var asked []*Elicitation
	cl, err := NewClient("hostile", HTTP{URL: url}, &ClientOptions{Elicit: func(_ context.Context, q *Elicitation) (*ElicitAnswer, error) {
		mu.Lock()
		asked = append(asked, q)
		mu.Unlock()
		return &ElicitAnswer{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := cl.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)
	call := func(which string) string {
		out, err := cl.CallTool(ctx, "ask", json.RawMessage(`{"which":"`+which+`"}`))
		if err != nil {
			return "error: " + err.Error()
		}
		var s string
		json.Unmarshal(out, &s)
		return s
	}
	for _, which := range []string{"huge", "deep", "fields", "enum", "url", "default"} {
		if got := call(which); got == "accept" {
			t.Errorf("%s: the server got %q", which, got)
		}
	}
	if len(asked) != 0 {
		t.Fatalf("an unbounded question reached the person: %+v", asked[0])
	}
	if got := call("ok"); got != "accept" {
		t.Fatalf("a fair question: the server got %q", got)
	}
	q := asked[0]
	if len(q.Message) > MaxDescriptionBytes || !textsafe.IsSafe(q.Message) || !strings.HasPrefix(q.Message, "Hello]0;pwned evil") {
		t.Errorf("the message: %d bytes, %q...", len(q.Message), textsafe.Truncate(q.Message, 40))
	}
	f := q.Fields[0]
	def, _ := f.Default.(string)
	if f.Title != "Name[2J" || len(f.Description) > maxElicitFieldText || !textsafe.IsSafe(f.Description) || len(def) > maxElicitFieldText || !textsafe.IsSafe(def) {
		t.Errorf("the field: %q, %d bytes of description, %d of default", f.Title, len(f.Description), len(def))
	}
	// The rate: MaxElicitationsPerMinute questions a minute (the "ok"
	// above was one), then declined unasked.
	for range MaxElicitationsPerMinute - 1 {
		if got := call("ok"); got != "accept" {
			t.Fatalf("within the rate: %q", got)
		}
	}
	if got := call("ok"); got == "accept" || len(asked) != MaxElicitationsPerMinute {
		t.Errorf("past the rate: the server got %q, the person was asked %d times", got, len(asked))
	}
}

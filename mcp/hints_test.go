package mcp

import (
	"context"
	"slices"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

// TestAnnotationsMapOntoGrant: the annotations a server gives its tools
// (over a real MCP session) become the hints of each tool's grant, with
// MCP's defaults for unset hints, and the permissions approvals ask
// about follow: destructive → write + delete, additive → write, open
// world → network, read-only → nothing beyond the configured ones; a
// tool without annotations counts as its configured permissions only.
func TestAnnotationsMapOntoGrant(t *testing.T) {
	f, tr := false, true
	s := sdk.NewServer(&sdk.Implementation{Name: "hinted", Version: "1"}, nil)
	obj := map[string]any{"type": "object"}
	handler := func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "ok"}}}, nil
	}
	for name, a := range map[string]*sdk.ToolAnnotations{
		"plain":       nil,
		"reader":      {ReadOnlyHint: true, OpenWorldHint: &f},
		"rm":          {}, // MCP defaults: destructive, open world
		"append":      {DestructiveHint: &f, IdempotentHint: true, OpenWorldHint: &f},
		"fetch":       {ReadOnlyHint: true, OpenWorldHint: &tr},
		"readonly_rm": {ReadOnlyHint: true, DestructiveHint: &tr, OpenWorldHint: &f},
	} {
		s.AddTool(&sdk.Tool{Name: name, InputSchema: obj, Annotations: a}, handler)
	}
	st, ct := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	c, err := NewClient("files", SDKTransport{New: func() sdk.Transport { return ct }}, &ClientOptions{Permissions: []permission.Permission{permission.Read}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	if err := c.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	tools, err := c.ListTools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct{ hints, uses []string }{
		"files__plain":       {nil, []string{"read"}},
		"files__reader":      {[]string{"read_only"}, []string{"read"}},
		"files__rm":          {[]string{"destructive", "open_world"}, []string{"delete", "network", "read", "write"}},
		"files__append":      {[]string{"additive", "idempotent"}, []string{"read", "write"}},
		"files__fetch":       {[]string{"read_only", "open_world"}, []string{"network", "read"}},
		"files__readonly_rm": {[]string{"read_only"}, []string{"read"}},
	}
	if len(tools) != len(want) {
		t.Fatalf("%d tools", len(tools))
	}
	for _, tl := range tools {
		g := registry.DescribeGrant(tl)
		w, ok := want[tl.Name()]
		if !ok {
			t.Fatalf("unexpected tool %q", tl.Name())
		}
		var uses []string
		for _, p := range g.Uses() {
			uses = append(uses, p.String())
		}
		if g.Source != "mcp" || g.Server != "files" || !slices.Equal(g.Hints, w.hints) || !slices.Equal(uses, w.uses) {
			t.Errorf("%s: grant %+v uses %v, want hints %v uses %v", tl.Name(), g, uses, w.hints, w.uses)
		}
		if !slices.Equal(tl.Permissions(), []permission.Permission{permission.Read}) {
			t.Errorf("%s: declared permissions changed by hints: %v", tl.Name(), tl.Permissions())
		}
	}
}

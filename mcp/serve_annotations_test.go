package mcp

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

// servedTools lists what NewServer(reg) tells an MCP client about its
// tools, by name.
func servedTools(t *testing.T, reg *registry.Registry) map[string]*sdk.Tool {
	t.Helper()
	st, ct := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := NewServer(reg, nil).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*sdk.Tool{}
	for _, tl := range res.Tools {
		out[tl.Name] = tl
	}
	return out
}

// TestServeAnnotations: mcp serve's annotations follow from what a
// tool's calls can exercise, and never claim less than that.
func TestServeAnnotations(t *testing.T) {
	reg := registry.New()
	for _, f := range []fakeTool{
		{name: "pure"},
		{name: "reader", perms: []permission.Permission{permission.Read, permission.Filesystem}},
		{name: "writer", perms: []permission.Permission{permission.Filesystem, permission.Write}},
		{name: "fetcher", perms: []permission.Permission{permission.Network}},
	} {
		if err := reg.Register(sandboxed{f}); err != nil {
			t.Fatal(err)
		}
	}
	if err := reg.Register(fakeTool{name: "opaque"}); err != nil {
		t.Fatal(err)
	}
	tools := servedTools(t, reg)
	if a := tools["opaque"].Annotations; a != nil {
		t.Errorf("a tool that does not describe its grant is served with annotations %+v", a)
	}
	for _, c := range []struct {
		name           string
		readOnly, open bool
		destructive    *bool
	}{
		{"pure", true, false, nil},
		{"reader", true, false, nil},
		{"writer", false, false, ptr(true)},
		{"fetcher", false, true, ptr(true)},
	} {
		a := tools[c.name].Annotations
		if a == nil {
			t.Fatalf("%s: no annotations", c.name)
		}
		if a.ReadOnlyHint != c.readOnly || a.OpenWorldHint == nil || *a.OpenWorldHint != c.open ||
			(c.destructive == nil) != (a.DestructiveHint == nil) || c.destructive != nil && *a.DestructiveHint != *c.destructive {
			b, _ := json.Marshal(a)
			t.Errorf("%s: annotations %s; want readOnly %v, openWorld %v, destructive %v", c.name, b, c.readOnly, c.open, c.destructive)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// sandboxed is a fake tool that describes its grant as a WASM tool does.
type sandboxed struct{ fakeTool }

func (s sandboxed) Grant() registry.Grant {
	return registry.Grant{Source: "wasm", Permissions: s.perms}
}

// TestServeKeepsUpstream: a tool re-served from an upstream MCP server
// keeps its title, output schema and idempotent hint; agrun's own grant
// only restricts: an upstream read-only tool whose server agrun's config
// says may write is not served as read-only.
func TestServeKeepsUpstream(t *testing.T) {
	up := sdk.NewServer(&sdk.Implementation{Name: "up"}, nil)
	up.AddTool(&sdk.Tool{
		Name: "lookup", Title: "Look \u202eup", Description: "d",
		InputSchema:  json.RawMessage(`{"type":"object"}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`),
		Annotations:  &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{StructuredContent: map[string]any{"n": 1}}, nil
	})
	for _, c := range []struct {
		perms    []permission.Permission
		readOnly bool
	}{{[]permission.Permission{permission.Read}, true}, {[]permission.Permission{permission.Write}, false}} {
		st, ct := sdk.NewInMemoryTransports()
		ctx := context.Background()
		ss, err := up.Connect(ctx, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := NewClient("up", SDKTransport{New: func() sdk.Transport { return ct }}, &ClientOptions{Permissions: c.perms})
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Connect(ctx); err != nil {
			t.Fatal(err)
		}
		reg := registry.New()
		if err := cl.Sync(reg); err != nil {
			t.Fatal(err)
		}
		served := servedTools(t, reg)["up__lookup"]
		cl.Close(ctx)
		ss.Close()
		if served == nil {
			t.Fatal("up__lookup not served")
		}
		if served.Title != "Look up" {
			t.Errorf("title %q, want the upstream's, cleaned", served.Title)
		}
		if b, _ := json.Marshal(served.OutputSchema); string(b) != `{"properties":{"n":{"type":"integer"}},"type":"object"}` {
			t.Errorf("output schema %s", b)
		}
		if a := served.Annotations; a == nil || a.ReadOnlyHint != c.readOnly {
			t.Errorf("permissions %v: annotations %+v, want readOnly %v", c.perms, a, c.readOnly)
		} else if !c.readOnly && !a.IdempotentHint {
			t.Errorf("permissions %v: the upstream's idempotent hint lost", c.perms)
		} else if a.OpenWorldHint == nil || !*a.OpenWorldHint {
			t.Errorf("permissions %v: an upstream tool served as closed-world", c.perms)
		}
	}
}

// TestClientRoots: ClientOptions.Roots make the client declare the roots
// capability (a server lists them with roots/list, under protocol versions
// before 2026-07-28, which deprecates roots: SEP-2577), as file:// URIs;
// without them it declares none; a relative root is refused.
func TestClientRoots(t *testing.T) {
	dir := t.TempDir()
	for _, roots := range [][]string{{dir}, nil} {
		up := sdk.NewServer(&sdk.Implementation{Name: "up"}, nil)
		st, ct := sdk.NewInMemoryTransports()
		ctx := context.Background()
		ss, err := up.Connect(ctx, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := NewClient("up", SDKTransport{New: func() sdk.Transport { return ct }}, &ClientOptions{Roots: roots})
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Connect(ctx); err != nil {
			t.Fatal(err)
		}
		//lint:ignore SA1019 the deprecated roots capability is what this test checks
		if caps := ss.InitializeParams().Capabilities; (caps.RootsV2 != nil || caps.Roots.ListChanged) != (roots != nil) {
			t.Errorf("roots %v: client capabilities %+v", roots, caps)
		}
		cl.Close(ctx)
		ss.Close()
	}
	got, err := fileRoots([]string{dir})
	if err != nil || len(got) != 1 || got[0].URI != "file://"+dir || got[0].Name != filepath.Base(dir) {
		t.Errorf("fileRoots: %+v, %v", got, err)
	}
	if _, err := NewClient("x", HTTP{URL: "http://h/mcp"}, &ClientOptions{Roots: []string{"rel"}}); err == nil {
		t.Error("a relative root was taken")
	}
}

// TestProgressAndCancellation: a server's progress notifications for a
// call reach ClientOptions.Progress with the tool's registry name and a
// cleaned message; a call whose context ends is cancelled on the server
// (notifications/cancelled: the tool's context ends).
func TestProgressAndCancellation(t *testing.T) {
	up := sdk.NewServer(&sdk.Implementation{Name: "up"}, nil)
	// The SDK hands notifications to the client's handler on its own
	// goroutine, so a result may overtake them, and progress for a call
	// no longer in progress is dropped by design: the tool therefore
	// stays in progress until the client has seen all three (or 5 s).
	seen := make(chan struct{})
	up.AddTool(&sdk.Tool{Name: "slow", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		for i := 1; i <= 3; i++ {
			req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: float64(i), Total: 3, Message: "step\x1b[2J"})
		}
		select {
		case <-seen:
		case <-time.After(5 * time.Second):
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "done"}}}, nil
	})
	cancelled := make(chan struct{})
	up.AddTool(&sdk.Tool{Name: "hang", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		<-ctx.Done()
		close(cancelled)
		return nil, ctx.Err()
	})
	st, ct := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := up.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	var mu sync.Mutex
	var got []Progress
	cl, err := NewClient("up", SDKTransport{New: func() sdk.Transport { return ct }}, &ClientOptions{Progress: func(p Progress) {
		mu.Lock()
		got = append(got, p)
		if len(got) == 3 {
			close(seen)
		}
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)
	if err := cl.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CallTool(ctx, "slow", nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	if len(got) != 3 || got[2].Tool != "up__slow" || got[2].Progress != 3 || got[2].Total != 3 || strings.Contains(got[2].Message, "\x1b") {
		t.Errorf("progress %+v", got)
	}
	mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	cl.CallTool(cctx, "hang", nil)
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the abandoned call was not cancelled on the server")
	}
}

package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/registry"
)

// TestServeCapabilitiesExactly: without upstreams the server declares
// tools, the SDK's logging, and resources and prompts (answered with
// empty listings; their lists never change); no completions; a resource
// is not read.
func TestServeCapabilitiesExactly(t *testing.T) {
	cs := connectClient(t, NewServer(registry.New(), nil), "2025-11-25", nil, false)
	caps := cs.InitializeResult().Capabilities
	if caps.Tools == nil || !caps.Tools.ListChanged || caps.Resources == nil || caps.Resources.ListChanged || caps.Prompts == nil || caps.Prompts.ListChanged || caps.Completions != nil {
		t.Errorf("capabilities %+v", caps)
	}
	ctx := context.Background()
	if r, err := cs.ListResources(ctx, nil); err != nil || len(r.Resources) != 0 {
		t.Errorf("resources %+v %v", r, err)
	}
	if p, err := cs.ListPrompts(ctx, nil); err != nil || len(p.Prompts) != 0 {
		t.Errorf("prompts %+v %v", p, err)
	}
	if _, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "file:///etc/passwd"}); err == nil {
		t.Error("a resource was read")
	}
}

// TestServeResourcesFromUpstream: with Upstreams the server declares
// resources and prompts and re-serves an upstream's, as agrun's client
// sees them: listed with their URIs, read as cleaned text, a blob as its
// bytes, prompts under their own names with their arguments, got
// through the upstream with the caller's arguments, cleaned.
func TestServeResourcesFromUpstream(t *testing.T) {
	up := sdk.NewServer(&sdk.Implementation{Name: "docs"}, nil)
	up.AddResource(&sdk.Resource{URI: "docs://readme", Name: "readme\x1b[2J", MIMEType: "text/plain"}, func(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, Text: "read me\x1b]0;pwned\a"}}}, nil
	})
	up.AddResource(&sdk.Resource{URI: "docs://logo", Name: "logo", MIMEType: "image/png"}, func(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, MIMEType: "image/png", Blob: []byte{1, 2, 3}}}}, nil
	})
	up.AddPrompt(&sdk.Prompt{Name: "greet", Description: "say hi", Arguments: []*sdk.PromptArgument{{Name: "who", Required: true}}}, func(_ context.Context, req *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
		return &sdk.GetPromptResult{Messages: []*sdk.PromptMessage{{Role: "user", Content: &sdk.TextContent{Text: "hello " + req.Params.Arguments["who"] + "\x1b[31m"}}}}, nil
	})
	st, ct := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := up.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cl, err := NewClient("docs", SDKTransport{New: func() sdk.Transport { return ct }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)

	cs := connectClient(t, NewServer(registry.New(), &ServerOptions{Upstreams: []*Client{cl}}), "", nil, false)
	if caps := cs.InitializeResult().Capabilities; !caps.Resources.ListChanged || !caps.Prompts.ListChanged {
		t.Fatalf("capabilities %+v", caps)
	}
	rs, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, r := range rs.Resources {
		uris = append(uris, r.URI)
		if strings.Contains(r.Name, "\x1b") {
			t.Errorf("name not cleaned: %q", r.Name)
		}
	}
	if strings.Join(uris, ",") != "docs://logo,docs://readme" {
		t.Fatalf("resources %v", uris)
	}
	rr, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "docs://readme"})
	if err != nil {
		t.Fatal(err)
	}
	if got := rr.Contents[0].Text; !strings.HasPrefix(got, "read me") || strings.ContainsAny(got, "\x1b\a") {
		t.Errorf("read %q", got)
	}
	rr, err = cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "docs://logo"})
	if err != nil || len(rr.Contents) != 1 || string(rr.Contents[0].Blob) != "\x01\x02\x03" || rr.Contents[0].MIMEType != "image/png" {
		t.Errorf("blob: %+v %v", rr, err)
	}
	if _, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "file:///etc/passwd"}); err == nil {
		t.Error("a resource no upstream lists was read")
	}
	ps, err := cs.ListPrompts(ctx, nil)
	if err != nil || len(ps.Prompts) != 1 || ps.Prompts[0].Name != "greet" || len(ps.Prompts[0].Arguments) != 1 || !ps.Prompts[0].Arguments[0].Required {
		t.Fatalf("prompts %+v %v", ps, err)
	}
	gp, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "greet", Arguments: map[string]string{"who": "ann"}})
	if err != nil {
		t.Fatal(err)
	}
	if txt := gp.Messages[0].Content.(*sdk.TextContent).Text; !strings.HasPrefix(txt, "hello ann") || strings.Contains(txt, "\x1b") {
		t.Errorf("prompt %q", txt)
	}
}

// TestRepublisherKeepsWhatAFailedUpstreamServed: an upstream whose
// listings fail keeps the resources and prompts it served before (its
// reads and gets then fail, said as such), rather than having them
// vanish from the clients' lists until it answers again.
func TestRepublisherKeepsWhatAFailedUpstreamServed(t *testing.T) {
	up := sdk.NewServer(&sdk.Implementation{Name: "docs"}, nil)
	up.AddResource(&sdk.Resource{URI: "docs://readme", Name: "readme"}, func(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, Text: "x"}}}, nil
	})
	up.AddPrompt(&sdk.Prompt{Name: "greet"}, func(context.Context, *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
		return &sdk.GetPromptResult{}, nil
	})
	st, ct := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := up.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := NewClient("docs", SDKTransport{New: func() sdk.Transport { return ct }}, &ClientOptions{MaxRestarts: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)
	p := &republisher{ups: []*Client{cl}, srv: sdk.NewServer(&sdk.Implementation{Name: "agrun"}, nil), log: discardLog{}}
	p.sync(ctx)
	if !p.served("greet") || len(p.resources) != 1 {
		t.Fatalf("first sync: prompt served %v, resources %v", p.served("greet"), p.resources)
	}
	ss.Close() // the upstream goes away: its listings fail
	p.last = time.Time{}
	p.sync(ctx)
	if !p.served("greet") || len(p.resources) != 1 {
		t.Errorf("after a failed listing: prompt served %v, resources %v", p.served("greet"), p.resources)
	}
}

type discardLog struct{}

func (discardLog) Warn(string, ...any) {}

// TestClientResourcesListChanged: with ResourceTool, a server's
// notifications/resources/list_changed rebuilds the NAME__read_resource
// tool of a Synced registry, so the model sees a resource added after the
// connection (and can read it).
func TestClientResourcesListChanged(t *testing.T) {
	up := sdk.NewServer(&sdk.Implementation{Name: "docs"}, nil)
	text := func(s string) sdk.ResourceHandler {
		return func(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, Text: s}}}, nil
		}
	}
	up.AddResource(&sdk.Resource{URI: "docs://first", Name: "first"}, text("one"))
	st, ct := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := up.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cl, err := NewClient("docs", SDKTransport{New: func() sdk.Transport { return ct }}, &ClientOptions{ResourceTool: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)
	reg := registry.New()
	if err := cl.Sync(reg); err != nil {
		t.Fatal(err)
	}
	desc := func() string {
		tl, ok := reg.Get("docs__read_resource")
		if !ok {
			return ""
		}
		return tl.Description()
	}
	if d := desc(); !strings.Contains(d, "docs://first") || strings.Contains(d, "docs://second") {
		t.Fatalf("before the change: %q", d)
	}
	up.AddResource(&sdk.Resource{URI: "docs://second", Name: "second"}, text("two"))
	eventually(t, "docs://second in the read_resource tool", func() bool { return strings.Contains(desc(), "docs://second") })
	inv := reg.Invoke(ctx, "docs__read_resource", json.RawMessage(`{"uri":"docs://second"}`))
	if inv.Err != nil || !strings.Contains(string(inv.Output), "two") {
		t.Fatalf("reading the new resource: %s, %v", inv.Output, inv.Err)
	}
}

// TestReadResourceBounded: a resource's text larger than
// MaxResourceTextBytes reaches agrun cut to it, cleaned of terminal
// escapes (Bad input: resources are bounded and cleaned).
func TestReadResourceBounded(t *testing.T) {
	up := sdk.NewServer(&sdk.Implementation{Name: "big"}, nil)
	huge := "\x1b[2J" + strings.Repeat("x", 2*MaxResourceTextBytes)
	up.AddResource(&sdk.Resource{URI: "big://huge", Name: "huge"}, func(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, Text: huge}}}, nil
	})
	st, ct := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := up.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cl, err := NewClient("big", SDKTransport{New: func() sdk.Transport { return ct }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)
	text, err := cl.ReadResource(ctx, "big://huge")
	if err != nil {
		t.Fatal(err)
	}
	if len(text) > MaxResourceTextBytes || len(text) < MaxResourceTextBytes/2 {
		t.Errorf("read %d bytes, want at most %d (and most of it)", len(text), MaxResourceTextBytes)
	}
	if strings.Contains(text, "\x1b") {
		t.Error("the escape sequence reached agrun")
	}

	// A listing longer than MaxResources is an error, not a truncation
	// nobody sees.
	for i := range MaxResources {
		up.AddResource(&sdk.Resource{URI: fmt.Sprintf("big://r%d", i), Name: "r"}, nil)
	}
	if rs, err := cl.Resources(ctx); err == nil {
		t.Errorf("%d resources listed, want an error past %d", len(rs), MaxResources)
	}
}

// TestGetPromptBounded: a prompt's messages reach agrun cleaned and, all
// of them together, cut to MaxResourceTextBytes; a listing of more than
// MaxPrompts prompts is an error (Bad input: prompts are bounded and
// cleaned).
func TestGetPromptBounded(t *testing.T) {
	up := sdk.NewServer(&sdk.Implementation{Name: "big"}, nil)
	part := "\x1b]0;pwned\a" + strings.Repeat("y", MaxResourceTextBytes*3/4)
	up.AddPrompt(&sdk.Prompt{Name: "huge"}, func(context.Context, *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
		return &sdk.GetPromptResult{Messages: []*sdk.PromptMessage{
			{Role: "user", Content: &sdk.TextContent{Text: part}},
			{Role: "assistant", Content: &sdk.TextContent{Text: part}},
			{Role: "user", Content: &sdk.TextContent{Text: part}},
		}}, nil
	})
	st, ct := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := up.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cl, err := NewClient("big", SDKTransport{New: func() sdk.Transport { return ct }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)
	msgs, err := cl.GetPrompt(ctx, "huge", nil)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, m := range msgs {
		total += len(m.Text)
		if strings.Contains(m.Text, "\x1b") || strings.Contains(m.Text, "\a") {
			t.Errorf("a control character reached agrun in a %s message", m.Role)
		}
	}
	if total > MaxResourceTextBytes || total < MaxResourceTextBytes/2 {
		t.Errorf("the messages hold %d bytes, want at most %d (and most of it)", total, MaxResourceTextBytes)
	}

	for i := range MaxPrompts {
		up.AddPrompt(&sdk.Prompt{Name: fmt.Sprintf("p%d", i)}, func(context.Context, *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			return &sdk.GetPromptResult{}, nil
		})
	}
	if ps, err := cl.Prompts(ctx); err == nil {
		t.Errorf("%d prompts listed, want an error past %d", len(ps), MaxPrompts)
	}
}

package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/registry"
)

// progressClient connects a Client to srv in memory, recording the
// progress it is sent; seen is closed once it has n notifications.
func progressClient(t *testing.T, srv *sdk.Server, n int) (cl *Client, got func() []Progress, seen chan struct{}) {
	t.Helper()
	st, ct := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	var mu sync.Mutex
	var ps []Progress
	seen = make(chan struct{})
	cl, err = NewClient("down", SDKTransport{New: func() sdk.Transport { return ct }}, &ClientOptions{Progress: func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		ps = append(ps, p)
		if len(ps) == n {
			close(seen)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(ctx) })
	return cl, func() []Progress {
		mu.Lock()
		defer mu.Unlock()
		return append([]Progress(nil), ps...)
	}, seen
}

// TestServeProgressHeartbeat: a call the client asked progress for is
// reported still running every ProgressInterval, the elapsed seconds
// increasing, until it returns — and nothing after; a call shorter than
// the interval is sent no progress.
func TestServeProgressHeartbeat(t *testing.T) {
	release := make(chan struct{})
	reg := registry.New()
	reg.Register(fakeTool{name: "slow", run: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		return json.RawMessage(`"done"`), nil
	}})
	reg.Register(fakeTool{name: "quick"})
	srv := NewServer(reg, &ServerOptions{ProgressInterval: 20 * time.Millisecond})
	cl, got, seen := progressClient(t, srv, 3)
	ctx := context.Background()
	go func() {
		select {
		case <-seen:
		case <-time.After(10 * time.Second):
		}
		close(release)
	}()
	if out, err := cl.CallTool(ctx, "slow", nil); err != nil || string(out) != `"done"` {
		t.Fatalf("slow: %s %v", out, err)
	}
	ps := got()
	if len(ps) < 3 {
		t.Fatalf("progress %+v, want at least 3 heartbeats", ps)
	}
	for i, p := range ps {
		if p.Tool != "down__slow" || !strings.HasPrefix(p.Message, "still running (") || p.Total != 0 || (i > 0 && p.Progress <= ps[i-1].Progress) {
			t.Fatalf("heartbeat %d: %+v (all %+v)", i, p, ps)
		}
	}
	before := len(got())
	if _, err := cl.CallTool(ctx, "quick", nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // five intervals: a heartbeat that outlived its call would show
	if n := len(got()); n != before {
		t.Errorf("%d notifications after the calls returned", n-before)
	}
}

// TestServeProgressRelayed: `agrun mcp serve` in front of an upstream
// MCP server relays the upstream's own progress for a call to the
// downstream client (values increasing, the message cleaned) instead of
// heartbeats, though the serving process's own Client asked for none.
func TestServeProgressRelayed(t *testing.T) {
	seen := make(chan struct{})
	up := sdk.NewServer(&sdk.Implementation{Name: "up"}, nil)
	up.AddTool(&sdk.Tool{Name: "slow", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		tok := req.Params.GetProgressToken()
		if tok == nil {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "no progress token"}}}, nil
		}
		for i := 1; i <= 3; i++ {
			req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: 3, Message: "step\x1b[2J"})
			time.Sleep(150 * time.Millisecond) // past the relay's gap
		}
		select { // notifications travel on their own goroutine: wait for them
		case <-seen:
		case <-time.After(5 * time.Second):
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "done"}}}, nil
	})
	st, ct := sdk.NewInMemoryTransports()
	ctx := context.Background()
	uss, err := up.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer uss.Close()
	mid, err := NewClient("up", SDKTransport{New: func() sdk.Transport { return ct }}, nil) // no Progress: mcp serve has no person
	if err != nil {
		t.Fatal(err)
	}
	defer mid.Close(ctx)
	if err := mid.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	reg := registry.New()
	if err := mid.Sync(reg); err != nil {
		t.Fatal(err)
	}
	srv := NewServer(reg, &ServerOptions{ProgressInterval: time.Hour})
	cl, got, seenDown := progressClient(t, srv, 3)
	go func() {
		select {
		case <-seenDown:
			close(seen)
		case <-time.After(5 * time.Second):
		}
	}()
	if out, err := cl.CallTool(ctx, "up__slow", nil); err != nil || !strings.Contains(string(out), "done") {
		t.Fatalf("call: %s %v", out, err)
	}
	ps := got()
	if len(ps) != 3 {
		t.Fatalf("relayed %+v, want the upstream's 3", ps)
	}
	for i, p := range ps {
		if p.Progress != float64(i+1) || p.Total != 3 || strings.Contains(p.Message, "\x1b") || p.Tool != "down__up__slow" {
			t.Errorf("relayed %d: %+v", i, p)
		}
	}
}

// TestProgressMonotonic: callProgress never sends a value that does not
// increase, drops heartbeats once an upstream reported, and relays at
// most one notification per minRelayGap.
func TestProgressMonotonic(t *testing.T) {
	reg := registry.New()
	hold := make(chan struct{})
	reg.Register(fakeTool{name: "t", run: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		sink := progressSink(ctx)
		if sink == nil {
			return nil, context.Canceled
		}
		sink(Progress{Progress: 5, Message: "a"})
		sink(Progress{Progress: 6, Message: "too soon"}) // within the gap
		time.Sleep(minRelayGap + 20*time.Millisecond)
		sink(Progress{Progress: 4, Message: "lower"})
		sink(Progress{Progress: 7, Message: "b"})
		<-hold
		return json.RawMessage(`"ok"`), nil
	}})
	srv := NewServer(reg, &ServerOptions{ProgressInterval: 10 * time.Millisecond})
	cl, got, seen := progressClient(t, srv, 2)
	go func() {
		select {
		case <-seen:
		case <-time.After(5 * time.Second):
		}
		time.Sleep(50 * time.Millisecond) // heartbeats would come now
		close(hold)
	}()
	if _, err := cl.CallTool(context.Background(), "t", nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	// A heartbeat may come before the first relay (the tool starts after
	// the ticker), never after it.
	var vals []string
	relayed := false
	for _, p := range got() {
		if strings.HasPrefix(p.Message, "still running") && !relayed {
			continue
		}
		relayed = true
		vals = append(vals, fmt.Sprint(p.Progress, p.Message))
	}
	if strings.Join(vals, ",") != "5a,7b" {
		t.Fatalf("sent %v, want 5a,7b", vals)
	}
}

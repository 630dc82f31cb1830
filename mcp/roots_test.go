//lint:file-ignore SA1019 the test server watches roots as servers on protocol versions before 2026-07-28 do (SEP-2577 deprecates roots)

package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestClientRootsChange: SetRoots replaces the roots and tells the
// server (notifications/roots/list_changed, counted by a go-sdk server:
// none when nothing changed); server-everything, a real peer, asks for
// them again (roots/list) and its get-roots-list tool shows the new ones; a relative path, too
// many roots, or a client made without roots are refused.
func TestClientRootsChange(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()

	// The notifications, counted by a go-sdk server.
	var changed atomic.Int32
	up := sdk.NewServer(&sdk.Implementation{Name: "up"}, &sdk.ServerOptions{
		RootsListChangedHandler: func(context.Context, *sdk.RootsListChangedRequest) { changed.Add(1) },
	})
	st, ct := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := up.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cl, err := NewClient("up", SDKTransport{New: func() sdk.Transport { return ct }}, &ClientOptions{Roots: []string{a}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)
	if err := cl.SetRoots([]string{a}); err != nil {
		t.Fatal(err)
	}
	if err := cl.SetRoots([]string{b}); err != nil {
		t.Fatal(err)
	}
	// The notifications are sent before SetRoots returns; a ping's
	// answer means the server handled what came before it.
	if err := cl.request(ctx, "", "ping", func(ctx context.Context, s *session) error { return s.cs.Ping(ctx, nil) }); err != nil {
		t.Fatal(err)
	}
	if n := changed.Load(); n == 0 || n > 2 {
		t.Errorf("%d roots/list_changed for one change and one non-change", n)
	}
	before := changed.Load()
	if err := cl.SetRoots([]string{"relative"}); err == nil {
		t.Error("a relative root was taken")
	}
	if err := cl.SetRoots(make([]string, MaxRoots+1)); err == nil {
		t.Error("too many roots were taken")
	}
	if got := cl.rootURIs; len(got) != 1 || got[0] != "file://"+b || changed.Load() != before {
		t.Errorf("a refused SetRoots changed the roots: %v", got)
	}
	none, err := NewClient("none", HTTP{URL: "http://127.0.0.1:1/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := none.SetRoots([]string{a}); !errors.Is(err, ErrNoRootsCapability) {
		t.Errorf("a client without roots: %v", err)
	}

	// server-everything sees the change.
	log, buf := newLogger()
	ev, err := NewClient("everything", Stdio{Command: nodeBinary(t, 0), Args: []string{npmScript(t, "@modelcontextprotocol/server-everything", "dist/index.js"), "stdio"}},
		&ClientOptions{Logger: log, Timeout: 60 * time.Second, Roots: []string{a}})
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close(ctx)
	if err := ev.Connect(ctx); err != nil {
		t.Fatalf("Connect: %v\n%s", err, buf.String())
	}
	roots := func() string {
		out, err := ev.CallTool(ctx, "get-roots-list", json.RawMessage(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	if got := roots(); !strings.Contains(got, "URI: file://"+a) {
		t.Fatalf("server-everything's roots: %s", got)
	}
	if err := ev.SetRoots([]string{a, b}); err != nil {
		t.Fatal(err)
	}
	// The server asks for the roots again when the notification comes,
	// on its own time: wait for it (not a timing assertion).
	deadline := time.Now().Add(30 * time.Second)
	for got := roots(); !strings.Contains(got, "URI: file://"+b); got = roots() {
		if time.Now().After(deadline) {
			t.Fatalf("server-everything never saw the new root:\n%s", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

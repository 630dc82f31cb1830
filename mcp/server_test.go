package mcp

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/internal/testing/require"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

// TestMain lets the test binary act as an agrun MCP server over stdio
// (AGRUN_MCP_TEST_SERVE=stdio), so the stdio server is tested as a real
// subprocess, and as the client the conformance suite drives
// (AGRUN_MCP_CONFORMANCE_CLIENT=1: conformance_client_test.go).
func TestMain(m *testing.M) {
	if os.Getenv("AGRUN_MCP_CONFORMANCE_CLIENT") == "1" {
		os.Exit(conformanceClient(os.Args[len(os.Args)-1]))
	}
	if os.Getenv("AGRUN_MCP_TEST_SERVE") == "stdio" {
		if err := ServeStdio(context.Background(), serverRegistry(), os.Stdin, os.Stdout, nil); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serverRegistry is the registry the server tests expose: the default
// permission policy (delete denied) and tools covering each kind of output
// and failure.
func serverRegistry() *registry.Registry {
	reg := registry.New(registry.WithPermissionChecker(permission.NewChecker(permission.DefaultConfig())))
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	must(reg.Register(fakeTool{name: "count",
		schema: `{"type":"object","properties":{"text":{"type":"string","description":"words to count"}},"required":["text"]}`,
		run: func(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
			var in struct{ Text string }
			json.Unmarshal(args, &in)
			return json.Marshal(map[string]int{"words": len(strings.Fields(in.Text))})
		}}))
	must(reg.Register(fakeTool{name: "shout",
		schema: `{"type":"object","properties":{"text":{"type":"string"}}}`,
		run: func(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
			var in struct{ Text string }
			json.Unmarshal(args, &in)
			return json.Marshal(strings.ToUpper(in.Text))
		}}))
	must(reg.Register(fakeTool{name: "list", run: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`[1,2,3]`), nil
	}}))
	must(reg.Register(fakeTool{name: "boom", run: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return nil, registry.Errorf(registry.ExecutionFailed, "boom", "kaboom")
	}}))
	must(reg.Register(fakeTool{name: "rm", perms: []permission.Permission{permission.Delete}}))
	must(reg.Register(fakeTool{name: "big", run: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.Marshal(strings.Repeat("z", 2<<20))
	}}))
	return reg
}

// checkServedRegistry runs the same checks over any transport.
func checkServedRegistry(t *testing.T, c *Client) {
	t.Helper()
	// rm is denied by the policy: not listed (registry.Definitions).
	want := []string{"agrun__big", "agrun__boom", "agrun__count", "agrun__list", "agrun__shout"}
	if got := names(c.Tools()); !slices.Equal(got, want) {
		t.Fatalf("tools = %v, want %v", got, want)
	}
	for _, tl := range c.Tools() {
		if tl.Name() == "agrun__count" && !strings.Contains(string(tl.Parameters()), `"required":["text"]`) {
			t.Errorf("count's schema did not come through: %s", tl.Parameters())
		}
	}
	ctx := context.Background()
	for _, tc := range []struct {
		tool, args string
		want       string        // output, when the call succeeds
		kind       registry.Kind // else the kind of error
		msg        string        // and a part of its message
	}{
		{tool: "count", args: `{"text":"one two three"}`, want: `{"words":3}`},
		{tool: "shout", args: `{"text":"hi"}`, want: `"HI"`},
		{tool: "list", want: `"[1,2,3]"`},
		{tool: "boom", kind: registry.ExecutionFailed, msg: "error (execution_failed): kaboom"},
		{tool: "rm", kind: registry.MCPError, msg: `unknown tool "rm"`}, // denied: not served at all
		{tool: "count", args: `{"text":5}`, kind: registry.ExecutionFailed, msg: "error (invalid_arguments)"},
		{tool: "count", args: `{}`, kind: registry.ExecutionFailed, msg: "error (invalid_arguments)"},
	} {
		out, err := c.CallTool(ctx, tc.tool, json.RawMessage(tc.args))
		if tc.kind == "" {
			if err != nil || string(out) != tc.want {
				t.Errorf("%s(%s) = %s, %v; want %s", tc.tool, tc.args, out, err, tc.want)
			}
			continue
		}
		e := require.Kind(t, err, tc.kind)
		if !strings.Contains(e.Message(), tc.msg) {
			t.Errorf("%s(%s): message %q lacks %q", tc.tool, tc.args, e.Message(), tc.msg)
		}
	}
}

func TestServeInMemory(t *testing.T) {
	reg := serverRegistry()
	st, ct := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ss, err := NewServer(reg, nil).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	c, err := NewClient("agrun", SDKTransport{New: func() sdk.Transport { return ct }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if err := c.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	checkServedRegistry(t, c)

	// A tool registered later reaches the client: the server notices at
	// the next request and announces the change; the client's Sync
	// follows.
	mirror := registry.New()
	if err := c.Sync(mirror); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(fakeTool{name: "late"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CallTool(ctx, "shout", json.RawMessage(`{"text":"x"}`)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "agrun__late in the mirror registry", func() bool { _, ok := mirror.Get("agrun__late"); return ok })
	reg.Unregister("late")
	if _, err := c.ListTools(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := mirror.Get("agrun__late"); ok {
		t.Error("agrun__late still mirrored after it was unregistered")
	}
}

func TestServeStdio(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient("agrun", Stdio{Command: exe, Env: []string{"AGRUN_MCP_TEST_SERVE=stdio"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	if err := c.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkServedRegistry(t, c)
}

func TestServeHTTP(t *testing.T) {
	var authorized atomic.Int64
	h := NewHTTPHandler(serverRegistry(), nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sesame" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		authorized.Add(1)
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()

	c, err := NewClient("agrun", HTTP{URL: srv.URL, Headers: map[string]string{"Authorization": "Bearer sesame"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if err := c.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkServedRegistry(t, c)
	if authorized.Load() == 0 {
		t.Error("no request carried the configured header")
	}

	// Without the header the server refuses: an mcp_error, not a hang.
	bad, err := NewClient("agrun", HTTP{URL: srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close(context.Background())
	e := require.Kind(t, bad.Connect(context.Background()), registry.MCPError)
	if !strings.Contains(e.Message(), "Unauthorized") {
		t.Errorf("error %q does not pass on the server's refusal", e.Message())
	}
}

func TestHTTPMessageCap(t *testing.T) {
	srv := httptest.NewServer(NewHTTPHandler(serverRegistry(), nil))
	defer srv.Close()
	c, err := NewClient("agrun", HTTP{URL: srv.URL}, &ClientOptions{MaxMessageBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if err := c.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err = c.CallTool(context.Background(), "big", nil)
	e := require.Kind(t, err, registry.MCPError)
	if !strings.Contains(e.Message(), "exceeded 1048576 bytes") {
		t.Errorf("error %q does not name the cap", e.Message())
	}
}

// The HTTP server goes away: calls fail with mcp_error, promptly (well
// before the 20 s timeout that would make it mcp_timeout).
func TestHTTPServerGoesAway(t *testing.T) {
	srv := httptest.NewServer(NewHTTPHandler(serverRegistry(), nil))
	c, err := NewClient("agrun", HTTP{URL: srv.URL}, &ClientOptions{Timeout: 20 * time.Second, MaxRestarts: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if err := c.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.CloseClientConnections()
	srv.Close()
	_, err = c.CallTool(context.Background(), "shout", json.RawMessage(`{"text":"anyone?"}`))
	require.Kind(t, err, registry.MCPError)
}

package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/registry"
)

// TestObserve: ClientOptions.Observe is told of each request a Client
// sends (method, tool, server, session) and what it writes into the
// request's _meta reaches the server, whose ServerOptions.Observe reads
// it; a tools/call answered with isError ends as ErrToolResult on both
// sides; the server names a tool it does not serve Unknown; ErrorType
// names outcomes as the conventions do.
func TestObserve(t *testing.T) {
	type seen struct {
		op  Operation
		err error
	}
	var mu sync.Mutex
	var client, server []seen
	observer := func(into *[]seen) Observe {
		return func(ctx context.Context, op *Operation) (context.Context, func(error)) {
			if op.Client {
				op.Meta["traceparent"] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
			}
			return ctx, func(err error) {
				mu.Lock()
				*into = append(*into, seen{*op, err})
				mu.Unlock()
			}
		}
	}
	reg := registry.New()
	reg.Register(fakeTool{name: "ok"})
	reg.Register(fakeTool{name: "fails", run: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return nil, errors.New("no")
	}})
	srv := NewServer(reg, &ServerOptions{Observe: observer(&server)})
	st, ct := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cl, err := NewClient("up", SDKTransport{New: func() sdk.Transport { return ct }}, &ClientOptions{Observe: observer(&client)})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)
	cl.CallTool(ctx, "ok", nil)
	cl.CallTool(ctx, "fails", nil)
	cl.CallTool(ctx, "made_up_by_the_client", nil)
	mu.Lock()
	defer mu.Unlock()
	calls := func(ss []seen) (out []seen) {
		for _, s := range ss {
			if s.op.Method == "tools/call" {
				out = append(out, s)
			}
		}
		return out
	}
	cc, sc := calls(client), calls(server)
	if len(cc) != 3 || len(sc) != 3 {
		t.Fatalf("client saw %+v, server %+v", client, server)
	}
	if cc[0].op.Target != "ok" || cc[0].op.Server != "up" || cc[0].err != nil || cc[1].op.Target != "fails" || !errors.Is(cc[1].err, ErrToolResult) {
		t.Errorf("client: %+v", cc)
	}
	if sc[0].op.Meta["traceparent"] != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" || sc[0].op.Client || sc[0].op.ProtocolVersion == "" || !errors.Is(sc[1].err, ErrToolResult) {
		t.Errorf("server: %+v", sc)
	}
	lists := 0
	for _, s := range server {
		if s.op.Method == "tools/list" {
			lists++
		}
	}
	if lists == 0 {
		t.Errorf("no tools/list observed on the server (a request without params is a request too): %+v", server)
	}
	if sc[0].op.Target != "ok" || sc[2].op.Target != Unknown || sc[2].err == nil {
		t.Errorf("the server names a tool it does not serve %q (%v), want %q: a client's word names no series", sc[2].op.Target, sc[2].err, Unknown)
	}
	for v, want := range map[string]string{"2025-11-25": "2025-11-25", "1999-01-01": sdk.SupportedProtocolVersions()[0], "": sdk.SupportedProtocolVersions()[0]} {
		if got := negotiated(v); got != want {
			t.Errorf("negotiated(%q) = %q, want %q", v, got, want)
		}
	}
	if knownVersion("2099-12-31") != "_OTHER" || knownVersion("2025-06-18") != "2025-06-18" {
		t.Error("a protocol version the SDK does not speak names a series")
	}
	// A code an upstream server makes up is not a series of its own.
	for err, want := range map[error]string{nil: "", ErrToolResult: "tool_error", &jsonrpc.Error{Code: -32602}: "-32602", &jsonrpc.Error{Code: -31337}: "_OTHER",
		fmt.Errorf("wrapped: %w", &jsonrpc.Error{Code: 123456789}): "_OTHER", context.DeadlineExceeded: "timeout", context.Canceled: "cancelled", errors.New("x"): "_OTHER"} {
		if got := ErrorType(err); got != want {
			t.Errorf("ErrorType(%v) = %q, want %q", err, got, want)
		}
	}
}

package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/mcp"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

// upper is a registry tool written in Go.
type upper struct{}

func (upper) Name() string        { return "upper" }
func (upper) Description() string { return "Upper-cases text." }
func (upper) Parameters() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)
}
func (upper) Permissions() []permission.Permission { return nil }
func (upper) Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	var in struct{ Text string }
	if err := json.Unmarshal(args, &in); err != nil {
		return nil, err
	}
	out := []rune(in.Text)
	for i, r := range out {
		if r >= 'a' && r <= 'z' {
			out[i] = r - 'a' + 'A'
		}
	}
	return json.Marshal(string(out))
}

// One registry served over MCP, and a Client that mirrors the served tools
// into another registry, where they are called like any tool. With a real
// server, use mcp.Stdio{Command: ..., Args: ...} or mcp.HTTP{URL: ...}.
func Example() {
	ctx := context.Background()
	served := registry.New()
	served.Register(upper{})

	serverSide, clientSide := sdk.NewInMemoryTransports()
	session, err := mcp.NewServer(served, nil).Connect(ctx, serverSide, nil)
	if err != nil {
		panic(err)
	}
	defer session.Close()

	c, err := mcp.NewClient("remote", mcp.SDKTransport{New: func() sdk.Transport { return clientSide }},
		&mcp.ClientOptions{Permissions: []permission.Permission{permission.Read}})
	if err != nil {
		panic(err)
	}
	defer c.Close(ctx)
	if err := c.Connect(ctx); err != nil {
		panic(err)
	}

	reg := registry.New(registry.WithPermissionChecker(permission.NewChecker(permission.DefaultConfig())))
	if err := c.Sync(reg); err != nil {
		panic(err)
	}
	fmt.Println(reg.List())
	inv := reg.Invoke(ctx, "remote__upper", json.RawMessage(`{"text":"hello"}`))
	fmt.Println(string(inv.Output), inv.Err)
	inv = reg.Invoke(ctx, "remote__upper", json.RawMessage(`{}`))
	fmt.Println(registry.KindOf(inv.Err))
	// Output:
	// [remote__upper]
	// "HELLO" <nil>
	// invalid_arguments
}

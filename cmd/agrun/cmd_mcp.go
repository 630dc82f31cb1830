package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/mcp"
)

// mcpServe is `agrun mcp serve [--http ADDR]`: every configured tool (WASM
// or MCP) offered to MCP clients, over stdio by default. Calls go through
// the registry: the permission policy and argument validation apply.
func (c *cli) mcpServe(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "serve" {
		return usagef("usage: agrun mcp serve [--http ADDR]")
	}
	fs := newFlags("mcp serve")
	addr := fs.String("http", "", "serve streamable HTTP on ADDR (at /mcp) instead of stdio")
	pos, err := parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("usage: agrun mcp serve [--http ADDR]")
	}
	e, err := c.openEnv(ctx, nil, true)
	if err != nil {
		return err
	}
	defer e.close()
	opts := &mcp.ServerOptions{Version: version, Logger: e.log}
	if *addr == "" {
		err := mcp.Serve(ctx, e.reg, &sdk.StdioTransport{}, opts)
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewHTTPHandler(e.reg, opts))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(c.stderr, "agrun: MCP server on http://%s/mcp\n", ln.Addr())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

package main

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/mcp"
)

// mcpServe is `agrun mcp serve [--http ADDR]`: every configured tool (WASM
// or MCP) offered to MCP clients, over stdio by default. Calls go through
// the registry: the permission policy and argument validation apply.
//
// --http follows `agrun serve`'s listener policy: a loopback address needs
// no token; any other address is refused (exit 2) unless [serve]
// tokens_env names a variable holding bearer tokens, and then every
// request must carry one.
func (c *cli) mcpServe(ctx context.Context, args []string) error {
	// The global flags may stand between mcp and its subcommand.
	fs := newFlags("mcp")
	args, err := c.parseLeading(fs, args)
	if err != nil {
		return err
	}
	if len(args) > 0 && args[0] == "login" {
		return c.mcpLogin(ctx, args[1:])
	}
	if len(args) == 0 || args[0] != "serve" {
		if len(args) == 0 {
			return usageOf(fs, "needs a subcommand")
		}
		return usageOf(fs, "unknown subcommand %q", args[0])
	}
	fs = newFlags("mcp serve")
	addr := fs.String("http", "", "serve streamable HTTP on ADDR (at /mcp) instead of stdio")
	maxSessions := fs.Int("max-sessions", mcp.DefaultMaxSessions, "with --http: sessions kept at once, in all")
	perClient := fs.Int("max-sessions-per-client", mcp.DefaultMaxSessionsPerClient, "with --http: sessions kept at once for one client address")
	pos, err := c.parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageOf(fs, "takes no arguments")
	}
	if *maxSessions < 1 || *perClient < 1 || *perClient > *maxSessions {
		return usageOf(fs, "--max-sessions and --max-sessions-per-client must be at least 1, and per client at most the total")
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	var ln net.Listener
	var tokens []string
	if *addr != "" {
		if ln, tokens, err = setup.ListenMCP(cfg, *addr); err != nil {
			return err
		}
		defer ln.Close() // closed by the server once it serves
	}
	// newEnv, not openEnv: stdin is the protocol's (or nobody's), so no
	// MCP server behind this one may ask the person a question on it.
	e, err := newEnv(ctx, cfg, c.logger(), nil)
	if err != nil {
		return err
	}
	defer e.close()
	e.warnBroken(c.stderr)
	tel, err := c.setupTelemetry(ctx, e, false)
	if err != nil {
		return err
	}
	defer c.shutdownTelemetry(tel) // after the server has stopped: its last spans are flushed
	opts := &mcp.ServerOptions{Version: version, Logger: e.log, Approve: setup.MCPApproval(cfg, workDir()), Upstreams: e.servedUpstreams(cfg), Observe: setup.MCPObserve(tel)}
	if ln == nil {
		if c.isTTY(c.stdin) {
			fmt.Fprintln(c.stderr, "agrun: MCP server on stdio: it waits for a client's JSON-RPC messages on stdin (an MCP client starts it; Ctrl-C stops it)")
		}
		err = mcp.ServeStdio(ctx, e.reg, c.stdin, c.stdout, opts)
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	opts.MaxSessions, opts.MaxSessionsPerClient = *maxSessions, *perClient
	return setup.ServeMCPHTTP(ctx, cfg, ln, tokens, mcp.NewHTTPHandler(e.reg, opts), func(addr net.Addr, auth string) {
		fmt.Fprintf(c.stderr, "agrun: MCP server on http://%s/mcp (auth: %s)\n", addr, auth)
	})
}

// servedUpstreams are the connected [mcp.NAME] servers whose resources
// and prompts `mcp serve` re-serves (serve_resources = true), by name.
func (e *env) servedUpstreams(cfg *config.Config) []*mcp.Client {
	var out []*mcp.Client
	for _, cl := range e.Clients() {
		if cfg.MCP[cl.Name()].ServeResources {
			out = append(out, cl)
		}
	}
	slices.SortFunc(out, func(a, b *mcp.Client) int { return strings.Compare(a.Name(), b.Name()) })
	return out
}

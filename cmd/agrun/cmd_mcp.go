package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/mcp"
	"github.com/agcore/agrun/server"
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
	if *addr == "" {
		// newEnv, not openEnv: stdin is the protocol's, so no MCP server
		// behind this one may ask the person a question on it.
		cfg, err := c.loadConfig()
		if err != nil {
			return err
		}
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
		defer c.shutdownTelemetry(tel)
		if c.isTTY(c.stdin) {
			fmt.Fprintln(c.stderr, "agrun: MCP server on stdio: it waits for a client's JSON-RPC messages on stdin (an MCP client starts it; Ctrl-C stops it)")
		}
		err = mcp.ServeStdio(ctx, e.reg, c.stdin, c.stdout, &mcp.ServerOptions{Version: version, Logger: e.log, Approve: setup.MCPApproval(cfg, workDir()), Upstreams: e.servedUpstreams(cfg), Observe: setup.MCPObserve(tel)})
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	if len(cfg.Serve.Tenants) > 0 {
		// Its calls would count against no tenant's quotas.
		return &configError{fmt.Errorf("%s: serve.tenants: agrun mcp serve --http does not serve tenants yet: use a config without [serve.tenants] for it", cfg.Path)}
	}
	tokens := server.TokensFromEnv(cfg.Serve.TokensEnv)
	if err := server.CheckTokens(tokens); err != nil {
		return &configError{fmt.Errorf("$%s: %w", cfg.Serve.TokensEnv, err)}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	if err := server.CheckListener(ln, tokens); err != nil {
		ln.Close()
		return &configError{fmt.Errorf("mcp serve --http %s: %w", *addr, err)}
	}
	e, err := newEnv(ctx, cfg, c.logger(), nil)
	if err != nil {
		ln.Close()
		return err
	}
	defer e.close()
	e.warnBroken(c.stderr)
	tel, err := c.setupTelemetry(ctx, e, false)
	if err != nil {
		ln.Close()
		return err
	}
	defer c.shutdownTelemetry(tel) // after the server has stopped: its last spans are flushed
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewHTTPHandler(e.reg, &mcp.ServerOptions{Version: version, Logger: e.log, MaxSessions: *maxSessions, MaxSessionsPerClient: *perClient, Approve: setup.MCPApproval(cfg, workDir()), Upstreams: e.servedUpstreams(cfg), Observe: setup.MCPObserve(tel)}))
	srv := &http.Server{
		Handler:           requireBearer(tokens, mux),
		ReadHeaderTimeout: server.ReadHeaderTimeout,
		IdleTimeout:       server.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
	}
	ln = server.LimitListener(ln, cfg.Serve.MaxConnections, cfg.Serve.MaxConnectionsPerClient)
	auth := fmt.Sprintf("%d bearer token(s) from $%s", len(tokens), cfg.Serve.TokensEnv)
	if len(tokens) == 0 {
		auth = "none (loopback only; set $" + cfg.Serve.TokensEnv + ")"
	}
	fmt.Fprintf(c.stderr, "agrun: MCP server on http://%s/mcp (auth: %s)\n", ln.Addr(), auth)
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

// requireBearer passes on only requests carrying "Authorization: Bearer
// <one of tokens>" (server.RequireBearer); the others get 401 with a
// JSON-RPC error, their body never read.
func requireBearer(tokens []string, next http.Handler) http.Handler {
	return server.RequireBearer(tokens, next, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="agrun"`)
		w.Header().Set("Connection", "close")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"unauthorized: missing or wrong bearer token (Authorization: Bearer <token>)"}}`+"\n")
	}))
}

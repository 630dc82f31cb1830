package setup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/server"
)

// ListenMCP opens the listener of `agrun mcp serve --http ADDR` and
// reads its bearer tokens ([serve] tokens_env), under `agrun serve`'s
// listener policy: a loopback address needs no token; any other is
// refused (a *ConfigError) unless tokens are set. [serve.tenants] is
// refused too: the calls would count against no tenant's quotas.
func ListenMCP(cfg *config.Config, addr string) (net.Listener, []string, error) {
	if len(cfg.Serve.Tenants) > 0 {
		return nil, nil, &ConfigError{fmt.Errorf("%s: serve.tenants: agrun mcp serve --http does not serve tenants yet: use a config without [serve.tenants] for it", cfg.Path)}
	}
	tokens := server.TokensFromEnv(cfg.Serve.TokensEnv)
	if err := server.CheckTokens(tokens); err != nil {
		return nil, nil, &ConfigError{fmt.Errorf("$%s: %w", cfg.Serve.TokensEnv, err)}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	if err := server.CheckListener(ln, tokens); err != nil {
		ln.Close()
		return nil, nil, &ConfigError{fmt.Errorf("mcp serve --http %s: %w", addr, err)}
	}
	return ln, tokens, nil
}

// mcpShutdownTimeout is how long ServeMCPHTTP lets requests in flight
// finish once its context ends.
const mcpShutdownTimeout = 10 * time.Second

// ServeMCPHTTP serves h (mcp.NewHTTPHandler) at /mcp on ln until ctx
// ends, then lets the requests in flight finish for up to 10s. With
// tokens, only requests carrying "Authorization: Bearer <one of them>"
// reach h; the others get 401 with a JSON-RPC error, their body never
// read. At most [serve] max_connections connections are open at once
// (max_connections_per_client per client address). started is told the
// address served and how requests are authenticated, once it listens.
func ServeMCPHTTP(ctx context.Context, cfg *config.Config, ln net.Listener, tokens []string, h http.Handler, started func(addr net.Addr, auth string)) error {
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	srv := &http.Server{
		Handler: server.RequireBearer(tokens, mux, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agrun"`)
			w.Header().Set("Connection", "close")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"unauthorized: missing or wrong bearer token (Authorization: Bearer <token>)"}}`+"\n")
		})),
		ReadHeaderTimeout: server.ReadHeaderTimeout,
		IdleTimeout:       server.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
	}
	ln = server.LimitListener(ln, cfg.Serve.MaxConnections, cfg.Serve.MaxConnectionsPerClient)
	auth := fmt.Sprintf("%d bearer token(s) from $%s", len(tokens), cfg.Serve.TokensEnv)
	if len(tokens) == 0 {
		auth = "none (loopback only; set $" + cfg.Serve.TokensEnv + ")"
	}
	started(ln.Addr(), auth)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), mcpShutdownTimeout)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

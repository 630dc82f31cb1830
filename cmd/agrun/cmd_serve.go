package main

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"slices"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/server"
	"github.com/agcore/agrun/wasmtools"
)

// serve is `agrun serve [--addr ADDR]`: the HTTP API of server
// (docs/API.md) over the configured tools plus the uploaded ones. It
// answers only requests naming it (loopback, ADDR's host, the address a
// connection reached, [serve] allowed_hosts) and not from web pages of
// another origin. It runs
// until the context is cancelled (SIGTERM, Ctrl-C), then lets requests in
// flight finish for up to server.DefaultShutdownTimeout. With [cluster]
// the uploaded tools are shared with every other replica through the
// module store (serve_cluster.go) and runs answer 501 (docs/API.md).
func (c *cli) serve(ctx context.Context, args []string) error {
	fs := newFlags("serve")
	addr := fs.String("addr", "", "listen on ADDR (default: [serve] addr, else 127.0.0.1:8080)")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageOf(fs, "takes no arguments")
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	if *addr != "" {
		cfg.Serve.Addr = *addr
	}
	tenants, tokens, err := serveTenants(cfg, os.Getenv)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Serve.Addr)
	if err != nil {
		return err
	}
	if err := server.CheckListener(ln, tokens); err != nil {
		ln.Close()
		return &configError{err}
	}
	e, err := newEnv(ctx, cfg, c.logger(), nil)
	if err != nil {
		ln.Close()
		return err
	}
	defer e.close()
	e.warnBroken(c.stderr)
	tel, err := c.setupTelemetry(ctx, cfg, false, e.rt)
	if err != nil {
		ln.Close()
		return err
	}
	defer c.shutdownTelemetry(tel) // after the server has stopped: its last spans are flushed
	lc, err := loopConfig(cfg)
	if err != nil {
		ln.Close()
		return err
	}
	lc.Approver = c.serveApprover(cfg) // calls that need a yes are asked of the run's client (docs/API.md)
	opts := serveOptions(cfg.Serve)
	if err := serveOCI(cfg, &opts); err != nil { // cmd_oci.go: uploads by reference
		ln.Close()
		return err
	}
	opts.Runtime, opts.Registry, opts.Loop, opts.Logger, opts.Telemetry = e.rt, e.reg, &lc, e.log, tel
	opts.NewRegistry = e.newRegistry // each tenant's: the policy and [sandbox] max_parallel of the operator's
	if opts.Tenants = tenants; len(tenants) == 0 {
		opts.Tokens = tokens
	}
	data := ""
	if cfg.Cluster.Enabled() {
		// Cluster mode: the uploads live in [cluster] module_store,
		// shared by every replica; this process keeps nothing.
		shared, closeShared, err := c.serveShared(ctx, cfg)
		if err != nil {
			ln.Close()
			return err
		}
		defer closeShared()
		opts.SharedStore = shared
		data = "shared: " + cfg.Cluster.ModuleStore
		if cfg.Cluster.ModuleStore == "" {
			data = "shared: the default module_store directory"
		}
	}
	srv, err := server.New(ctx, opts)
	if err != nil {
		ln.Close()
		return &configError{err}
	}
	defer srv.Close(context.Background())
	auth := fmt.Sprintf("%d bearer token(s) from $%s", len(tokens), cfg.Serve.TokensEnv)
	if len(tenants) > 0 {
		auth = fmt.Sprintf("%d tenant(s), %d bearer token(s)", len(tenants), len(tokens))
		if sum, total := tenantCalls(tenants, opts); sum > total {
			fmt.Fprintf(c.stderr, "agrun: warning: the tenants' max_concurrent_calls add up to %d, more than [serve] max_concurrent_calls: a busy tenant can make the others wait (429 busy)\n", sum)
		}
	} else if len(tokens) == 0 {
		auth = "none (loopback only; set $" + cfg.Serve.TokensEnv + ")"
	}
	if data == "" {
		data = "data: " + srv.DataDir()
	}
	fmt.Fprintf(c.stderr, "agrun: serving on http://%s (tools: %d, %s, auth: %s)\n", ln.Addr(), e.loaded(), data, auth)
	if a, ok := ln.Addr().(*net.TCPAddr); ok && a.IP.IsUnspecified() && len(cfg.Serve.AllowedHosts) == 0 {
		fmt.Fprintf(c.stderr, "agrun: requests naming this machine by a host name (not localhost, not an IP it listens on) are refused with 421 until [serve] allowed_hosts lists the name\n")
	}
	grace := cmp.Or(opts.ShutdownTimeout, server.DefaultShutdownTimeout)
	served, told := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(told)
		select {
		case <-ctx.Done():
		case <-served:
			if ctx.Err() == nil {
				return
			}
		}
		// SIGTERM or Ctrl-C: say what the wait is.
		fmt.Fprintf(c.stderr, "agrun: shutting down: no new requests; waiting up to %s for those in flight\n", grace)
	}()
	err = srv.Serve(ctx, ln)
	close(served)
	<-told
	if ctx.Err() != nil {
		fmt.Fprintln(c.stderr, "agrun: stopped")
	}
	return err
}

// serveTenants reads the bearer tokens: each tenant's from its
// tokens_env ([serve.tenants.NAME]; a token of two tenants, a tenant
// without one, or one too short is a configuration error naming the
// key), or without tenants those of [serve] tokens_env. tokens is every
// token, for the listener's policy.
func serveTenants(cfg *config.Config, getenv func(string) string) (tenants []server.Tenant, tokens []string, err error) {
	if len(cfg.Serve.Tenants) == 0 {
		tokens = server.TokensFromEnv(cfg.Serve.TokensEnv)
		if err := server.CheckTokens(tokens); err != nil {
			return nil, nil, &configError{fmt.Errorf("$%s: %w", cfg.Serve.TokensEnv, err)}
		}
		return nil, tokens, nil
	}
	byTenant, err := cfg.TenantTokens(getenv)
	if err != nil {
		return nil, nil, &configError{err}
	}
	names := make([]string, 0, len(cfg.Serve.Tenants))
	for name := range cfg.Serve.Tenants {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		t := cfg.Serve.Tenants[name]
		toks := byTenant[name]
		if len(toks) == 0 {
			return nil, nil, &configError{fmt.Errorf("%s: serve.tenants.%s.tokens_env: $%s holds no token (comma-separated bearer tokens)", cfg.Path, name, t.TokensEnv)}
		}
		if err := server.CheckTokens(toks); err != nil {
			return nil, nil, &configError{fmt.Errorf("%s: serve.tenants.%s.tokens_env: $%s: %w", cfg.Path, name, t.TokensEnv, err)}
		}
		tenants = append(tenants, server.Tenant{
			Name: name, Tokens: toks, Uploads: uploadsGrant(t.Uploads),
			MaxModules: t.MaxModules, MaxStorage: int64(t.MaxStorage),
			MaxConcurrentCalls: t.MaxConcurrentCalls, CallsPerMinute: t.CallsPerMinute,
		})
		tokens = append(tokens, toks...)
	}
	return tenants, tokens, nil
}

// tenantCalls is what the tenants' max_concurrent_calls add up to (an
// unset one counting as the server's share per client), and the server's
// max_concurrent_calls.
func tenantCalls(tenants []server.Tenant, opts server.Options) (sum, total int) {
	total = cmp.Or(opts.MaxConcurrentCalls, server.DefaultMaxConcurrentCalls)
	share := min(total, cmp.Or(opts.MaxCallsPerClient, max(1, total/2)))
	for _, t := range tenants {
		sum += cmp.Or(t.MaxConcurrentCalls, share)
	}
	return sum, total
}

// uploadsGrant is an uploads table ([serve.uploads], or a tenant's
// ceiling) as the grant of uploaded tools.
func uploadsGrant(u config.Uploads) wasmtools.Grant {
	return wasmtools.Grant{
		AllowedHosts: u.AllowedHosts,
		AllowPrivate: u.AllowPrivate,
		Limits:       runtime.Limits{Timeout: u.Timeout.Std(), MemoryBytes: int64(u.Memory), MaxStdout: int64(u.MaxOutput)},
	}
}

// serveOptions maps [serve] into the server's options (as newEnv maps
// [sandbox] into runtime.Config): limits, the names it answers for, the
// data directory and the grant of uploaded tools. tokens_env is read by
// the caller.
func serveOptions(sv config.Serve) server.Options {
	return server.Options{
		Addr:                    sv.Addr,
		AllowedHosts:            sv.AllowedHosts,
		DataDir:                 sv.DataDir,
		Uploads:                 uploadsGrant(sv.Uploads),
		MaxUpload:               int64(sv.MaxUpload),
		MaxBody:                 int64(sv.MaxBody),
		MaxConcurrentCalls:      sv.MaxConcurrentCalls,
		MaxCallsPerClient:       sv.MaxCallsPerClient,
		CallTimeout:             sv.CallTimeout.Std(),
		ReadTimeout:             sv.ReadTimeout.Std(),
		WriteTimeout:            sv.WriteTimeout.Std(),
		BodyTimeout:             sv.BodyTimeout.Std(),
		UploadsPerMinute:        sv.UploadsPerMinute,
		MaxConnections:          sv.MaxConnections,
		MaxConnectionsPerClient: sv.MaxConnectionsPerClient,
		ApprovalTimeout:         sv.ApprovalTimeout.Std(),
	}
}

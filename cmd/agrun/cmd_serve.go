package main

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"

	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/server"
)

// serve is `agrun serve [--addr ADDR]`: the HTTP API of server
// (docs/API.md) over the configured tools plus the uploaded ones. It
// answers only requests naming it (loopback, ADDR's host, the address a
// connection reached, [serve] allowed_hosts) and not from web pages of
// another origin. It runs
// until the context is cancelled (SIGTERM, Ctrl-C), then lets requests in
// flight finish for up to server.DefaultShutdownTimeout. With [cluster]
// the uploaded tools are shared with every other replica through the
// module store and runs are workflows on the cluster (setup.ServeCluster,
// docs/API.md "Cluster mode").
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
	tel, err := c.setupTelemetry(ctx, e, false)
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
	if err := setup.ServeOCI(cfg, &opts); err != nil { // cmd_oci.go: uploads by reference
		ln.Close()
		return err
	}
	opts.Runtime, opts.Registry, opts.Loop, opts.Logger, opts.Telemetry = e.rt, e.reg, &lc, e.log, tel
	opts.NewRegistry = e.NewRegistry // each tenant's: the policy and [sandbox] max_parallel of the operator's
	if opts.Tenants = tenants; len(tenants) == 0 {
		opts.Tokens = tokens
	}
	data := ""
	if cfg.Cluster.Enabled() {
		// Cluster mode: the uploads live in [cluster] module_store,
		// shared by every replica; this process keeps nothing.
		// Runs are workflows on the cluster's workers.
		closeCluster, err := setup.ServeCluster(ctx, cfg, c.logger(), &opts)
		if err != nil {
			ln.Close()
			return err
		}
		defer closeCluster()
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
	fmt.Fprintf(c.stderr, "agrun: serving on http://%s (tools: %d, %s, auth: %s)\n", ln.Addr(), e.Loaded(), data, auth)
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

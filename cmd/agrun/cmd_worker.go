//go:build cluster

package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agcore/agrun/session"

	"github.com/agcore/agrun/cluster"
	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/server"
)

// worker is `agrun worker`: a process of the cluster's worker pool
// ([cluster], docs/SCALING.md). It builds the registry from the config as
// the local path does (the same policy, sandbox, runtime and caches) and
// serves the session workflows and the activities of the queues it is
// given until it is interrupted (SIGINT, SIGTERM: it stops taking tasks
// and lets Temporal hand its running ones to another worker).
func (c *cli) worker(ctx context.Context, args []string) error {
	fs := newFlags("worker")
	wf := defineWorkerFlags(fs)
	queues, concurrency, identity := wf.queues, wf.concurrency, wf.identity
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageOf(fs, "takes no arguments")
	}
	var serve []string
	for _, q := range strings.Split(*queues, ",") {
		switch q = strings.TrimSpace(q); q {
		case cluster.ServeLLM, cluster.ServeWASM, cluster.ServeMCP:
			serve = append(serve, q)
		default:
			return usageOf(fs, "--queues: unknown queue %q (llm, wasm, mcp)", q)
		}
	}
	if *concurrency < 0 {
		return usageOf(fs, "--concurrency must be positive")
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	if !cfg.Cluster.Enabled() {
		return &configError{errors.New("agrun worker needs [cluster] temporal_address in the config (docs/SCALING.md)")}
	}
	for _, q := range serve {
		if q == cluster.ServeLLM {
			if err := setup.CheckAPIKey(cfg); err != nil {
				return err
			}
		}
	}
	n := *concurrency
	if n == 0 {
		n = cfg.Sandbox.MaxParallel
	}
	e, err := newEnv(ctx, cfg, c.logger(), nil)
	if err != nil {
		return err
	}
	defer e.close()
	e.warnBroken(c.stderr)
	ce, err := c.openCluster(ctx, cfg)
	if err != nil {
		return err
	}
	defer ce.close()
	lc, err := loopConfig(cfg)
	if err != nil {
		return err
	}
	lc.Approver = c.serveApprover(cfg)
	models, err := setup.ClusterModels(cfg) // what a run's -m may name
	if err != nil {
		return err
	}
	a := &cluster.Activities{
		Registry: e.reg,
		Loop:     lc,
		Models:   models,
		Sessions: ce.sessions,
		Blobs:    ce.objects,
	}
	// A tool a person approved "always" (agrun run's question on the
	// cluster) goes to this worker's approvals file, which its Approver
	// reads.
	standing := session.OpenApprovals(setup.SessionsDir(cfg))
	a.Remember = func(_ context.Context, tool string, g registry.Grant, sess string) error {
		return standing.Add(session.StandingApproval{Tool: tool, Grant: g, Time: time.Now().UTC(), By: "user", Session: sess})
	}
	shared := server.NewSharedStore(ce.objects, 0)
	if len(cfg.Serve.Tenants) == 0 {
		a.Refresh = server.NewUploads(e.reg, e.rt, serveOptions(cfg.Serve).Uploads, shared, c.logger()).Refresh
	} else {
		// With tenants, an upload is its tenant's own: a run of no tenant
		// (agrun run's, the operator's) is offered none, a run serve
		// started for tenant T (RunSettings.Tenant) T's, loaded with T's
		// ceiling from this worker's config, never the workflow's input
		// (docs/SCALING.md).
		ts := shared.(server.TenantSharedStore)
		byTenant := map[string]*server.Uploads{}
		regs := map[string]*registry.Registry{}
		for name, t := range cfg.Serve.Tenants {
			regs[name] = e.reg.Subset(func(string) bool { return true })
			byTenant[name] = server.NewUploads(regs[name], e.rt, setup.UploadsGrant(t.Uploads), ts.ForTenant(name), c.logger().With("tenant", name))
		}
		a.Tenants = func(name string) (*registry.Registry, func(context.Context, bool) error) {
			u, ok := byTenant[name]
			if !ok {
				return nil, nil
			}
			return regs[name], u.Refresh
		}
	}
	fmt.Fprintf(c.stderr, "agrun: worker serving %s on %s (namespace %s, tools: %d)\n",
		strings.Join(serve, ","), cfg.Cluster.TemporalAddress, ce.namespace(), e.Loaded())
	err = cluster.RunWorker(ctx, ce.temporal, a, cluster.WorkerOptions{Queues: ce.queues, Serve: serve, Concurrency: n, Identity: *identity})
	if err == nil && ctx.Err() != nil {
		fmt.Fprintln(c.stderr, "agrun: worker stopped")
	}
	return err
}

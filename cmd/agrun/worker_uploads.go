//go:build cluster

package main

import (
	"context"
	"fmt"
	"github.com/agcore/agrun/cluster/store"
	"log/slog"
	"sync"
	"time"

	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// uploadsRefresh is how stale a worker's view of the uploaded tools may
// be: a tool uploaded through `agrun serve` is offered to the model at
// most this long after.
const uploadsRefresh = 3 * time.Second

// uploadedTools keeps a worker's registry in step with the tools
// uploaded through `agrun serve` replicas (the cluster's tool index):
// each is fetched by digest (verified), compiled with [serve.uploads]'s
// grant — exactly what serve runs it with — and registered beside the
// config's tools, which an upload never replaces.
type uploadedTools struct {
	reg     *registry.Registry
	rt      *runtime.Runtime
	grant   wasmtools.Grant
	index   store.ToolIndex
	modules store.ModuleStore
	log     *slog.Logger

	mu     sync.Mutex
	last   time.Time
	loaded map[string]string // uploaded name -> sha256 registered
	failed map[string]string // name -> sha256 that did not load (not retried)
}

// refresh brings the registry up to date, at most every uploadsRefresh;
// what fails is logged and leaves the registry as it was for that tool.
//
// A step never waits for another step's refresh (it goes on with the
// registry as it is), and a replaced tool is closed in the background
// once its calls in flight are done.
// force: a call names a tool this worker lacks: wait for the lock and
// look now.
func (u *uploadedTools) refresh(ctx context.Context, force bool) error {
	if force {
		u.mu.Lock()
	} else if !u.mu.TryLock() {
		return nil
	}
	defer u.mu.Unlock()
	if !force && time.Since(u.last) < uploadsRefresh {
		return nil
	}
	recs, err := u.index.List(ctx)
	if err != nil && recs == nil {
		return fmt.Errorf("listing the uploaded tools: %w", err)
	}
	if err != nil {
		// Damaged records are left out; the others are served.
		u.log.Warn("uploaded tools: some records are damaged", "error", err)
	}
	u.last = time.Now()
	seen := map[string]bool{}
	for _, rec := range recs {
		seen[rec.Name] = true
		if u.loaded[rec.Name] == rec.SHA256 || u.failed[rec.Name] == rec.SHA256 {
			continue
		}
		if _, mine := u.loaded[rec.Name]; !mine {
			if _, ok := u.reg.Get(rec.Name); ok {
				continue // the operator's (configured or MCP) tool: never replaced
			}
		}
		// As agrun serve loads it (server.loadShared): the module by its
		// digest, its manifest inside it, the uploads' grant.
		wasm, _, err := u.modules.Get(ctx, rec.SHA256)
		if err != nil {
			// The store may answer next time: not marked failed.
			u.log.Warn("uploaded tool not fetched", "tool", rec.Name, "sha256", rec.SHA256, "error", err)
			continue
		}
		t, err := wasmtools.Load(ctx, u.rt, wasm, u.grant)
		if err == nil && t.Name() != rec.Name {
			t.Close(ctx)
			err = fmt.Errorf("the stored module is named %q", t.Name())
		}
		if err != nil {
			if ctx.Err() == nil {
				u.failed[rec.Name] = rec.SHA256 // the same module fails again
			}
			u.log.Warn("uploaded tool not loaded", "tool", rec.Name, "sha256", rec.SHA256, "error", err)
			continue
		}
		old, err := u.reg.Replace(t)
		if err != nil {
			t.Close(ctx)
			u.failed[rec.Name] = rec.SHA256
			continue
		}
		closeTool(ctx, old)
		u.loaded[rec.Name] = rec.SHA256
		delete(u.failed, rec.Name)
	}
	for name := range u.failed {
		if !seen[name] {
			delete(u.failed, name)
		}
	}
	for name := range u.loaded {
		if !seen[name] {
			if old, ok := u.reg.Unregister(name); ok {
				closeTool(ctx, old)
			}
			delete(u.loaded, name)
		}
	}
	return nil
}

// closeTool releases a replaced or removed tool in the background:
// Close waits for its calls in flight, which must not hold up a step.
func closeTool(ctx context.Context, t registry.Tool) {
	if wt, ok := t.(*wasmtools.Tool); ok {
		go wt.Close(context.WithoutCancel(ctx))
	}
}

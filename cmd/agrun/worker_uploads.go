//go:build cluster

package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/agcore/agrun/cluster"
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
	reg      *registry.Registry
	rt       *runtime.Runtime
	grant    wasmtools.Grant
	index    cluster.ToolIndex
	modules  cluster.ModuleStore
	operator map[string]bool // the config's tools
	log      *slog.Logger

	mu     sync.Mutex
	last   time.Time
	loaded map[string]string // uploaded name -> sha256 registered
	failed map[string]string // name -> sha256 that did not load (not retried)
}

// refresh brings the registry up to date, at most every uploadsRefresh;
// what fails is logged and leaves the registry as it was for that tool.
func (u *uploadedTools) refresh(ctx context.Context) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if time.Since(u.last) < uploadsRefresh {
		return nil
	}
	recs, err := u.index.List(ctx)
	if err != nil {
		return fmt.Errorf("listing the uploaded tools: %w", err)
	}
	u.last = time.Now()
	seen := map[string]bool{}
	for _, rec := range recs {
		seen[rec.Name] = true
		if u.operator[rec.Name] || u.loaded[rec.Name] == rec.SHA256 || u.failed[rec.Name] == rec.SHA256 {
			continue
		}
		wasm, manifest, err := u.modules.Get(ctx, rec.SHA256)
		var t *wasmtools.Tool
		if err == nil {
			t, err = u.load(ctx, wasm, manifest)
		}
		if err == nil && t.Name() != rec.Name {
			t.Close(ctx)
			err = fmt.Errorf("the stored module is named %q", t.Name())
		}
		if err != nil {
			u.failed[rec.Name] = rec.SHA256
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

func (u *uploadedTools) load(ctx context.Context, wasm, manifest []byte) (*wasmtools.Tool, error) {
	if manifest != nil {
		m, err := wasmtools.ParseManifest(manifest)
		if err != nil {
			return nil, err
		}
		return wasmtools.LoadWithManifest(ctx, u.rt, wasm, m, u.grant)
	}
	return wasmtools.Load(ctx, u.rt, wasm, u.grant)
}

func closeTool(ctx context.Context, t registry.Tool) {
	if wt, ok := t.(*wasmtools.Tool); ok {
		wt.Close(ctx)
	}
}

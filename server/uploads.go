package server

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// UploadsRefresh is how stale an Uploads' view of the shared store may
// be: a tool uploaded through `agrun serve` is offered to the model at
// most this long after.
const UploadsRefresh = 3 * time.Second

// Uploads keeps a registry — a cluster worker's — in step with the
// tools uploaded through `agrun serve` replicas into a SharedStore: each
// is fetched by digest (verified), compiled with the uploads' grant —
// exactly what serve runs it with — and registered beside the
// operator's tools, which an upload never replaces. Make one with
// NewUploads; it is safe for concurrent use.
type Uploads struct {
	reg    *registry.Registry
	rt     *runtime.Runtime
	grant  wasmtools.Grant
	shared SharedStore
	log    *slog.Logger

	mu     sync.Mutex
	last   time.Time
	loaded map[string]string // uploaded name -> sha256 registered
	failed map[string]string // name -> sha256 that did not load (not retried)
}

// NewUploads returns the Uploads that keeps reg in step with shared,
// loading modules into rt with grant (Options.Uploads of the replicas).
// A nil log is slog.Default().
func NewUploads(reg *registry.Registry, rt *runtime.Runtime, grant wasmtools.Grant, shared SharedStore, log *slog.Logger) *Uploads {
	if log == nil {
		log = slog.Default()
	}
	return &Uploads{reg: reg, rt: rt, grant: grant, shared: shared, log: log, loaded: map[string]string{}, failed: map[string]string{}}
}

// Refresh brings the registry up to date, at most every UploadsRefresh;
// what fails is logged and leaves the registry as it was for that tool.
//
// A step never waits for another step's refresh (it goes on with the
// registry as it is), and a replaced tool is closed in the background
// once its calls in flight are done.
// force: a call names a tool this worker lacks: wait for the lock and
// look now.
func (u *Uploads) Refresh(ctx context.Context, force bool) error {
	if force {
		u.mu.Lock()
	} else if !u.mu.TryLock() {
		return nil
	}
	defer u.mu.Unlock()
	if !force && time.Since(u.last) < UploadsRefresh {
		return nil
	}
	recs, err := u.shared.Tools(ctx)
	if err != nil && recs == nil {
		return fmt.Errorf("listing the uploaded tools: %w", err)
	}
	if err != nil {
		// Damaged records are left out; the others are served.
		u.log.Warn("uploaded tools: some records are damaged", "error", err)
	}
	u.last = time.Now()
	seen := map[string]bool{}
	for name, rec := range recs {
		seen[name] = true
		if u.loaded[name] == rec.SHA256 || u.failed[name] == rec.SHA256 {
			continue
		}
		if _, mine := u.loaded[name]; !mine {
			if _, ok := u.reg.Get(name); ok {
				continue // the operator's (configured or MCP) tool: never replaced
			}
		}
		// As agrun serve loads it (loadShared): the module by its
		// digest, its manifest inside it, the uploads' grant.
		wasm, err := u.shared.Module(ctx, rec.SHA256)
		if err != nil {
			// The store may answer next time: not marked failed.
			u.log.Warn("uploaded tool not fetched", "tool", name, "sha256", rec.SHA256, "error", err)
			continue
		}
		t, err := wasmtools.Load(runtime.WithOneCompileSlot(ctx), u.rt, wasm, u.grant)
		if err == nil && t.Name() != name {
			t.Close(ctx)
			err = fmt.Errorf("the stored module is named %q", t.Name())
		}
		if err != nil {
			if ctx.Err() == nil {
				u.failed[name] = rec.SHA256 // the same module fails again
			}
			u.log.Warn("uploaded tool not loaded", "tool", name, "sha256", rec.SHA256, "error", err)
			continue
		}
		old, err := u.reg.Replace(t)
		if err != nil {
			t.Close(ctx)
			u.failed[name] = rec.SHA256
			continue
		}
		closeLater(ctx, old)
		u.loaded[name] = rec.SHA256
		delete(u.failed, name)
	}
	for name := range u.failed {
		if !seen[name] {
			delete(u.failed, name)
		}
	}
	for name := range u.loaded {
		if !seen[name] {
			if old, ok := u.reg.Unregister(name); ok {
				closeLater(ctx, old)
			}
			delete(u.loaded, name)
		}
	}
	return nil
}

// closeLater releases a replaced or removed tool in the background:
// Close waits for its calls in flight, which must not hold up a step.
func closeLater(ctx context.Context, t registry.Tool) {
	if wt, ok := t.(*wasmtools.Tool); ok {
		go wt.Close(context.WithoutCancel(ctx))
	}
}

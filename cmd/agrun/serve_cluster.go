//go:build cluster

package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/agcore/agrun/cluster/store"

	"github.com/agcore/agrun/cmd/agrun/internal/config"
	"github.com/agcore/agrun/server"
)

// sharedTools is server.SharedStore over the cluster's object store
// ([cluster] module_store): the modules in store.ModuleStore
// (sha256/<digest>.wasm, verified on every read), the names in
// store.ToolIndex (tools/<name>.json) beside them. It is what makes
// `agrun serve` replicas share their uploads (docs/API.md, "Cluster
// mode"); the server package knows only the interface.
type sharedTools struct {
	modules store.ModuleStore
	index   store.ToolIndex
}

// serveShared opens cfg's cluster for `agrun serve`: the shared store of
// uploads, and what closes it.
func (c *cli) serveShared(ctx context.Context, cfg *config.Config) (server.SharedStore, func(), error) {
	ce, err := c.openCluster(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return newSharedTools(ce.objects, 0), ce.close, nil
}

func newSharedTools(objs store.ObjectStore, maxModule int64) sharedTools {
	return sharedTools{modules: store.ModuleStore{Objects: objs, MaxModuleBytes: maxModule}, index: store.ToolIndex{Objects: objs}}
}

var _ server.SharedStore = sharedTools{}

// noTool maps the cluster's ErrNotFound to the server's.
func noTool(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %w", server.ErrNoStoredTool, err)
	}
	return err
}

// PutModule stores an upload; its manifest is inside the module (serve
// refuses modules without one), so none is stored beside it.
func (s sharedTools) PutModule(ctx context.Context, wasm []byte) (string, error) {
	return s.modules.Put(ctx, wasm, nil)
}

func (s sharedTools) Module(ctx context.Context, sha string) ([]byte, error) {
	wasm, _, err := s.modules.Get(ctx, sha)
	return wasm, err
}

func (s sharedTools) PutTool(ctx context.Context, name string, t server.StoredTool) error {
	return s.index.Put(ctx, store.ToolRecord{Name: name, SHA256: t.SHA256, Size: t.Size, Uploaded: t.Uploaded})
}

func (s sharedTools) Tool(ctx context.Context, name string) (server.StoredTool, error) {
	rec, err := s.index.Get(ctx, name)
	if err != nil {
		return server.StoredTool{}, noTool(err)
	}
	return server.StoredTool{SHA256: rec.SHA256, Size: rec.Size, Uploaded: rec.Uploaded}, nil
}

func (s sharedTools) Tools(ctx context.Context) (map[string]server.StoredTool, error) {
	recs, err := s.index.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]server.StoredTool, len(recs))
	for _, rec := range recs {
		out[rec.Name] = server.StoredTool{SHA256: rec.SHA256, Size: rec.Size, Uploaded: rec.Uploaded}
	}
	return out, nil
}

func (s sharedTools) DeleteTool(ctx context.Context, name string) error {
	return noTool(s.index.Delete(ctx, name))
}

package server

import (
	"context"
	"errors"
	"fmt"

	cstore "github.com/agcore/agrun/cluster/store"
)

// sharedTools is SharedStore over a cluster's object store
// (cstore.ObjectStore: a directory, S3): the modules in cstore.ModuleStore
// (sha256/<digest>.wasm, verified on every read), the names in
// cstore.ToolIndex (tools/<name>.json) beside them. It is what makes
// `agrun serve` replicas share their uploads (docs/API.md, "Cluster
// mode").
type sharedTools struct {
	modules cstore.ModuleStore
	index   cstore.ToolIndex
}

// NewSharedStore is the SharedStore of agrun's cluster over objs: the
// modules by digest (cstore.ModuleStore, at most maxModule bytes each; 0:
// its default), the names beside them (cstore.ToolIndex). Every agrun
// serve replica and worker given the same object store shares the
// uploads.
func NewSharedStore(objs cstore.ObjectStore, maxModule int64) SharedStore {
	return sharedTools{modules: cstore.ModuleStore{Objects: objs, MaxModuleBytes: maxModule}, index: cstore.ToolIndex{Objects: objs}}
}

var _ TenantSharedStore = sharedTools{}

// ForTenant is the store of tenant name's records: the same modules, its
// names under tenants/<name>/tools/ (cstore.ToolIndex.Tenant); DefaultTenant's
// are tools/, the records of a serve without tenants.
func (s sharedTools) ForTenant(name string) SharedStore {
	s.index.Tenant = name
	return s
}

// noTool maps the cluster's ErrNotFound to the server's.
func noTool(err error) error {
	if errors.Is(err, cstore.ErrNotFound) {
		return fmt.Errorf("%w: %w", ErrNoStoredTool, err)
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

func (s sharedTools) PutTool(ctx context.Context, name string, t StoredTool) error {
	return s.index.Put(ctx, cstore.ToolRecord{Name: name, SHA256: t.SHA256, Size: t.Size, Uploaded: t.Uploaded})
}

func (s sharedTools) Tool(ctx context.Context, name string) (StoredTool, error) {
	rec, err := s.index.Get(ctx, name)
	if err != nil {
		return StoredTool{}, noTool(err)
	}
	return StoredTool{SHA256: rec.SHA256, Size: rec.Size, Uploaded: rec.Uploaded}, nil
}

func (s sharedTools) Tools(ctx context.Context) (map[string]StoredTool, error) {
	recs, err := s.index.List(ctx)
	if err != nil && recs == nil {
		return nil, err
	}
	// Damaged records are left out, the others returned with the error.
	out := make(map[string]StoredTool, len(recs))
	for _, rec := range recs {
		out[rec.Name] = StoredTool{SHA256: rec.SHA256, Size: rec.Size, Uploaded: rec.Uploaded}
	}
	return out, err
}

func (s sharedTools) DeleteTool(ctx context.Context, name string) error {
	return noTool(s.index.Delete(ctx, name))
}

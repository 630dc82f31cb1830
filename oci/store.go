package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agcore/agrun/cluster/store"
)

// Store is the local module store: what Pull fetched, content-addressed.
// Modules are kept as the cluster's store.ModuleStore keeps them
// (sha256/<module sha256>.wasm, verified on every read), and beside them
// one record per pulled manifest (oci/sha256/<manifest digest>.json)
// saying which module it carries. Over a DirObjects directory that is:
//
//	DIR/sha256/<hex>.wasm
//	DIR/oci/sha256/<hex>.json
//
// Objects may be any store.ObjectStore (a cluster's shared one, so that
// workers find what was pulled). The store trusts its directory as it
// trusts agrun.toml; a module is still checked against its own sha256
// when read. Safe for concurrent use by many goroutines and processes.
type Store struct {
	Objects store.ObjectStore
	// MaxModuleBytes caps a module read (0: 64 MiB, the sandbox's default).
	MaxModuleBytes int64
}

// Record is what the store knows of one pulled manifest.
type Record struct {
	Ref          string `json:"ref"`           // the pinned reference it was pulled as
	Digest       string `json:"digest"`        // the manifest's digest, "sha256:..."
	ModuleSHA256 string `json:"module_sha256"` // the module's hex SHA-256
	MediaType    string `json:"media_type"`    // the layer's media type
}

// DefaultDir is the store's folder when the configuration names none:
// $XDG_DATA_HOME/agrun/modules, else ~/.local/share/agrun/modules. It is
// data, not a cache: a configuration that pins a digest loads from it
// offline.
func DefaultDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "agrun", "modules")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "agrun", "modules")
	}
	return filepath.Join(os.TempDir(), "agrun-modules")
}

// OpenStore returns the store on the folder dir, creating it (0700) if
// needed.
func OpenStore(dir string) (*Store, error) {
	objs, err := store.NewDirObjects(dir)
	if err != nil {
		return nil, err
	}
	return &Store{Objects: objs}, nil
}

func recordKey(digest string) string {
	return "oci/sha256/" + strings.TrimPrefix(digest, "sha256:") + ".json"
}

func (s *Store) modules() store.ModuleStore {
	return store.ModuleStore{Objects: s.Objects, MaxModuleBytes: s.MaxModuleBytes}
}

// put stores wasm and the record of the manifest that carried it; it
// returns the module's hex SHA-256. The module is written first, so that
// a record never names a module that is not there.
func (s *Store) put(ctx context.Context, rec Record, wasm []byte) (string, error) {
	sum, err := s.modules().Put(ctx, wasm, nil)
	if err != nil {
		return "", fmt.Errorf("storing the module: %w", err)
	}
	rec.ModuleSHA256 = sum
	b, err := json.Marshal(rec)
	if err != nil {
		return "", err
	}
	if err := s.Objects.Put(ctx, recordKey(rec.Digest), b); err != nil {
		return "", fmt.Errorf("storing the module's record: %w", err)
	}
	return sum, nil
}

// Module returns the module a pulled manifest carries, by the manifest's
// digest ("sha256:<hex>"), without the network. A digest never pulled is
// an *Error wrapping ErrNotPulled; a module that no longer hashes to its
// name one wrapping ErrDigest.
func (s *Store) Module(ctx context.Context, digest string) ([]byte, Record, error) {
	wasm, rec, err := s.module(ctx, digest)
	if err != nil {
		return nil, Record{}, &Error{Op: "load", Ref: clean(digest), Err: err}
	}
	return wasm, rec, nil
}

func (s *Store) module(ctx context.Context, digest string) ([]byte, Record, error) {
	if !digestRE.MatchString(digest) {
		return nil, Record{}, fmt.Errorf("%w: want sha256: and 64 lowercase hex digits", ErrReference)
	}
	b, err := s.Objects.Get(ctx, recordKey(digest), 64<<10)
	if errors.Is(err, store.ErrNotFound) {
		return nil, Record{}, ErrNotPulled
	}
	if err != nil {
		return nil, Record{}, err
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil || rec.Digest != digest || !store.ValidDigest(rec.ModuleSHA256) {
		return nil, Record{}, fmt.Errorf("%w: the store's record of it is damaged (pull it again)", ErrNotPulled)
	}
	wasm, _, err := s.modules().Get(ctx, rec.ModuleSHA256)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, Record{}, fmt.Errorf("%w: its module %s is gone from the store", ErrNotPulled, rec.ModuleSHA256)
	case errors.Is(err, store.ErrDigest):
		return nil, Record{}, fmt.Errorf("%w: the stored module %s was changed", ErrDigest, rec.ModuleSHA256)
	case err != nil:
		return nil, Record{}, err
	}
	return wasm, rec, nil
}

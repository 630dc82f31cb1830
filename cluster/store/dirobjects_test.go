package store_test

import (
	"bytes"
	"context"
	"errors"
	"github.com/agcore/agrun/cluster/store"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agcore/agrun/internal/atomicfile"
)

// TestDirObjectsOnDisk: the files and folders a DirObjects writes, their
// modes, and what it makes of files it did not write.
func TestDirObjectsOnDisk(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "store")
	s, err := store.NewDirObjects(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "sha256/ab.wasm", []byte("module")); err != nil {
		t.Fatal(err)
	}
	for p, mode := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, "sha256"): 0o700, filepath.Join(dir, "sha256", "ab.wasm"): 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), mode)
		}
	}
	// A temporary file left by a crashed Put, a hidden folder and a
	// file whose name is not a key are not listed; a key that is a
	// folder is not an object.
	for _, p := range []string{"sha256/" + atomicfile.TempPrefix + "ab.wasm-123", ".trash/x", "sha256/UPPER"} {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("junk"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if keys, err := s.List(ctx, ""); err != nil || !slices.Equal(keys, []string{"sha256/ab.wasm"}) {
		t.Errorf("List = %q, %v; want only the key put", keys, err)
	}
	if _, err := s.Get(ctx, "sha256", 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get of a folder: %v, want ErrNotFound", err)
	}
	// A relative path is made absolute: the store does not move with the
	// working directory.
	t.Chdir(t.TempDir())
	rel, err := store.NewDirObjects("rel")
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(rel.Dir()) {
		t.Errorf("Dir() = %q, want an absolute path", rel.Dir())
	}
	if _, err := store.NewDirObjects(""); err == nil {
		t.Error("NewDirObjects(\"\") succeeded")
	}
}

// TestDirModuleTamperedOnDisk: a module whose file was changed in place
// behind the store's back is refused with ErrDigest.
func TestDirModuleTamperedOnDisk(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := store.NewDirObjects(dir)
	if err != nil {
		t.Fatal(err)
	}
	ms := store.ModuleStore{Objects: s}
	wasm := []byte("\x00asm\x01\x00\x00\x00")
	d, err := ms.Put(ctx, wasm, []byte(`{"name":"t"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sha256", d+".manifest.json")); err != nil {
		t.Errorf("no manifest beside the module: %v", err)
	}
	path := filepath.Join(dir, "sha256", d+".wasm")
	if err := os.WriteFile(path, append(bytes.Clone(wasm), 0), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ms.Get(ctx, d); !errors.Is(err, store.ErrDigest) {
		t.Errorf("Get of a module changed on disk: %v, want ErrDigest", err)
	}
}

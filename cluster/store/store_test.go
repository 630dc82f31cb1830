package store_test

import (
	"github.com/agcore/agrun/cluster/store"
	"os"
	"path/filepath"
	"testing"

	"github.com/agcore/agrun/cluster/storetest"
	"github.com/agcore/agrun/internal/testing/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func newDir(t *testing.T) store.ObjectStore {
	s, err := store.NewDirObjects(filepath.Join(t.TempDir(), "objects"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDirObjects(t *testing.T) { storetest.TestObjectStore(t, newDir) }

func TestDirModules(t *testing.T) { storetest.TestModuleStore(t, newDir) }

func TestDirToolIndex(t *testing.T) { storetest.TestToolIndex(t, newDir) }

func TestValidKey(t *testing.T) {
	for key, want := range map[string]bool{
		"a": true, "sha256/0a.wasm": true, "blobs/sha256/ff": true, "a-b_c.d/e": true, "1/2/3/4/5/6/7/8": true,
		"": false, "a/": false, "/a": false, "a//b": false, ".": false, "..": false, ".tmp-a": false,
		"a/-b": false, "_a": false, "A": false, "1/2/3/4/5/6/7/8/9": false, "a\x00": false,
	} {
		if got := store.ValidKey(key); got != want {
			t.Errorf("ValidKey(%q) = %v, want %v", key, got, want)
		}
	}
}

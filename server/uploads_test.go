package server_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/agcore/agrun/cluster/store"
	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/agcore/agrun/internal/testing/testrt"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/server"
	"github.com/agcore/agrun/wasmtools"
)

// TestUploadsFollowTheSharedStore: a worker's registry gets the tools put
// in the shared store, follows a replacement and a deletion, never
// replaces an operator's tool of the same name, and leaves out a module
// that does not load.
func TestUploadsFollowTheSharedStore(t *testing.T) {
	ctx := context.Background()
	objs, err := store.NewDirObjects(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	shared := server.NewSharedStore(objs, 0)
	put := func(name string, wasm []byte) {
		t.Helper()
		sha, err := shared.PutModule(ctx, wasm)
		if err != nil {
			t.Fatal(err)
		}
		if err := shared.PutTool(ctx, name, server.StoredTool{SHA256: sha, Size: int64(len(wasm)), Uploaded: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	reg := registry.New()
	mine, _ := registry.NewFunc("mine", "the operator's", func(context.Context, struct{}) (string, error) { return "operator", nil })
	if err := reg.Register(mine); err != nil {
		t.Fatal(err)
	}
	up := server.NewUploads(reg, testrt.New(t, runtime.Config{}), wasmtools.Grant{}, shared, nil)

	put("up", okTool(t, "up"))
	put("mine", okTool(t, "mine"))
	put("broken", []byte("\x00asm\x01\x00\x00\x00garbage"))
	if err := up.Refresh(ctx, true); err != nil {
		t.Fatal(err)
	}
	if inv := reg.Invoke(ctx, "up", json.RawMessage(`{}`)); inv.Err != nil || string(inv.Output) != `{"ok":true}` {
		t.Fatalf("the uploaded tool: %s %v", inv.Output, inv.Err)
	}
	if inv := reg.Invoke(ctx, "mine", json.RawMessage(`{}`)); string(inv.Output) != `"operator"` {
		t.Fatalf("an upload replaced the operator's tool: %s %v", inv.Output, inv.Err)
	}
	if _, ok := reg.Get("broken"); ok {
		t.Fatal("a module that does not load was registered")
	}

	// Replaced under the same name by another module: followed.
	put("up", pack(t, testguest.WAT(t, "testdata/ok.wat"), wasmtools.Manifest{Name: "up", Description: "the second version"}))
	if err := up.Refresh(ctx, true); err != nil {
		t.Fatal(err)
	}
	if tl, ok := reg.Get("up"); !ok || tl.Description() != "the second version" {
		t.Fatal("the replacement was not followed")
	}

	// Deleted: gone from the registry.
	if err := shared.DeleteTool(ctx, "up"); err != nil {
		t.Fatal(err)
	}
	if err := up.Refresh(ctx, true); err != nil {
		t.Fatal(err)
	}
	if _, ok := reg.Get("up"); ok {
		t.Fatal("a deleted upload is still registered")
	}
}

package runtime

import (
	"context"
	"testing"
)

// TestStats: the counters say what the Runtime did: compiles, a compile
// answered by the module already held, a warm start from a prepared file,
// and no instance in use once calls return.
func TestStats(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	r := newRuntime(t, Config{CacheDir: dir})
	wasm := wat(t, "hello")
	m := compile(t, r, wasm)
	compile(t, r, wasm)
	if _, err := r.Run(ctx, m, Input{}); err != nil {
		t.Fatal(err)
	}
	st := r.Stats()
	if st.Compiles != 2 || st.CompileHits != 1 || st.PreparedHits != 0 || st.Modules != 1 || st.InstancesInUse != 0 {
		t.Fatalf("stats %+v", st)
	}
	r2 := newRuntime(t, Config{CacheDir: dir})
	compile(t, r2, wasm)
	if st := r2.Stats(); st.Compiles != 1 || st.PreparedHits != 1 || st.CompileHits != 0 {
		t.Fatalf("a second runtime on the cache: %+v", st)
	}
}

package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/testguest"
)

// newRuntime returns a Runtime on the shared test compilation cache,
// closed when the test ends.
func newRuntime(t testing.TB, cfg Config) *Runtime {
	t.Helper()
	if cfg.CacheDir == "" && !cfg.DisableCache {
		cfg.CacheDir = testguest.CompilationCacheDir(t)
	}
	r, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

// compile compiles wasm, failing the test on error.
func compile(t testing.TB, r *Runtime, wasm []byte) *Module {
	t.Helper()
	m, err := r.Compile(context.Background(), wasm)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func probe(t testing.TB) []byte { return testguest.Build(t, "testdata/guests/probe") }

func wat(t testing.TB, name string) []byte { return testguest.WAT(t, "testdata/wat/"+name+".wat") }

// callFloor is the longest of three calls of the probe guest that do
// nothing: what a call costs on this machine right now. Timeout tests bound
// the time to stop a guest by 2× the limit plus twice this, because a busy
// machine (CI runs packages in parallel on 2 cores) stretches every call;
// what they prove is that the guest is stopped, not that the host is idle.
func callFloor(t *testing.T, r *Runtime, probeMod *Module) time.Duration {
	t.Helper()
	var floor time.Duration
	for range 3 {
		out, err := r.Run(context.Background(), probeMod, Input{Args: []string{"probe", "exit"}})
		if err != nil {
			t.Fatal(err)
		}
		floor = max(floor, out.Duration)
	}
	return floor
}

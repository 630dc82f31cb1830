// Package testrt gives tests a runtime.Runtime set up the way the suite
// shares them: on the compilation cache every test binary of a run shares
// (testguest.CompilationCacheDir), with what guests log discarded, and
// closed when the test ends.
//
//	rt := testrt.New(t, runtime.Config{MaxInstances: 2})
//
// The runtime package's own tests cannot import it (it imports runtime)
// and keep their newRuntime.
package testrt

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/agcore/agrun/runtime"
)

// Quiet is a logger that drops everything: the default Logger of New, so
// that what hostile guests log through agrun.log does not flood the test
// output.
var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// New returns runtime.New(cfg) with cfg.CacheDir defaulting to the shared
// test compilation cache (unless cfg.DisableCache) and cfg.Logger to
// Quiet. It fails the test if New fails, and closes the runtime when the
// test ends.
func New(tb testing.TB, cfg runtime.Config) *runtime.Runtime {
	tb.Helper()
	if cfg.CacheDir == "" && !cfg.DisableCache {
		cfg.CacheDir = testguest.CompilationCacheDir(tb)
	}
	if cfg.Logger == nil {
		cfg.Logger = Quiet
	}
	rt, err := runtime.New(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("runtime.New: %v", err)
	}
	tb.Cleanup(func() { rt.Close(context.Background()) })
	return rt
}

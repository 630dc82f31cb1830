//go:build unix

package hostile

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agcore/agrun/wasmtools"
)

// ExtismPlugin registers export fn of the hostile plug-in as the tool
// x_fn (its arguments: {"n": "..."}).
func (f *Fixture) ExtismPlugin(t *testing.T, fn string, config map[string]string, g wasmtools.Grant, perms ...string) {
	t.Helper()
	f.ExtismPluginAs(t, "x_"+fn, fn, config, g, perms...)
}

// ExtismPluginAs registers export fn of the hostile plug-in as the tool
// name.
func (f *Fixture) ExtismPluginAs(t *testing.T, name, fn string, config map[string]string, g wasmtools.Grant, perms ...string) {
	t.Helper()
	wasm, err := os.ReadFile(filepath.Join(RepoRoot, "testdata", "plugins", "hostile.wasm"))
	Must(t, err)
	if g.Limits.Timeout == 0 {
		// No case here expects a timeout: each must meet its limit
		// (memory, output) first, even on a machine at load 8, where
		// config_flood's 32 MiB took over 2 s.
		g.Limits.Timeout = 15 * time.Second
	}
	tool, err := wasmtools.LoadPlugin(context.Background(), f.Rt, wasm, wasmtools.Plugin{
		Manifest: wasmtools.Manifest{Name: name, Description: "hostile plug-in", Output: "text", Permissions: MustPerms(t, perms...),
			Parameters: json.RawMessage(`{"type":"object"}`)},
		Function: fn,
		Config:   config,
	}, g)
	Must(t, err)
	t.Cleanup(func() { tool.Close(context.Background()) })
	f.Register(t, tool)
}

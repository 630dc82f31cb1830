package hostile

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// The Extism section: testdata/plugins/hostile (a plug-in built with
// Extism's Go PDK, declaring its own raw imports of extism:host/env)
// abuses each host function. Every case must end as the Kind it names,
// with the host alive, an honest tool still working and nothing leaked.

// extismPlugin registers export fn of the hostile plug-in as the tool
// x_fn (its arguments: {"n": "..."}).
func (f *fixture) extismPlugin(t *testing.T, fn string, config map[string]string, g wasmtools.Grant, perms ...string) {
	t.Helper()
	wasm, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "plugins", "hostile.wasm"))
	must(t, err)
	if g.Limits.Timeout == 0 {
		g.Limits.Timeout = callTimeout * 5
	}
	tool, err := wasmtools.LoadPlugin(context.Background(), f.rt, wasm, wasmtools.Plugin{
		Manifest: wasmtools.Manifest{Name: "x_" + fn, Description: "hostile plug-in", Output: "text", Permissions: mustPerms(t, perms...),
			Parameters: json.RawMessage(`{"type":"object"}`)},
		Function: fn,
		Config:   config,
	}, g)
	must(t, err)
	t.Cleanup(func() { tool.Close(context.Background()) })
	f.register(t, tool)
}

func TestExtismHostFunctions(t *testing.T) {
	f := newFixture(t, runtime.Config{})
	mem := wasmtools.Grant{Limits: runtime.Limits{MemoryBytes: 32 << 20}}
	for _, fn := range []string{"huge_alloc", "many_allocs", "tiny_allocs", "load_oob", "load_edge", "store_oob", "load_u8_oob",
		"output_flood", "output_lie", "log_flood", "log_bad", "var_flood"} {
		f.extismPlugin(t, fn, nil, mem)
	}
	f.extismPlugin(t, "config_flood", map[string]string{"big": strings.Repeat("c", 512<<10)}, mem)
	target := newPeer(t, nil)
	f.extismPlugin(t, "http_get", nil, wasmtools.Grant{AllowedHosts: []string{target.host, "*", "*.0.0.1"}}, "network")
	for _, c := range []struct {
		name, tool, n string
		want          registry.Kind
		check         func(t *testing.T, out json.RawMessage)
	}{
		{"alloc of 2^64-1 bytes", "huge_alloc", fmt.Sprint(uint64(math.MaxUint64)), registry.MemoryLimit, nil},
		{"alloc past the memory limit", "huge_alloc", fmt.Sprint(40 << 20), registry.MemoryLimit, nil},
		{"alloc of 0 bytes", "huge_alloc", "0", "", nil},
		{"allocs until the limit", "many_allocs", "", registry.MemoryLimit, nil},
		{"a million 1-byte allocs (the block table)", "tiny_allocs", "", registry.MemoryLimit, nil},
		{"load at address 0", "load_oob", "0", registry.ExecutionFailed, nil},
		{"load at 2^64-8", "load_oob", fmt.Sprint(uint64(math.MaxUint64 - 7)), registry.ExecutionFailed, nil},
		{"load straddling a block's end", "load_edge", "", registry.ExecutionFailed, nil},
		{"store at 2^40", "store_oob", fmt.Sprint(uint64(1) << 40), registry.ExecutionFailed, nil},
		{"load_u8 past the arena", "load_u8_oob", fmt.Sprint(uint64(1) << 30), registry.ExecutionFailed, nil},
		{"output past max_output", "output_flood", fmt.Sprint(2 << 20), registry.OutputLimit, nil},
		{"output length beyond its block", "output_lie", fmt.Sprint(1 << 20), registry.ExecutionFailed, nil},
		{"output length 2^64-1", "output_lie", fmt.Sprint(uint64(math.MaxUint64)), registry.OutputLimit, nil},
		// 1,000 messages of 4 KiB: 16 times the per-call cap; the PDK
		// writes each through store_u64 host calls, so more only makes the
		// case slower on a busy machine (10,000 took over 2 s at load 4).
		{"log flood", "log_flood", "1000", "", func(t *testing.T, out json.RawMessage) {
			if string(out) != `"done"` {
				t.Errorf("output %s", out)
			}
		}},
		{"log from a bad address", "log_bad", "12345678", registry.ExecutionFailed, nil},
		{"var flood", "var_flood", "", registry.MemoryLimit, nil},
		{"config read without end", "config_flood", "1000", registry.MemoryLimit, nil},
		{"http to a private address (the allowed host)", "http_get", target.URL, registry.PermissionDenied, nil},
		{"http matched by a glob", "http_get", "http://example.com/", registry.PermissionDenied, nil},
		{"http to a file URL", "http_get", "file:///etc/passwd", registry.PermissionDenied, nil},
		{"http to the metadata address", "http_get", "http://169.254.169.254/latest/meta-data/", registry.PermissionDenied, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := f.snapshot(t)
			args, _ := json.Marshal(map[string]string{"n": c.n})
			got := inv(f.reg.Invoke(context.Background(), "x_"+c.tool, args))
			f.after(t, before, got, c.want)
			if got.err != nil {
				t.Log(got.err)
			}
			if c.check != nil && got.err == nil {
				c.check(t, got.out)
			}
		})
	}
	if n := target.hits.Load(); n != 0 {
		t.Errorf("the peer was reached %d times", n)
	}
}

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
	"time"

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
		// No case here expects a timeout: each must meet its limit
		// (memory, output) first, even on a machine at load 8, where
		// config_flood's 32 MiB took over 2 s.
		g.Limits.Timeout = 15 * time.Second
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

// The MCP-style plug-in section: the hostile plug-in's list_tools and
// call_tool answer what its config names (testdata/plugins/hostile). A
// hostile listing refuses the plug-in at load, with a message fit for a
// terminal, and the host unharmed; a hostile answer to a call ends as the
// Kind the case names, its text cleaned.
func TestMCPPluginListings(t *testing.T) {
	f := newFixture(t, runtime.Config{})
	wasm, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "plugins", "hostile.wasm"))
	must(t, err)
	g := wasmtools.Grant{Limits: runtime.Limits{Timeout: callTimeout * 5, MaxStdout: 1 << 20}}
	for _, c := range []struct{ list, want string }{
		{"flood", "300 tools, at most 256"},
		{"dup", `both map to the name "h__a_b"`},
		{"bigschema", "input schema is"},
		{"badschema", `tool "bad"`},
		{"bomb", `tool "bomb"`},
		{"notjson", "not valid JSON"},
		{"huge", "output exceeded"},
		{"empty", "lists no tools"},
	} {
		t.Run(c.list, func(t *testing.T) {
			before := f.snapshot(t)
			tools, err := wasmtools.LoadMCPPlugin(context.Background(), f.rt, wasm, wasmtools.MCPPlugin{Name: "h", Config: map[string]string{"list": c.list}}, g)
			for _, tool := range tools {
				tool.Close(context.Background())
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %d tools, error %v; want the plug-in refused: %q", len(tools), err, c.want)
			}
			t.Log(err)
			checkModelText(t, err.Error())
			if len(err.Error()) > 2<<10 {
				t.Errorf("the refusal is %d bytes", len(err.Error()))
			}
			f.stillWorks(t)
			checkLeaks(t, before)
		})
	}
	t.Run("evil names and descriptions are cleaned", func(t *testing.T) {
		tools, err := wasmtools.LoadMCPPlugin(context.Background(), f.rt, wasm, wasmtools.MCPPlugin{Name: "h", Config: map[string]string{"list": "evil"}}, g)
		must(t, err)
		defer tools[0].Close(context.Background())
		tool := tools[0]
		if !registry.ValidName(tool.Name()) {
			t.Errorf("name %q is not a valid tool name", tool.Name())
		}
		checkModelText(t, tool.Description())
		if len(tool.Description()) > registry.MaxDescriptionBytes {
			t.Errorf("description is %d bytes, cap %d", len(tool.Description()), registry.MaxDescriptionBytes)
		}
		checkModelText(t, string(tool.Parameters()))
		if strings.Contains(string(tool.Parameters()), `\u001b`) {
			t.Errorf("schema keeps an escape: %s", tool.Parameters())
		}
	})

	for _, c := range []struct {
		call  string
		want  registry.Kind
		check func(t *testing.T, out json.RawMessage)
	}{
		{"ansi_error", registry.ExecutionFailed, nil},
		{"ansi_text", "", func(t *testing.T, out json.RawMessage) {
			var s string
			must(t, json.Unmarshal(out, &s))
			checkModelText(t, s)
		}},
		{"ansi_structured", "", func(t *testing.T, out json.RawMessage) {
			var m map[string]string
			must(t, json.Unmarshal(out, &m))
			for k, v := range m {
				checkModelText(t, k+v)
			}
		}},
		{"notjson", registry.ExecutionFailed, nil},
		{"image", "", func(t *testing.T, out json.RawMessage) {
			if string(out) != `"[image: image/png, 4096 bytes]"` {
				t.Errorf("image result %s, want a placeholder", out)
			}
		}},
		{"huge", registry.OutputLimit, nil},
	} {
		t.Run("call "+c.call, func(t *testing.T) {
			tools, err := wasmtools.LoadMCPPlugin(context.Background(), f.rt, wasm, wasmtools.MCPPlugin{Name: "c_" + c.call, Config: map[string]string{"call": c.call}}, g)
			must(t, err)
			f.register(t, tools[0])
			t.Cleanup(func() { f.reg.Unregister(tools[0].Name()); tools[0].Close(context.Background()) })
			before := f.snapshot(t)
			got := inv(f.reg.Invoke(context.Background(), tools[0].Name(), json.RawMessage(`{}`)))
			f.after(t, before, got, c.want)
			if c.check != nil && got.err == nil {
				c.check(t, got.out)
			}
		})
	}
}

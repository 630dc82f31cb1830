package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/hostile"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// The Extism section: testdata/plugins/hostile (a plug-in built with
// Extism's Go PDK, declaring its own raw imports of extism:host/env)
// abuses each host function. Every case must end as the Kind it names,
// with the host alive, an honest tool still working and nothing leaked.

func TestExtismHostFunctions(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	mem := wasmtools.Grant{Limits: runtime.Limits{MemoryBytes: 32 << 20}}
	for _, fn := range []string{"huge_alloc", "many_allocs", "tiny_allocs", "load_oob", "load_edge", "store_oob", "load_u8_oob",
		"output_flood", "output_lie", "log_flood", "log_bad", "var_flood"} {
		f.ExtismPlugin(t, fn, nil, mem)
	}
	f.ExtismPlugin(t, "config_flood", map[string]string{"big": strings.Repeat("c", 512<<10)}, mem)
	target := hostile.NewPeer(t, nil)
	f.ExtismPlugin(t, "http_get", nil, wasmtools.Grant{AllowedHosts: []string{target.Host, "*", "*.0.0.1"}}, "network")
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
			before := f.Snapshot(t)
			args, _ := json.Marshal(map[string]string{"n": c.n})
			got := hostile.Inv(f.Reg.Invoke(context.Background(), "x_"+c.tool, args))
			f.After(t, before, got, c.want)
			if got.Err != nil {
				t.Log(got.Err)
			}
			if c.check != nil && got.Err == nil {
				c.check(t, got.Out)
			}
		})
	}
	if n := target.Hits.Load(); n != 0 {
		t.Errorf("the peer was reached %d times", n)
	}
}

// TestExtismHostFunctionSections: the hostile plug-in against the host
// functions the cases above leave out, one group per function: store_u8,
// free and length, input_load_u64, error_set, config_get, var_get and
// var_set, http_status_code and http_headers, and http_request's abuses
// (a request that is not JSON or not a block, a request flood, a body
// or headers over the request cap, a response over the response cap, a
// redirect from the allowed host to one that is not). Each ends as the
// Kind it names, its message fit for a terminal, with the host alive and
// nothing leaked; no server is reached more than the grant allows.
func TestExtismHostFunctionSections(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	mem := wasmtools.Grant{Limits: runtime.Limits{MemoryBytes: 32 << 20}}
	for _, fn := range []string{"store_u8_oob", "free_abuse", "input_oob", "error_flood", "error_bad", "config_bad",
		"var_get_bad", "var_set_bad", "http_no_request", "http_bad_json", "http_bad_addr"} {
		f.ExtismPlugin(t, fn, nil, mem)
	}
	counted := hostile.NewPeer(t, nil)
	huge := hostile.NewPeer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("h", 8<<20)))
	})
	redirector := hostile.NewPeer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	target := hostile.NewPeer(t, nil) // not granted: only a redirect points at it
	netGrant := wasmtools.Grant{AllowedHosts: []string{counted.Host, huge.Host, redirector.Host}, AllowPrivate: true,
		Limits: runtime.Limits{MemoryBytes: 32 << 20}}
	for _, fn := range []string{"http_flood", "http_big_body", "http_header_flood", "http_get"} {
		f.ExtismPluginAs(t, "n_"+fn, fn, nil, netGrant, "network")
	}
	for _, c := range []struct {
		name, tool, n string
		want          registry.Kind
		check         func(t *testing.T, out json.RawMessage, err error)
	}{
		{"store_u8: at 2^40", "x_store_u8_oob", fmt.Sprint(uint64(1) << 40), registry.ExecutionFailed, nil},
		{"store_u8: at 2^64-1", "x_store_u8_oob", fmt.Sprint(uint64(math.MaxUint64)), registry.ExecutionFailed, nil},
		{"free and length: a bad address, 0, a double free", "x_free_abuse", "123456", "", func(t *testing.T, out json.RawMessage, _ error) {
			if string(out) != `"distinct 0"` {
				t.Errorf("output %s; want two distinct blocks after a double free, and length 0 for a non-block", out)
			}
		}},
		{"input_load_u64: past the input", "x_input_oob", "4096", registry.ExecutionFailed, nil},
		{"input_load_u64: at 2^64-4", "x_input_oob", fmt.Sprint(uint64(math.MaxUint64 - 3)), registry.ExecutionFailed, nil},
		{"error_set: 1 MiB of terminal escapes", "x_error_flood", fmt.Sprint(1 << 20), registry.ExecutionFailed, func(t *testing.T, _ json.RawMessage, err error) {
			if err == nil || len(err.Error()) > 8<<10 {
				t.Errorf("the error is %d bytes; want it cut", len(fmt.Sprint(err)))
			}
		}},
		{"error_set: from a bad address", "x_error_bad", "12345678", registry.ExecutionFailed, nil},
		{"config_get: key at a bad address", "x_config_bad", "99999", registry.ExecutionFailed, nil},
		{"var_get: key at a bad address", "x_var_get_bad", "99999", registry.ExecutionFailed, nil},
		{"var_set: value at a bad address", "x_var_set_bad", fmt.Sprint(uint64(1) << 50), registry.ExecutionFailed, nil},
		{"http_status_code and http_headers before a request", "x_http_no_request", "", "", func(t *testing.T, out json.RawMessage, _ error) {
			if string(out) != `"0 0"` {
				t.Errorf("output %s; want status 0 and no headers block", out)
			}
		}},
		{"http_request: not JSON", "x_http_bad_json", "", registry.ExecutionFailed, nil},
		{"http_request: request at a bad address", "x_http_bad_addr", fmt.Sprint(uint64(1) << 33), registry.ExecutionFailed, nil},
		{"http_request: 100 requests", "n_http_flood", counted.URL, registry.ExecutionFailed, func(t *testing.T, _ json.RawMessage, _ error) {
			if n := counted.Hits.Swap(0); n != 16 {
				t.Errorf("the granted host was reached %d times; want the per-call cap, 16", n)
			}
		}},
		{"http_request: a 2 MiB body", "n_http_big_body", counted.URL, registry.ExecutionFailed, nil},
		{"http_request: 10,000 headers", "n_http_header_flood", counted.URL, registry.ExecutionFailed, nil},
		{"http_request: an 8 MiB response", "n_http_get", huge.URL, registry.ExecutionFailed, nil},
		{"http_request: redirected to a host not granted", "n_http_get", redirector.URL + "/?to=" + target.URL, registry.PermissionDenied, nil},
		{"http_request: redirected to the metadata address", "n_http_get", redirector.URL + "/?to=http://169.254.169.254/latest/meta-data/", registry.PermissionDenied, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := f.Snapshot(t)
			args, _ := json.Marshal(map[string]string{"n": c.n})
			got := hostile.Inv(f.Reg.Invoke(context.Background(), c.tool, args))
			f.After(t, before, got, c.want)
			if got.Err != nil {
				t.Log(got.Err)
			}
			if c.check != nil {
				c.check(t, got.Out, got.Err)
			}
		})
	}
	if n := counted.Hits.Load(); n != 0 {
		t.Errorf("a request over the cap reached the server %d times", n)
	}
	if n := target.Hits.Load(); n != 0 {
		t.Errorf("the host not granted was reached %d times", n)
	}
}

// The MCP-style plug-in section: the hostile plug-in's list_tools and
// call_tool answer what its config names (testdata/plugins/hostile). A
// hostile listing refuses the plug-in at load, with a message fit for a
// terminal, and the host unharmed; a hostile answer to a call ends as the
// Kind the case names, its text cleaned.
func TestMCPPluginListings(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	wasm, err := os.ReadFile(filepath.Join(hostile.RepoRoot, "testdata", "plugins", "hostile.wasm"))
	hostile.Must(t, err)
	g := wasmtools.Grant{Limits: runtime.Limits{Timeout: hostile.CallTimeout * 5, MaxStdout: 1 << 20}}
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
			before := f.Snapshot(t)
			tools, err := wasmtools.LoadMCPPlugin(context.Background(), f.Rt, wasm, wasmtools.MCPPlugin{Name: "h", Config: map[string]string{"list": c.list}}, g)
			for _, tool := range tools {
				tool.Close(context.Background())
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %d tools, error %v; want the plug-in refused: %q", len(tools), err, c.want)
			}
			t.Log(err)
			hostile.CheckModelText(t, err.Error())
			if len(err.Error()) > 2<<10 {
				t.Errorf("the refusal is %d bytes", len(err.Error()))
			}
			f.StillWorks(t)
			hostile.CheckLeaks(t, before)
		})
	}
	t.Run("evil names and descriptions are cleaned", func(t *testing.T) {
		tools, err := wasmtools.LoadMCPPlugin(context.Background(), f.Rt, wasm, wasmtools.MCPPlugin{Name: "h", Config: map[string]string{"list": "evil"}}, g)
		hostile.Must(t, err)
		defer tools[0].Close(context.Background())
		tool := tools[0]
		if !registry.ValidName(tool.Name()) {
			t.Errorf("name %q is not a valid tool name", tool.Name())
		}
		hostile.CheckModelText(t, tool.Description())
		if len(tool.Description()) > registry.MaxDescriptionBytes {
			t.Errorf("description is %d bytes, cap %d", len(tool.Description()), registry.MaxDescriptionBytes)
		}
		hostile.CheckModelText(t, string(tool.Parameters()))
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
			hostile.Must(t, json.Unmarshal(out, &s))
			hostile.CheckModelText(t, s)
		}},
		{"ansi_structured", "", func(t *testing.T, out json.RawMessage) {
			var m map[string]string
			hostile.Must(t, json.Unmarshal(out, &m))
			for k, v := range m {
				hostile.CheckModelText(t, k+v)
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
			tools, err := wasmtools.LoadMCPPlugin(context.Background(), f.Rt, wasm, wasmtools.MCPPlugin{Name: "c_" + c.call, Config: map[string]string{"call": c.call}}, g)
			hostile.Must(t, err)
			f.Register(t, tools[0])
			t.Cleanup(func() { f.Reg.Unregister(tools[0].Name()); tools[0].Close(context.Background()) })
			before := f.Snapshot(t)
			got := hostile.Inv(f.Reg.Invoke(context.Background(), tools[0].Name(), json.RawMessage(`{}`)))
			f.After(t, before, got, c.want)
			if c.check != nil && got.Err == nil {
				c.check(t, got.Out)
			}
		})
	}
}

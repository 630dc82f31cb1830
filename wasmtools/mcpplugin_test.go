package wasmtools_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/agcore/agrun/internal/testing/testrt"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

func loadMCPPlugin(t *testing.T, rt *runtime.Runtime, wasm []byte, name string, g wasmtools.Grant) []*wasmtools.Tool {
	t.Helper()
	tools, err := wasmtools.LoadMCPPlugin(context.Background(), rt, wasm, wasmtools.MCPPlugin{Name: name}, g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, tool := range tools {
			tool.Close(context.Background())
		}
	})
	return tools
}

// TestMCPPluginHyperMCP loads textkit (hyper-mcp's interface, built with
// Extism's Go PDK) and calls its two tools through a registry: names,
// descriptions and schemas from its list_tools, results mapped as an MCP
// server's are, isError as execution_failed, arguments validated before
// the plug-in runs.
func TestMCPPluginHyperMCP(t *testing.T) {
	rt := testrt.New(t, runtime.Config{})
	tools := loadMCPPlugin(t, rt, readPlugin(t, "textkit"), "kit", wasmtools.Grant{})
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name())
		if iface, _, ok := tool.PluginTool(); !ok || iface != wasmtools.HyperMCP {
			t.Errorf("%s: PluginTool() = %q, %v; want hyper-mcp", tool.Name(), iface, ok)
		}
	}
	if got := strings.Join(names, ","); got != "kit__reverse,kit__stats" {
		t.Fatalf("tools %s, want kit__reverse,kit__stats", got)
	}
	if d := tools[0].Description(); d != "Reverse a text" {
		t.Errorf("description %q", d)
	}
	if p := string(tools[0].Parameters()); !strings.Contains(p, `"required":["text"]`) {
		t.Errorf("parameters %s, want the plug-in's schema", p)
	}
	reg := registry.New()
	for _, tool := range tools {
		if err := reg.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	for _, c := range []struct{ tool, args, want, kind string }{
		{"kit__reverse", `{"text":"stressed"}`, `"desserts"`, ""},
		{"kit__stats", `{"text":"two words"}`, `{"runes":9,"words":2}`, ""},
		{"kit__stats", `{"text":""}`, "text is empty", "execution_failed"},
		{"kit__stats", `{}`, "text", "invalid_arguments"}, // the schema's required, checked before the call
	} {
		inv := reg.Invoke(ctx, c.tool, json.RawMessage(c.args))
		if c.kind == "" {
			if inv.Err != nil || string(inv.Output) != c.want {
				t.Errorf("%s %s: %s, %v; want %s", c.tool, c.args, inv.Output, inv.Err, c.want)
			}
			continue
		}
		if k := registry.KindOf(inv.Err); string(k) != c.kind || !strings.Contains(inv.Err.Error(), c.want) {
			t.Errorf("%s %s: error %v (%s), want %s mentioning %q", c.tool, c.args, inv.Err, k, c.kind, c.want)
		}
	}
}

// TestMCPPluginServlet loads a servlet (mcp.run's describe/call) that
// answers its input as structuredContent: the call's input is
// {"method":"tools/call","params":{"name":TOOL,"arguments":ARGS}}.
func TestMCPPluginServlet(t *testing.T) {
	rt := testrt.New(t, runtime.Config{})
	tools := loadMCPPlugin(t, rt, testguest.WAT(t, "testdata/guests/servlet.wat"), "srv", wasmtools.Grant{})
	if len(tools) != 1 || tools[0].Name() != "srv__echo" {
		t.Fatalf("got %d tools (%v), want srv__echo", len(tools), tools)
	}
	if iface, tool, _ := tools[0].PluginTool(); iface != wasmtools.Servlet || tool != "echo" {
		t.Errorf("PluginTool() = %q, %q; want mcp.run, echo", iface, tool)
	}
	got, err := tools[0].Execute(context.Background(), json.RawMessage(`{"x":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"method":"tools/call","params":{"name":"echo","arguments":{"x":"hi"}}}`; string(got) != want {
		t.Errorf("the servlet saw %s, want %s", got, want)
	}
}

// TestMCPPluginShared: the tools share one module, released when the last
// of them is closed; closing one twice does not release it early.
func TestMCPPluginShared(t *testing.T) {
	rt := testrt.New(t, runtime.Config{})
	tools, err := wasmtools.LoadMCPPlugin(context.Background(), rt, readPlugin(t, "textkit"), wasmtools.MCPPlugin{Name: "kit"}, wasmtools.Grant{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tools[0].Close(ctx)
	tools[0].Close(ctx)
	if _, err := tools[1].Execute(ctx, json.RawMessage(`{"text":"ab"}`)); err != nil {
		t.Fatalf("the other tool after one was closed (twice): %v", err)
	}
	tools[1].Close(ctx)
	if _, err := tools[1].Execute(ctx, json.RawMessage(`{"text":"ab"}`)); !errors.Is(err, registry.ErrOther) {
		t.Fatalf("after the last was closed: %v, want the module closed (other)", err)
	}
}

// TestMCPPluginRefused: what LoadMCPPlugin refuses, and says why.
func TestMCPPluginRefused(t *testing.T) {
	rt := testrt.New(t, runtime.Config{})
	ctx := context.Background()
	for _, c := range []struct {
		name string
		wasm []byte
		p    wasmtools.MCPPlugin
		g    wasmtools.Grant
		want string
	}{
		{"a plain plug-in", readPlugin(t, "count_vowels"), wasmtools.MCPPlugin{Name: "cv"}, wasmtools.Grant{}, "neither list_tools and call_tool"},
		{"not a plug-in", testguest.WAT(t, "testdata/guests/trap.wat"), wasmtools.MCPPlugin{Name: "x"}, wasmtools.Grant{}, "not an Extism plug-in"},
		{"name with __", readPlugin(t, "textkit"), wasmtools.MCPPlugin{Name: "a__b"}, wasmtools.Grant{}, `without "__"`},
		{"wrong pin", readPlugin(t, "textkit"), wasmtools.MCPPlugin{Name: "kit"}, wasmtools.Grant{SHA256: strings.Repeat("0", 64)}, "sha256"},
		{"config too big", readPlugin(t, "textkit"), wasmtools.MCPPlugin{Name: "kit", Config: map[string]string{"k": strings.Repeat("v", runtime.MaxPluginConfigBytes)}}, wasmtools.Grant{}, "config"},
		{"unknown permission", readPlugin(t, "textkit"), wasmtools.MCPPlugin{Name: "kit", Permissions: []permission.Permission{permission.MustParse("custom:x")}}, wasmtools.Grant{}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			tools, err := wasmtools.LoadMCPPlugin(ctx, rt, c.wasm, c.p, c.g)
			if c.want == "" { // a custom permission is a valid declaration
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				for _, tool := range tools {
					tool.Close(ctx)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, c.want)
			}
		})
	}
}

// TestMCPPluginCapabilities: the plug-in's tools get what the operator's
// permissions and grant give (declared ∩ granted), all of them alike.
func TestMCPPluginCapabilities(t *testing.T) {
	rt := testrt.New(t, runtime.Config{})
	g := wasmtools.Grant{AllowedHosts: []string{"example.com"}, Mounts: []wasmtools.Mount{{Host: t.TempDir(), Guest: "/data"}}}
	tools, err := wasmtools.LoadMCPPlugin(context.Background(), rt, readPlugin(t, "textkit"),
		wasmtools.MCPPlugin{Name: "kit", Permissions: []permission.Permission{permission.Network}}, g)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools {
		defer tool.Close(context.Background())
		c := tool.Capabilities()
		if c.Network == nil || len(c.Mounts) != 0 {
			t.Errorf("%s: capabilities %+v, want the network only (no filesystem declared)", tool.Name(), c)
		}
		if got := permission.Strings(tool.Permissions()); len(got) != 1 || got[0] != "network" {
			t.Errorf("%s: permissions %v", tool.Name(), got)
		}
		if u := tool.Unused(); len(u) != 1 || u[0].What != "mounts" {
			t.Errorf("%s: unused %+v, want mounts", tool.Name(), u)
		}
	}
}

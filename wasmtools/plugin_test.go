package wasmtools_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/testrt"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// pluginDir holds the PDK plug-ins (a module of their own, with the Extism
// half of the differential test).
var pluginDir = filepath.Join("..", "testdata", "plugins")

func readPlugin(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pluginDir, name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loadPlugin(t *testing.T, rt *runtime.Runtime, fn, output string, config map[string]string, g wasmtools.Grant, perms ...permission.Permission) *wasmtools.Tool {
	t.Helper()
	tool, err := wasmtools.LoadPlugin(context.Background(), rt, readPlugin(t, "count_vowels"), wasmtools.Plugin{
		Manifest: wasmtools.Manifest{Name: fn, Description: "test plug-in", Output: output, Permissions: perms},
		Config:   config,
	}, g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tool.Close(context.Background()) })
	return tool
}

// TestPluginDifferential is agrun's half of the differential test: every
// case of testdata/plugins/differential.json gives, under agrun, what
// testdata/plugins' TestDifferentialExtism checks Extism's Go SDK gives.
func TestPluginDifferential(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(pluginDir, "differential.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name, Plugin, Function, Input, Output, Error string
		Config                                       map[string]string
		Status                                       uint32
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	rt := testrt.New(t, runtime.Config{})
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			mod, err := rt.Compile(context.Background(), readPlugin(t, c.Plugin))
			if err != nil {
				t.Fatal(err)
			}
			defer mod.Close(context.Background())
			for i := range 2 { // twice: the second call must not see the first's vars
				out, err := rt.Run(context.Background(), mod, runtime.Input{
					Stdin:  []byte(c.Input),
					Plugin: &runtime.Plugin{Function: c.Function, Config: c.Config},
				})
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				p := out.Plugin
				if p.Status != c.Status || string(p.Output) != c.Output || string(p.Error) != c.Error {
					t.Errorf("call %d: agrun: status %d, output %q, error %q; differential.json (and Extism) say %d, %q, %q", i, p.Status, p.Output, p.Error, c.Status, c.Output, c.Error)
				}
			}
		})
	}
}

func TestPluginTool(t *testing.T) {
	rt := testrt.New(t, runtime.Config{})
	ctx := context.Background()
	t.Run("json", func(t *testing.T) {
		tool := loadPlugin(t, rt, "count_vowels", "json", map[string]string{"vowels": "o"}, wasmtools.Grant{})
		got, err := tool.Execute(ctx, json.RawMessage(`{"text":"foo boo"}`))
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"count":4,"vowels":"o","calls":1}`; string(got) != want {
			t.Errorf("got %s, want %s", got, want)
		}
	})
	t.Run("text", func(t *testing.T) {
		tool := loadPlugin(t, rt, "shout", "text", nil, wasmtools.Grant{})
		got, err := tool.Execute(ctx, json.RawMessage(`{"a":1}`))
		if err != nil {
			t.Fatal(err)
		}
		if want := `"{\"A\":1}"`; string(got) != want {
			t.Errorf("got %s, want %s", got, want)
		}
	})
	t.Run("text is not json", func(t *testing.T) {
		tool := loadPlugin(t, rt, "shout", "json", nil, wasmtools.Grant{})
		_, err := tool.Execute(ctx, json.RawMessage(`{"a":true}`)) // {"A":TRUE}
		if !errors.Is(err, registry.ErrExecutionFailed) || !strings.Contains(err.Error(), "not valid JSON") {
			t.Fatalf("got %v, want execution_failed: not valid JSON", err)
		}
	})
	t.Run("error_set is execution_failed, cleaned", func(t *testing.T) {
		tool := loadPlugin(t, rt, "fail", "json", nil, wasmtools.Grant{})
		_, err := tool.Execute(ctx, json.RawMessage(`{"x":"\u202e\u0007evil"}`))
		var re *registry.Error
		if !errors.As(err, &re) || re.Kind != registry.ExecutionFailed {
			t.Fatalf("got %v, want execution_failed", err)
		}
		if msg := re.Message(); !strings.HasPrefix(msg, "no luck: ") || strings.ContainsAny(msg, "\u202e\u0007") {
			t.Errorf("message %q: want the plug-in's, cleaned", msg)
		}
	})
	t.Run("missing function", func(t *testing.T) {
		_, err := wasmtools.LoadPlugin(ctx, rt, readPlugin(t, "count_vowels"), wasmtools.Plugin{
			Manifest: wasmtools.Manifest{Name: "nope", Description: "d"},
		}, wasmtools.Grant{})
		if !errors.Is(err, runtime.ErrCompile) || !strings.Contains(err.Error(), `no function "nope"`) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("is plugin", func(t *testing.T) {
		if !wasmtools.IsPlugin(readPlugin(t, "count_vowels")) {
			t.Error("count_vowels is a plug-in")
		}
		wc, err := os.ReadFile(filepath.Join("..", "testdata", "word_count.wasm"))
		if err != nil {
			t.Fatal(err)
		}
		if wasmtools.IsPlugin(wc) {
			t.Error("word_count is not a plug-in")
		}
	})
}

// TestPluginHTTP: Extism's http_request goes through agrun's grant: the
// allowed host answers, another host and a private address are refused
// (permission_denied), and a glob never matches.
func TestPluginHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("hello from " + r.URL.Path))
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	rt := testrt.New(t, runtime.Config{})
	ctx := context.Background()
	call := func(g wasmtools.Grant, url string) (json.RawMessage, error) {
		tool := loadPlugin(t, rt, "fetch", "json", nil, g, permission.Network)
		args, _ := json.Marshal(map[string]string{"url": url})
		return tool.Execute(ctx, args)
	}
	got, err := call(wasmtools.Grant{AllowedHosts: []string{"127.0.0.1:" + port}, AllowPrivate: true}, srv.URL+"/x")
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"status":200,"body":"hello from /x"}`; string(got) != want {
		t.Errorf("got %s, want %s", got, want)
	}
	t.Run("the deadline during a request", func(t *testing.T) {
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}))
		defer slow.Close()
		host := strings.TrimPrefix(slow.URL, "http://")
		_, err := call(wasmtools.Grant{AllowedHosts: []string{host}, AllowPrivate: true, Limits: runtime.Limits{Timeout: 500 * time.Millisecond}}, slow.URL)
		if !errors.Is(err, registry.ErrTimeout) {
			t.Fatalf("got %v, want timeout", err)
		}
	})
	for _, c := range []struct {
		name  string
		grant wasmtools.Grant
	}{
		{"private address", wasmtools.Grant{AllowedHosts: []string{"127.0.0.1:" + port}}},
		{"other host", wasmtools.Grant{AllowedHosts: []string{"example.com"}, AllowPrivate: true}},
		{"a glob is not a pattern", wasmtools.Grant{AllowedHosts: []string{"*"}, AllowPrivate: true}},
		{"no grant", wasmtools.Grant{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := call(c.grant, srv.URL+"/x")
			if !errors.Is(err, registry.ErrPermissionDenied) {
				t.Fatalf("got %v, want permission_denied", err)
			}
		})
	}
}

// TestPluginMounts: Extism's allowed_paths are agrun's mounts: a plug-in
// reads a granted mount, and nothing outside it.
func TestPluginMounts(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("mounted"), 0o644); err != nil {
		t.Fatal(err)
	}
	rt := testrt.New(t, runtime.Config{})
	tool := loadPlugin(t, rt, "read", "text", nil, wasmtools.Grant{Mounts: []wasmtools.Mount{{Host: dir, Guest: "/data"}}},
		permission.Filesystem, permission.Read)
	got, err := tool.Execute(context.Background(), json.RawMessage(`{"path":"/data/a.txt"}`))
	if err != nil || string(got) != `"mounted"` {
		t.Fatalf("got %s, %v", got, err)
	}
	_, err = tool.Execute(context.Background(), json.RawMessage(`{"path":"/etc/passwd"}`))
	if !errors.Is(err, registry.ErrExecutionFailed) {
		t.Fatalf("outside the mount: %v", err)
	}
	// Undeclared, the mount is not linked.
	tool = loadPlugin(t, rt, "read", "text", nil, wasmtools.Grant{Mounts: []wasmtools.Mount{{Host: dir, Guest: "/data"}}})
	if _, err := tool.Execute(context.Background(), json.RawMessage(`{"path":"/data/a.txt"}`)); !errors.Is(err, registry.ErrExecutionFailed) {
		t.Fatalf("mount without filesystem declared: %v", err)
	}
}

package wasmtools_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agcore/agrun/internal/testing/require"
	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/agcore/agrun/internal/wasmbin"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// The tests share one Runtime (on the shared compilation cache) so that each
// module is compiled once per test binary: a Tool is never closed, so
// loading the same bytes again reuses the compiled module.
var shared struct {
	once sync.Once
	rt   *runtime.Runtime
	err  error
}

func testRuntime(t testing.TB) *runtime.Runtime {
	t.Helper()
	shared.once.Do(func() {
		shared.rt, shared.err = runtime.New(context.Background(), runtime.Config{
			CacheDir: testguest.CompilationCacheDir(t),
			Logger:   slog.New(guestLogs),
		})
	})
	if shared.err != nil {
		t.Fatalf("runtime.New: %v", shared.err)
	}
	return shared.rt
}

// guestLogs receives what guests log with agrun.log; a test waits for a
// message with waitLog, to know its guest is running.
var guestLogs = &logWaiter{}

type logWaiter struct {
	mu      sync.Mutex
	waiting map[string]chan struct{}
}

func (w *logWaiter) Enabled(context.Context, slog.Level) bool { return true }
func (w *logWaiter) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *logWaiter) WithGroup(string) slog.Handler            { return w }
func (w *logWaiter) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.waiting[r.Message]; ok {
		close(c)
		delete(w.waiting, r.Message)
	}
	return nil
}

// waitLog returns a channel closed when a guest logs msg.
func (w *logWaiter) waitLog(msg string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting == nil {
		w.waiting = map[string]chan struct{}{}
	}
	c := make(chan struct{})
	w.waiting[msg] = c
	return c
}

// example returns the bytes of an example tool under the top-level testdata.
func example(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", name+".wasm"))
	if err != nil {
		t.Fatalf("example tool %s: %v (scripts/build-examples.sh builds it)", name, err)
	}
	return b
}

func hostileWasm(t testing.TB) []byte { return testguest.Hostile(t) }
func echoWasm(t testing.TB) []byte    { return testguest.Build(t, "testdata/guests/echo") }

// load is wasmtools.Load that fails the test on error.
func load(t testing.TB, wasm []byte, g wasmtools.Grant) *wasmtools.Tool {
	t.Helper()
	tool, err := wasmtools.Load(context.Background(), testRuntime(t), wasm, g)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return tool
}

// loadWith is wasmtools.LoadWithManifest that fails the test on error.
func loadWith(t testing.TB, wasm []byte, m wasmtools.Manifest, g wasmtools.Grant) *wasmtools.Tool {
	t.Helper()
	tool, err := wasmtools.LoadWithManifest(context.Background(), testRuntime(t), wasm, m, g)
	if err != nil {
		t.Fatalf("LoadWithManifest: %v", err)
	}
	return tool
}

// hostile loads the hostile guest under a manifest from Go declaring perms.
func hostile(t testing.TB, name string, perms []permission.Permission, g wasmtools.Grant) *wasmtools.Tool {
	t.Helper()
	return loadWith(t, hostileWasm(t), wasmtools.Manifest{Name: name, Description: "misbehaves on request", Permissions: perms}, g)
}

func perms(ss ...string) []permission.Permission {
	ps, err := permission.ParseList(ss)
	if err != nil {
		panic(err)
	}
	return ps
}

// newRegistry returns a registry with a permission checker for cfg, holding
// the tools.
func newRegistry(t testing.TB, cfg permission.Config, tools ...registry.Tool) *registry.Registry {
	t.Helper()
	r := registry.New(registry.WithPermissionChecker(permission.NewChecker(cfg)))
	for _, tool := range tools {
		if err := r.Register(tool); err != nil {
			t.Fatalf("Register %s: %v", tool.Name(), err)
		}
	}
	return r
}

// allowing is the default policy with extra permissions allowed.
func allowing(extra ...string) permission.Config {
	cfg := permission.DefaultConfig()
	cfg.Allowed = append(cfg.Allowed, perms(extra...)...)
	return cfg
}

// call executes tool with args (a Go value or a JSON string).
func call(t testing.TB, tool registry.Tool, args any) (json.RawMessage, error) {
	t.Helper()
	return tool.Execute(context.Background(), rawJSON(t, args))
}

func rawJSON(t testing.TB, v any) json.RawMessage {
	t.Helper()
	if s, ok := v.(string); ok {
		return json.RawMessage(s)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mustCall is call that fails the test on error.
func mustCall(t testing.TB, tool registry.Tool, args any) json.RawMessage {
	t.Helper()
	out, err := call(t, tool, args)
	if err != nil {
		t.Fatalf("%s(%s): %v", tool.Name(), rawJSON(t, args), err)
	}
	return out
}

// reply is what the hostile guest answers (testguest.Reply).
type reply = testguest.Reply

func decodeReply(t testing.TB, out json.RawMessage) reply { return testguest.DecodeReply(t, out) }

// hostileDo runs an operation of the hostile guest that must not fail as a
// call, and returns its answer.
func hostileDo(t testing.TB, tool registry.Tool, args any) reply {
	t.Helper()
	return decodeReply(t, mustCall(t, tool, args))
}

// jsonEqual compares two JSON documents by value.
func jsonEqual(t testing.TB, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("result %s is not JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad expectation %s: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("result %s, want %s", got, want)
	}
}

// writeFile creates a file (and its directory) under dir.
func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExamplePureTools(t *testing.T) {
	tests := []struct {
		wasm, args, want string
	}{
		{"word_count", `{"text":"hello big world\nbye"}`, `{"words":4,"lines":2,"chars":19,"bytes":19}`},
		{"word_count", `{"text":"héllo"}`, `{"words":1,"lines":1,"chars":5,"bytes":6}`},
		{"sum_c", `{"numbers":[1,2.5,-3]}`, `{"sum":0.5,"count":3}`},
		{"sum_c", `{"numbers":[]}`, `{"sum":0,"count":0}`},
	}
	for _, tt := range tests {
		t.Run(tt.wasm, func(t *testing.T) {
			tool := load(t, example(t, tt.wasm), wasmtools.Grant{})
			if tool.Name() != tt.wasm || tool.Description() == "" || len(tool.Permissions()) != 0 {
				t.Fatalf("name %q, description %q, permissions %v", tool.Name(), tool.Description(), tool.Permissions())
			}
			if tool.Capabilities().Network != nil || tool.Capabilities().Mounts != nil {
				t.Fatalf("pure tool got capabilities %+v", tool.Capabilities())
			}
			jsonEqual(t, mustCall(t, tool, tt.args), tt.want)

			// The same through a registry under the default policy.
			r := newRegistry(t, permission.DefaultConfig(), tool)
			inv := r.Invoke(context.Background(), tt.wasm, json.RawMessage(tt.args))
			if inv.Err != nil {
				t.Fatalf("Invoke: %v", inv.Err)
			}
			jsonEqual(t, inv.Output, tt.want)
		})
	}
}

func TestExampleToolErrors(t *testing.T) {
	wc := load(t, example(t, "word_count"), wasmtools.Grant{})
	sum := load(t, example(t, "sum_c"), wasmtools.Grant{})
	r := newRegistry(t, permission.DefaultConfig(), wc, sum)

	// Arguments the schema refuses never reach the guest.
	inv := r.Invoke(context.Background(), "word_count", json.RawMessage(`{"text":1}`))
	require.Kind(t, inv.Err, registry.InvalidArguments)

	// The C tool's own error: {"error":...} on stdout and exit 1. Called
	// directly, so the schema does not catch the bad element first.
	_, err := call(t, sum, `{"numbers":[1,"x"]}`)
	e := require.Kind(t, err, registry.ExecutionFailed)
	if want := `invalid arguments: "numbers" must hold only numbers`; e.Message() != want {
		t.Fatalf("message %q, want %q", e.Message(), want)
	}
}

func TestReadFileExample(t *testing.T) {
	docs := t.TempDir()
	writeFile(t, docs, "readme.md", "# Hello\nfrom the docs\n")
	writeFile(t, docs, "sub/deep.txt", "deep")
	tool := load(t, example(t, "read_file"), wasmtools.Grant{
		Mounts: []wasmtools.Mount{{Host: docs, Guest: "/docs"}},
	})
	ctx := context.Background()

	// filesystem is not in the default allow-list: denied before running.
	r := newRegistry(t, permission.DefaultConfig(), tool)
	inv := r.Invoke(ctx, "read_file", json.RawMessage(`{"path":"/docs/readme.md"}`))
	e := require.Kind(t, inv.Err, registry.PermissionDenied)
	if !errors.Is(inv.Err, permission.ErrDenied) || !strings.Contains(e.Message(), `"filesystem"`) {
		t.Fatalf("denial %v does not name filesystem", inv.Err)
	}

	// Allowed, it runs.
	r = newRegistry(t, allowing("filesystem"), tool)
	inv = r.Invoke(ctx, "read_file", json.RawMessage(`{"path":"/docs/readme.md"}`))
	if inv.Err != nil {
		t.Fatalf("Invoke: %v", inv.Err)
	}
	jsonEqual(t, inv.Output, `{"path":"/docs/readme.md","size":22,"content":"# Hello\nfrom the docs\n","encoding":"utf-8"}`)

	inv = r.Invoke(ctx, "read_file", json.RawMessage(`{"path":"/docs"}`))
	if inv.Err != nil {
		t.Fatalf("Invoke: %v", inv.Err)
	}
	var dir struct {
		Entries []struct {
			Name string `json:"name"`
			Dir  bool   `json:"dir"`
		} `json:"entries"`
	}
	if err := json.Unmarshal(inv.Output, &dir); err != nil || len(dir.Entries) != 2 {
		t.Fatalf("listing %s: %v", inv.Output, err)
	}

	// Nothing outside the mount exists for it.
	for _, p := range []string{"/etc/passwd", "/docs/../etc/passwd", "/", "/proc/self/environ"} {
		inv = r.Invoke(ctx, "read_file", rawJSON(t, map[string]string{"path": p}))
		if inv.Err == nil {
			t.Fatalf("read_file %s succeeded: %s", p, inv.Output)
		}
		e := require.Kind(t, inv.Err, registry.ExecutionFailed)
		if strings.Contains(e.Message(), "root:") {
			t.Fatalf("read_file %s leaked: %v", p, e)
		}
	}
}

func TestWriteNoteExample(t *testing.T) {
	notes := t.TempDir()
	ctx := context.Background()
	tool := load(t, example(t, "write_note"), wasmtools.Grant{
		Mounts: []wasmtools.Mount{{Host: notes, Guest: "/notes", Writable: true}},
	})
	if c := tool.Capabilities(); len(c.Mounts) != 1 || !c.Mounts[0].Writable || c.Mounts[0].AllowDelete {
		t.Fatalf("capabilities %+v, want one writable mount without delete", c)
	}
	r := newRegistry(t, allowing("filesystem", "write"), tool)
	inv := r.Invoke(ctx, "write_note", json.RawMessage(`{"name":"groceries","text":"milk\neggs\n"}`))
	if inv.Err != nil {
		t.Fatalf("Invoke: %v", inv.Err)
	}
	jsonEqual(t, inv.Output, `{"path":"/notes/groceries.txt","bytes":10}`)
	got, err := os.ReadFile(filepath.Join(notes, "groceries.txt"))
	if err != nil || string(got) != "milk\neggs\n" {
		t.Fatalf("host file: %q, %v", got, err)
	}

	// write is not allowed by the default policy.
	r = newRegistry(t, allowing("filesystem"), tool)
	require.Kind(t, r.Invoke(ctx, "write_note", json.RawMessage(`{"name":"x","text":"y"}`)).Err, registry.PermissionDenied)

	// The same tool on a read-only mount cannot write.
	ro := t.TempDir()
	tool = load(t, example(t, "write_note"), wasmtools.Grant{
		Mounts: []wasmtools.Mount{{Host: ro, Guest: "/notes"}},
	})
	_, err = call(t, tool, `{"name":"x","text":"y"}`)
	e := require.Kind(t, err, registry.ExecutionFailed)
	if !strings.Contains(e.Message(), "not writable") {
		t.Fatalf("message %q", e.Message())
	}
	if ents, _ := os.ReadDir(ro); len(ents) != 0 {
		t.Fatalf("read-only mount was written: %v", ents)
	}
}

// weatherServer is a local stand-in for the Open-Meteo API.
func weatherServer(t *testing.T) (*httptest.Server, *[]string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path+"?"+r.URL.RawQuery)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/search":
			if r.URL.Query().Get("name") != "Paris" {
				fmt.Fprint(w, `{"results":[]}`)
				return
			}
			fmt.Fprint(w, `{"results":[{"name":"Paris","country":"France","latitude":48.85,"longitude":2.35}]}`)
		case "/v1/forecast":
			fmt.Fprint(w, `{"current_weather":{"time":"2026-11-30T10:00","temperature":7.5,"windspeed":12.3,"winddirection":250,"weathercode":3}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &seen
}

func TestGetWeatherExample(t *testing.T) {
	srv, seen := weatherServer(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()
	tool := load(t, example(t, "get_weather"), wasmtools.Grant{AllowedHosts: []string{host}, AllowPrivate: true})
	if n := tool.Capabilities().Network; n == nil || !reflect.DeepEqual(n.AllowedHosts, []string{host}) || !n.AllowPrivate {
		t.Fatalf("network capability %+v", n)
	}
	r := newRegistry(t, permission.DefaultConfig(), tool) // network is allowed by default
	inv := r.Invoke(ctx, "get_weather", rawJSON(t, map[string]string{"city": "Paris", "api_base": srv.URL}))
	if inv.Err != nil {
		t.Fatalf("Invoke: %v", inv.Err)
	}
	jsonEqual(t, inv.Output, `{"location":"Paris, France","latitude":48.85,"longitude":2.35,"temperature_c":7.5,
		"windspeed_kmh":12.3,"wind_direction_deg":250,"weather_code":3,"conditions":"overcast","time":"2026-11-30T10:00"}`)
	if len(*seen) != 2 || !strings.HasPrefix((*seen)[0], "/v1/search?") || !strings.HasPrefix((*seen)[1], "/v1/forecast?") {
		t.Fatalf("server saw %v", *seen)
	}
	q, _ := url.ParseQuery(strings.SplitN((*seen)[1], "?", 2)[1])
	if q.Get("latitude") != "48.85" || q.Get("longitude") != "2.35" {
		t.Fatalf("forecast query %v", q)
	}

	// The guest's own failure comes back with its message.
	inv = r.Invoke(ctx, "get_weather", rawJSON(t, map[string]string{"city": "Atlantis", "api_base": srv.URL}))
	if e := require.Kind(t, inv.Err, registry.ExecutionFailed); e.Message() != `city "Atlantis" not found` {
		t.Fatalf("message %q", e.Message())
	}

	// Without AllowPrivate the loopback server is refused at dial time: the
	// request fails inside the guest, which reports it.
	noPrivate := load(t, example(t, "get_weather"), wasmtools.Grant{AllowedHosts: []string{host}})
	_, err := call(t, noPrivate, map[string]string{"city": "Paris", "api_base": srv.URL})
	if e := require.Kind(t, err, registry.ExecutionFailed); !strings.Contains(e.Message(), "forbidden") {
		t.Fatalf("message %q", e.Message())
	}
	// A host that is not allowed is refused the same way.
	other := load(t, example(t, "get_weather"), wasmtools.Grant{AllowedHosts: []string{"api.open-meteo.com"}, AllowPrivate: true})
	_, err = call(t, other, map[string]string{"city": "Paris", "api_base": srv.URL})
	if e := require.Kind(t, err, registry.ExecutionFailed); !strings.Contains(e.Message(), "not in the allowed hosts") {
		t.Fatalf("message %q", e.Message())
	}
	if len(*seen) != 3 {
		t.Fatalf("the server saw %d requests, want 3 (the refused ones never reach it)", len(*seen))
	}

	// The manifest declares network but nothing is granted: it loads, and
	// its request ends the call as permission_denied.
	ungranted := load(t, example(t, "get_weather"), wasmtools.Grant{})
	_, err = call(t, ungranted, map[string]string{"city": "Paris", "api_base": srv.URL})
	require.Kind(t, err, registry.PermissionDenied)
}

func TestCapabilities(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "pong") }))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")

	type mountWant struct{ writable, del bool }
	tests := []struct {
		name     string
		declared []string
		mount    *wasmtools.Mount // Guest is /data; Host is filled in
		hosts    bool             // grant AllowedHosts [host]
		network  bool             // want the network capability
		mounts   []mountWant      // want these mounts
	}{
		{name: "nothing declared, everything offered", declared: nil, hosts: true, mount: &wasmtools.Mount{Writable: true, AllowDelete: true}},
		{name: "network declared, no hosts", declared: []string{"network"}},
		{name: "network declared and granted", declared: []string{"network"}, hosts: true, network: true},
		{name: "network declared, only mounts offered", declared: []string{"network"}, mount: &wasmtools.Mount{Writable: true}},
		{name: "filesystem without write, rw mount", declared: []string{"filesystem", "read"}, mount: &wasmtools.Mount{Writable: true, AllowDelete: true}, mounts: []mountWant{{}}},
		{name: "filesystem and write, ro mount", declared: []string{"filesystem", "write"}, mount: &wasmtools.Mount{}, mounts: []mountWant{{}}},
		{name: "filesystem and write, rw mount", declared: []string{"filesystem", "write"}, mount: &wasmtools.Mount{Writable: true}, mounts: []mountWant{{writable: true}}},
		{name: "filesystem and write, rwd mount", declared: []string{"filesystem", "write"}, mount: &wasmtools.Mount{Writable: true, AllowDelete: true}, mounts: []mountWant{{writable: true}}},
		{name: "write and delete, rw mount", declared: []string{"filesystem", "write", "delete"}, mount: &wasmtools.Mount{Writable: true}, mounts: []mountWant{{writable: true}}},
		{name: "write and delete, rwd mount", declared: []string{"filesystem", "write", "delete"}, mount: &wasmtools.Mount{Writable: true, AllowDelete: true}, mounts: []mountWant{{writable: true, del: true}}},
		{name: "delete without write, rwd mount", declared: []string{"filesystem", "delete"}, mount: &wasmtools.Mount{Writable: true, AllowDelete: true}, mounts: []mountWant{{}}},
		{name: "delete offered on a ro mount", declared: []string{"filesystem", "write", "delete"}, mount: &wasmtools.Mount{AllowDelete: true}, mounts: []mountWant{{}}},
		{name: "write and read without filesystem", declared: []string{"read", "write", "delete"}, mount: &wasmtools.Mount{Writable: true, AllowDelete: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "old.txt", "old")
			var g wasmtools.Grant
			if tt.hosts {
				g.AllowedHosts, g.AllowPrivate = []string{host}, true
			}
			if tt.mount != nil {
				m := *tt.mount
				m.Host, m.Guest = dir, "/data"
				g.Mounts = []wasmtools.Mount{m}
			}
			tool := hostile(t, "caps", perms(tt.declared...), g)

			caps := tool.Capabilities()
			if (caps.Network != nil) != tt.network {
				t.Fatalf("network capability %+v, want %v", caps.Network, tt.network)
			}
			if len(caps.Mounts) != len(tt.mounts) {
				t.Fatalf("mounts %+v, want %+v", caps.Mounts, tt.mounts)
			}
			for i, w := range tt.mounts {
				m := caps.Mounts[i]
				if m.Host != dir || m.Guest != "/data" || m.Writable != w.writable || m.AllowDelete != w.del {
					t.Fatalf("mount %+v, want %+v", m, w)
				}
			}

			// Behaviour matches the capabilities.
			_, err := call(t, tool, map[string]string{"op": "http", "url": srv.URL})
			if tt.network {
				if err != nil {
					t.Fatalf("granted request: %v", err)
				}
			} else {
				require.Kind(t, err, registry.PermissionDenied)
			}

			read := hostileDo(t, tool, map[string]string{"op": "read", "path": "/data/old.txt"})
			if read.OK != (len(tt.mounts) > 0) || (read.OK && read.Data != "old") {
				t.Fatalf("read: %+v", read)
			}
			write := hostileDo(t, tool, map[string]string{"op": "write", "path": "/data/new.txt", "data": "new"})
			_, statErr := os.Stat(filepath.Join(dir, "new.txt"))
			canWrite := len(tt.mounts) > 0 && tt.mounts[0].writable
			if write.OK != canWrite || (statErr == nil) != canWrite {
				t.Fatalf("write: %+v, host file: %v; want writable %v", write, statErr, canWrite)
			}
			remove := hostileDo(t, tool, map[string]string{"op": "remove", "path": "/data/old.txt"})
			_, statErr = os.Stat(filepath.Join(dir, "old.txt"))
			canDelete := len(tt.mounts) > 0 && tt.mounts[0].del
			if remove.OK != canDelete || (statErr != nil) != canDelete {
				t.Fatalf("remove: %+v, host file: %v; want delete %v", remove, statErr, canDelete)
			}
		})
	}
}

func TestPin(t *testing.T) {
	wasm := example(t, "word_count")
	sum := sha256.Sum256(wasm)
	good := hex.EncodeToString(sum[:])
	rt := testRuntime(t)
	ctx := context.Background()

	for _, pin := range []string{good, strings.ToUpper(good)} {
		tool, err := wasmtools.Load(ctx, rt, wasm, wasmtools.Grant{SHA256: pin})
		if err != nil {
			t.Fatalf("pin %s: %v", pin, err)
		}
		if tool.SHA256() != good {
			t.Fatalf("SHA256() = %s, want %s", tool.SHA256(), good)
		}
	}

	bad := strings.Repeat("0", 64)
	m := wasmtools.Manifest{Name: "wc", Description: "d"}
	for name, load := range map[string]func() (*wasmtools.Tool, error){
		"Load": func() (*wasmtools.Tool, error) { return wasmtools.Load(ctx, rt, wasm, wasmtools.Grant{SHA256: bad}) },
		"LoadWithManifest": func() (*wasmtools.Tool, error) {
			return wasmtools.LoadWithManifest(ctx, rt, wasm, m, wasmtools.Grant{SHA256: bad})
		},
		"truncated pin": func() (*wasmtools.Tool, error) {
			return wasmtools.Load(ctx, rt, wasm, wasmtools.Grant{SHA256: good[:63]})
		},
		"one byte changed": func() (*wasmtools.Tool, error) {
			w := bytes.Clone(wasm)
			w[len(w)-1] ^= 1
			return wasmtools.Load(ctx, rt, w, wasmtools.Grant{SHA256: good})
		},
	} {
		tool, err := load()
		if !errors.Is(err, wasmtools.ErrIntegrity) || !strings.Contains(err.Error(), "integrity mismatch") || tool != nil {
			t.Errorf("%s: got %v, %v; want an integrity mismatch", name, tool, err)
		}
	}
}

// withCustomSection appends a custom section to a module.
func withCustomSection(wasm []byte, name string, body []byte) []byte {
	return wasmbin.AppendCustomSection(bytes.Clone(wasm), name, body)
}

func TestLoadManifestErrors(t *testing.T) {
	rt := testRuntime(t)
	ctx := context.Background()
	sum := example(t, "sum_c")
	bare := testguest.WAT(t, "testdata/guests/badsig.wat") // has no manifest

	_, err := wasmtools.Load(ctx, rt, bare, wasmtools.Grant{})
	if !errors.Is(err, wasmtools.ErrNoManifest) {
		t.Fatalf("no manifest: %v", err)
	}

	bad := map[string]string{
		"unknown field":   `{"name":"x","description":"d","colour":"red"}`,
		"duplicate key":   `{"name":"x","name":"y","description":"d"}`,
		"bad name":        `{"name":"rm -rf","description":"d"}`,
		"bad permission":  `{"name":"x","description":"d","permissions":["root"]}`,
		"schema":          `{"name":"x","description":"d","parameters":{"type":"string"}}`,
		"schema compiles": `{"name":"x","description":"d","parameters":{"type":"object","properties":{"a":{"type":"nonsense"}}}}`,
		"bad output":      `{"name":"x","description":"d","output":"yaml"}`,
		"not JSON":        `{"name":"x"`,
		"empty":           ``,
		"too large":       `{"name":"x","description":"` + strings.Repeat("d", wasmtools.MaxManifestBytes) + `"}`,
	}
	for name, m := range bad {
		_, err := wasmtools.Load(ctx, rt, withCustomSection(sum, "agrun.manifest", []byte(m)), wasmtools.Grant{})
		if !errors.Is(err, wasmtools.ErrInvalidManifest) {
			t.Errorf("%s: %v, want ErrInvalidManifest", name, err)
		}
	}

	// Two manifest sections are ambiguous.
	twice := withCustomSection(sum, "agrun.manifest", []byte(`{"name":"b","description":"d"}`))
	if _, err := wasmtools.Load(ctx, rt, twice, wasmtools.Grant{}); !errors.Is(err, wasmtools.ErrInvalidManifest) {
		t.Errorf("two manifests: %v", err)
	}

	// A manifest from Go is validated too.
	for _, m := range []wasmtools.Manifest{
		{Name: "", Description: "d"},
		{Name: "ok", Description: ""},
		{Name: "ok", Description: "d", Output: "xml"},
		{Name: "ok", Description: "d", Parameters: json.RawMessage(`{"type":"array"}`)},
	} {
		if _, err := wasmtools.LoadWithManifest(ctx, rt, bare, m, wasmtools.Grant{}); !errors.Is(err, wasmtools.ErrInvalidManifest) {
			t.Errorf("LoadWithManifest(%+v): %v, want ErrInvalidManifest", m, err)
		}
	}

	// Not a module at all.
	for _, junk := range [][]byte{nil, []byte("\x00asm"), []byte("#!/bin/sh\nrm -rf /\n")} {
		if _, err := wasmtools.Load(ctx, rt, junk, wasmtools.Grant{}); !errors.Is(err, runtime.ErrCompile) {
			t.Errorf("Load(%q): %v, want runtime.ErrCompile", junk, err)
		}
	}
}

func TestLoadWithManifestBareProgram(t *testing.T) {
	wasm := echoWasm(t)
	args := `{"b":[1,2],"a":"x"}`

	text := loadWith(t, wasm, wasmtools.Manifest{Name: "echo_text", Description: "echo", Output: wasmtools.OutputText}, wasmtools.Grant{})
	out := mustCall(t, text, args)
	var s string
	if err := json.Unmarshal(out, &s); err != nil || s != args {
		t.Fatalf("text result %s (%v), want the JSON string %q", out, err, args)
	}

	js := loadWith(t, wasm, wasmtools.Manifest{Name: "echo_json", Description: "echo"}, wasmtools.Grant{})
	if out := mustCall(t, js, args); string(out) != args {
		t.Fatalf("json result %s, want %s", out, args)
	}
	if got := string(js.Parameters()); got != `{"type":"object","properties":{}}` {
		t.Fatalf("default parameters %s", got)
	}
	if r := newRegistry(t, permission.DefaultConfig(), js).Invoke(context.Background(), "echo_json", nil); r.Err != nil || string(r.Output) != "{}" {
		t.Fatalf("empty arguments: %s, %v", r.Output, r.Err)
	}

	// The manifest from Go is normalized as a parsed one, and not shared.
	given := wasmtools.Manifest{Name: "echo2", Description: "echo", Permissions: perms("read"), Parameters: json.RawMessage(`{ "type": "object" }`)}
	tool := loadWith(t, wasm, given, wasmtools.Grant{})
	given.Permissions[0] = permission.Shell
	given.Parameters[3] = 'X'
	got := tool.Manifest()
	if got.Output != wasmtools.OutputJSON || string(got.Parameters) != `{"type":"object"}` || !reflect.DeepEqual(got.Permissions, perms("read")) {
		t.Fatalf("Manifest() = %+v", got)
	}
	got.Permissions[0] = permission.Shell
	if m := tool.Manifest(); !reflect.DeepEqual(m.Permissions, perms("read")) || !reflect.DeepEqual(tool.Permissions(), perms("read")) {
		t.Fatalf("changing a copy changed the tool: %v", m.Permissions)
	}
	if p := string(tool.Parameters()); p != `{"type":"object"}` {
		t.Fatalf("Parameters() = %s", p)
	}

	// The manifest given replaces the module's own.
	wc := loadWith(t, example(t, "word_count"), wasmtools.Manifest{Name: "count", Description: "renamed", Permissions: perms("read")}, wasmtools.Grant{})
	if wc.Name() != "count" || wc.Description() != "renamed" || !reflect.DeepEqual(wc.Permissions(), perms("read")) {
		t.Fatalf("name %q description %q permissions %v", wc.Name(), wc.Description(), wc.Permissions())
	}
	jsonEqual(t, mustCall(t, wc, `{"text":"a b"}`), `{"words":2,"lines":1,"chars":3,"bytes":3}`)
	if rn := wc.Renamed("other"); rn.Name() != "other" || wc.Name() != "count" {
		t.Fatalf("Renamed: %q, original %q", rn.Name(), wc.Name())
	}
}

func TestExecuteResultMapping(t *testing.T) {
	jsonTool := hostile(t, "mapper", nil, wasmtools.Grant{})
	textTool := loadWith(t, hostileWasm(t), wasmtools.Manifest{Name: "mapper_text", Description: "d", Output: wasmtools.OutputText}, wasmtools.Grant{})
	b64 := base64.StdEncoding.EncodeToString
	longErr := strings.Repeat("e", 10000) + "THE END"

	tests := []struct {
		name string
		tool *wasmtools.Tool
		args map[string]any
		kind registry.Kind // "" for success
		want string        // the message, or the result
		test func(t *testing.T, s string)
	}{
		{name: "error object", tool: jsonTool, args: map[string]any{"stdout": `{"error":"city not found"}`, "stderr": "noise", "exit": 3},
			kind: registry.ExecutionFailed, want: "city not found"},
		{name: "stderr tail", tool: jsonTool, args: map[string]any{"stdout": "partial", "stderr": "line one\nfatal: disk on fire\n", "exit": 2},
			kind: registry.ExecutionFailed, want: "line one\nfatal: disk on fire"},
		{name: "error object with empty message", tool: jsonTool, args: map[string]any{"stdout": `{"error":""}`, "stderr": "from stderr", "exit": 1},
			kind: registry.ExecutionFailed, want: "from stderr"},
		{name: "silent failure", tool: jsonTool, args: map[string]any{"exit": 7},
			kind: registry.ExecutionFailed, want: "the tool exited with code 7"},
		{name: "failure in text mode", tool: textTool, args: map[string]any{"stdout": `{"error":"bad"}`, "exit": 1},
			kind: registry.ExecutionFailed, want: "bad"},
		{name: "long stderr keeps the tail", tool: jsonTool, args: map[string]any{"stderr": longErr, "exit": 1},
			kind: registry.ExecutionFailed, test: func(t *testing.T, s string) {
				if !strings.HasSuffix(s, "THE END") || len(s) > 4<<10+8 {
					t.Fatalf("message of %d bytes ending %q", len(s), s[max(0, len(s)-20):])
				}
			}},
		{name: "invalid bytes in a long stderr keep the tail", tool: jsonTool, args: map[string]any{"exit": 1, "stderr_b64": b64([]byte(strings.Repeat("\xff", 5000) + "THE END"))},
			kind: registry.ExecutionFailed, test: func(t *testing.T, s string) {
				if !utf8.ValidString(s) || !strings.HasSuffix(s, "\ufffdTHE END") || len(s) > 4<<10+3 {
					t.Fatalf("message of %d bytes ending %q", len(s), s[max(0, len(s)-20):])
				}
			}},
		{name: "escape sequences in the message", tool: jsonTool, args: map[string]any{"stdout": `{"error":"\u001b[2J\u001b]0;pwned\u0007gone\r"}`, "exit": 1},
			kind: registry.ExecutionFailed, test: func(t *testing.T, s string) {
				if strings.ContainsAny(s, "\x1b\x07\r") || !strings.Contains(s, "gone") {
					t.Fatalf("message %q", s)
				}
			}},
		{name: "not JSON", tool: jsonTool, args: map[string]any{"stdout": "hello"},
			kind: registry.ExecutionFailed, test: func(t *testing.T, s string) {
				if !strings.Contains(s, "not valid JSON") {
					t.Fatalf("message %q", s)
				}
			}},
		{name: "two JSON values", tool: jsonTool, args: map[string]any{"stdout": `{"a":1} {"b":2}`},
			kind: registry.ExecutionFailed, test: func(t *testing.T, s string) {
				if !strings.Contains(s, "not valid JSON") {
					t.Fatalf("message %q", s)
				}
			}},
		{name: "empty stdout", tool: jsonTool, args: map[string]any{"stderr": "all fine"},
			kind: registry.ExecutionFailed, want: "the tool wrote no result to stdout"},
		{name: "whitespace stdout", tool: jsonTool, args: map[string]any{"stdout": " \n\t"},
			kind: registry.ExecutionFailed, want: "the tool wrote no result to stdout"},
		{name: "json result", tool: jsonTool, args: map[string]any{"stdout": "\n [1, 2.50, \"x\"] \n"}, want: `[1, 2.50, "x"]`},
		{name: "json result with invalid UTF-8", tool: jsonTool, args: map[string]any{"stdout_b64": b64([]byte("{\"s\":\"a\xffb\xc3\"}"))},
			test: func(t *testing.T, s string) {
				if !utf8.ValidString(s) {
					t.Fatalf("result %q is not UTF-8", s)
				}
				jsonEqual(t, json.RawMessage(s), `{"s":"a\ufffdb\ufffd"}`)
			}},
		{name: "text result", tool: textTool, args: map[string]any{"stdout": "line 1\nline\t2\n"}, want: `"line 1\nline\t2\n"`},
		{name: "empty text result", tool: textTool, args: map[string]any{}, want: `""`},
		{name: "text with escapes and invalid UTF-8", tool: textTool, args: map[string]any{"stdout_b64": b64([]byte("\x1b[31mred\x1b[0m \xff\xfe ok\x00\xc2\x9b é"))},
			test: func(t *testing.T, s string) {
				var str string
				if !utf8.ValidString(s) || json.Unmarshal([]byte(s), &str) != nil {
					t.Fatalf("result %q is not a UTF-8 JSON string", s)
				}
				if strings.ContainsAny(str, "\x1b\x00\u009b") || !strings.Contains(str, "red") || !strings.Contains(str, "\ufffd") || !strings.HasSuffix(str, " ok é") {
					t.Fatalf("text %q", str)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := map[string]any{"op": "emit"}
			for k, v := range tt.args {
				args[k] = v
			}
			out, err := call(t, tt.tool, args)
			var got string
			if tt.kind == "" {
				if err != nil {
					t.Fatalf("error %v", err)
				}
				got = string(out)
			} else {
				if out != nil {
					t.Fatalf("result %s with an error", out)
				}
				e := require.Kind(t, err, tt.kind)
				if e.Tool != tt.tool.Name() {
					t.Fatalf("error names tool %q", e.Tool)
				}
				got = e.Message()
			}
			if tt.test != nil {
				tt.test(t, got)
			} else if got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestExecuteLimits(t *testing.T) {
	limited := func(name string, l runtime.Limits) *wasmtools.Tool {
		return hostile(t, name, nil, wasmtools.Grant{Limits: l})
	}
	tests := []struct {
		name string
		tool *wasmtools.Tool
		args string
		kind registry.Kind
	}{
		{"timeout", limited("spinner", runtime.Limits{Timeout: 300 * time.Millisecond}), `{"op":"spin"}`, registry.Timeout},
		{"memory", limited("hog", runtime.Limits{MemoryBytes: 32 << 20}), `{"op":"alloc"}`, registry.MemoryLimit},
		{"stdout flood", limited("flood", runtime.Limits{MaxStdout: 64 << 10}), `{"op":"flood"}`, registry.OutputLimit},
		{"stderr flood", limited("loud", runtime.Limits{MaxStderr: 1 << 10}), `{"op":"emit","stderr":"` + strings.Repeat("e", 2<<10) + `"}`, registry.OutputLimit},
		{"input too large", limited("small", runtime.Limits{MaxStdin: 64}), `{"op":"emit","stdout":"` + strings.Repeat("x", 100) + `"}`, registry.InvalidArguments},
	}
	wc := load(t, example(t, "word_count"), wasmtools.Grant{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRegistry(t, permission.DefaultConfig(), tt.tool, wc)
			inv := r.Invoke(context.Background(), tt.tool.Name(), json.RawMessage(tt.args))
			require.Kind(t, inv.Err, tt.kind)
			if inv.Output != nil {
				t.Fatalf("output %s", inv.Output)
			}
			// The host is fine: the next call to another tool succeeds.
			if inv := r.Invoke(context.Background(), "word_count", json.RawMessage(`{"text":"still here"}`)); inv.Err != nil {
				t.Fatalf("word_count after %s: %v", tt.name, inv.Err)
			}
		})
	}
}

func TestExecuteCancelled(t *testing.T) {
	tool := hostile(t, "spinner", nil, wasmtools.Grant{})
	token := "spinning " + t.Name()
	started := guestLogs.waitLog(token)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	_, err := tool.Execute(ctx, rawJSON(t, map[string]string{"op": "spin", "log": token}))
	require.Kind(t, err, registry.Cancelled)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("%v does not wrap context.Canceled", err)
	}

	// A context cancelled before the call: nothing runs.
	_, err = tool.Execute(ctx, json.RawMessage(`{"op":"emit","stdout":"{}"}`))
	require.Kind(t, err, registry.Cancelled)

	// The caller's deadline is a timeout.
	dctx, dcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer dcancel()
	_, err = tool.Execute(dctx, json.RawMessage(`{"op":"spin"}`))
	require.Kind(t, err, registry.Timeout)
}

func TestExecuteTrapAndClose(t *testing.T) {
	trap := loadWith(t, testguest.WAT(t, "testdata/guests/trap.wat"), wasmtools.Manifest{Name: "trap", Description: "d"}, wasmtools.Grant{})
	_, err := call(t, trap, `{}`)
	require.Kind(t, err, registry.ExecutionFailed)
	if !errors.Is(err, runtime.ErrTrap) || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("trap: %v", err)
	}

	// A closed tool refuses calls; other tools on the same module go on.
	a := load(t, example(t, "sum_c"), wasmtools.Grant{})
	b := load(t, example(t, "sum_c"), wasmtools.Grant{})
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err = call(t, a, `{"numbers":[1]}`)
	require.Kind(t, err, registry.Other)
	if !errors.Is(err, runtime.ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
	jsonEqual(t, mustCall(t, b, `{"numbers":[1]}`), `{"sum":1,"count":1}`)
}

func TestGrantErrors(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "file.txt", "x")
	wasm := example(t, "read_file")
	bad := map[string]wasmtools.Grant{
		"host with scheme":   {AllowedHosts: []string{"https://api.open-meteo.com"}},
		"host with path":     {AllowedHosts: []string{"api.open-meteo.com/v1"}},
		"host with user":     {AllowedHosts: []string{"me@api.open-meteo.com"}},
		"empty host":         {AllowedHosts: []string{""}},
		"relative guest":     {Mounts: []wasmtools.Mount{{Host: dir, Guest: "docs"}}},
		"empty guest":        {Mounts: []wasmtools.Mount{{Host: dir}}},
		"guest twice":        {Mounts: []wasmtools.Mount{{Host: dir, Guest: "/docs"}, {Host: dir, Guest: "/docs/"}}},
		"missing host dir":   {Mounts: []wasmtools.Mount{{Host: filepath.Join(dir, "nope"), Guest: "/docs"}}},
		"host is not a dir":  {Mounts: []wasmtools.Mount{{Host: file, Guest: "/docs"}}},
		"bad even if unused": {Mounts: []wasmtools.Mount{{Host: dir, Guest: "rel"}}, AllowedHosts: []string{"x.example"}},
	}
	for name, g := range bad {
		if _, err := wasmtools.Load(context.Background(), testRuntime(t), wasm, g); !errors.Is(err, wasmtools.ErrInvalidGrant) {
			t.Errorf("%s: %v, want ErrInvalidGrant", name, err)
		}
	}
	if _, err := wasmtools.Load(context.Background(), testRuntime(t), wasm, bad["missing host dir"]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing host dir: %v does not wrap os.ErrNotExist", err)
	}

	// A guest path with a trailing slash is cleaned, not refused at every call.
	tool := load(t, wasm, wasmtools.Grant{Mounts: []wasmtools.Mount{{Host: dir, Guest: "/docs/"}}})
	if m := tool.Capabilities().Mounts; len(m) != 1 || m[0].Guest != "/docs" {
		t.Fatalf("mounts %+v", m)
	}
	jsonEqual(t, mustCall(t, tool, `{"path":"/docs/file.txt"}`), `{"path":"/docs/file.txt","size":1,"content":"x","encoding":"utf-8"}`)
}

func TestExecuteConcurrent(t *testing.T) {
	wc := load(t, example(t, "word_count"), wasmtools.Grant{})
	r := newRegistry(t, permission.DefaultConfig(), wc)
	var calls []registry.Call
	for i := range 8 {
		calls = append(calls, registry.Call{Name: "word_count", Args: rawJSON(t, map[string]string{"text": strings.Repeat("w ", i)})})
	}
	for i, inv := range r.InvokeAll(context.Background(), calls) {
		if inv.Err != nil {
			t.Fatalf("call %d: %v", i, inv.Err)
		}
		jsonEqual(t, inv.Output, fmt.Sprintf(`{"words":%d,"lines":%d,"chars":%d,"bytes":%d}`, i, min(i, 1), 2*i, 2*i))
	}
}

// BenchmarkExecute measures one call, fresh instance included, of a Go
// tool and of the C tool.
func BenchmarkExecute(b *testing.B) {
	for _, bm := range []struct{ name, args string }{
		{"word_count", `{"text":"the quick brown fox jumps over the lazy dog"}`},
		// The peer bench's 200-word row (internal/cmd/bench, wcText).
		{"word_count_880B", `{"text":"` + strings.Repeat(`the quick brown fox jumps over the lazy dog\n`, 20) + `"}`},
		{"sum_c", `{"numbers":[1,2,3,4,5]}`},
	} {
		b.Run(bm.name, func(b *testing.B) {
			tool := load(b, example(b, strings.TrimSuffix(bm.name, "_880B")), wasmtools.Grant{})
			ctx := context.Background()
			for b.Loop() {
				if _, err := tool.Execute(ctx, json.RawMessage(bm.args)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A memory grant below the module's initial memory would fail every call:
// Load refuses it, naming both sizes; the smallest grant that fits loads.
func TestLoadRefusesMemoryBelowInitial(t *testing.T) {
	rt := testRuntime(t)
	wasm := example(t, "word_count")
	_, err := wasmtools.Load(context.Background(), rt, wasm, wasmtools.Grant{Limits: runtime.Limits{MemoryBytes: 64 << 10}})
	if !errors.Is(err, wasmtools.ErrInvalidGrant) || !strings.Contains(err.Error(), "the memory limit 64KiB is below the module's initial memory") {
		t.Fatalf("err = %v", err)
	}
	tool := load(t, wasm, wasmtools.Grant{Limits: runtime.Limits{MemoryBytes: 64 << 20}})
	if out, err := tool.Execute(context.Background(), json.RawMessage(`{"text":"a b"}`)); err != nil || !strings.Contains(string(out), `"words":2`) {
		t.Fatalf("%s %v", out, err)
	}
}

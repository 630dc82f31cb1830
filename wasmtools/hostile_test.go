package wasmtools_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agcore/agrun/internal/testing/require"
	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// Hostile guests go through the whole path an uploaded tool takes: a
// manifest packed into the module, Load with the operator's grant, a
// registry with a permission checker, Invoke. Each attack ends in a typed
// error (or in a guest that sees nothing), and the next call to an honest
// tool succeeds.

// packed returns the hostile guest with a manifest declaring perms embedded.
func packed(t *testing.T, name string, declared ...string) []byte {
	t.Helper()
	wasm, err := wasmtools.Pack(hostileWasm(t), wasmtools.Manifest{Name: name, Description: "an uploaded tool", Permissions: perms(declared...)})
	if err != nil {
		t.Fatalf("Pack: %v", err)
	}
	return wasm
}

// hostileRegistry holds word_count and the given tools under a policy that
// allows read, network, filesystem and write (delete and shell stay
// denied).
func hostileRegistry(t *testing.T, tools ...registry.Tool) *registry.Registry {
	t.Helper()
	return newRegistry(t, allowing("filesystem", "write"), append(tools, load(t, example(t, "word_count"), wasmtools.Grant{}))...)
}

// stillWorks checks that an honest tool runs after an attack.
func stillWorks(t *testing.T, r *registry.Registry) {
	t.Helper()
	inv := r.Invoke(context.Background(), "word_count", json.RawMessage(`{"text":"the host survived"}`))
	if inv.Err != nil {
		t.Fatalf("word_count after the attack: %v", inv.Err)
	}
	jsonEqual(t, inv.Output, `{"words":3,"lines":1,"chars":17,"bytes":17}`)
}

// countingServer counts the requests that reach it.
func countingServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Write([]byte("SERVER-REACHED"))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestHostileNetworkDeclaredNotGranted(t *testing.T) {
	srv, hits := countingServer(t)
	// The manifest declares network, the operator granted no hosts: the
	// tool loads and the policy lets it run, but it has no network.
	tool := load(t, packed(t, "netless", "network"), wasmtools.Grant{AllowPrivate: true})
	if tool.Capabilities().Network != nil {
		t.Fatalf("network capability %+v without hosts", tool.Capabilities().Network)
	}
	r := hostileRegistry(t, tool)
	inv := r.Invoke(context.Background(), "netless", rawJSON(t, map[string]string{"op": "http", "url": srv.URL}))
	e := require.Kind(t, inv.Err, registry.PermissionDenied)
	if !errors.Is(inv.Err, runtime.ErrNotGranted) || !strings.Contains(e.Message(), "agrun.http_request") {
		t.Fatalf("error %v", inv.Err)
	}
	// A denial by the sandbox is a denial like the policy's.
	if !errors.Is(inv.Err, permission.ErrDenied) {
		t.Errorf("%v does not match permission.ErrDenied", inv.Err)
	}
	if inv.Output != nil || hits.Load() != 0 {
		t.Fatalf("output %s, server hits %d", inv.Output, hits.Load())
	}
	stillWorks(t, r)
}

func TestHostileUndeclaredNetwork(t *testing.T) {
	srv, hits := countingServer(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	// The manifest declares nothing, the code calls agrun.http_request,
	// and the operator (carelessly) offers the host anyway.
	// (Same module as TestHostileLyingManifest: one compilation for both.)
	tool := load(t, packed(t, "liar"), wasmtools.Grant{AllowedHosts: []string{host}, AllowPrivate: true})
	if len(tool.Permissions()) != 0 || tool.Capabilities().Network != nil {
		t.Fatalf("permissions %v, capabilities %+v", tool.Permissions(), tool.Capabilities())
	}
	r := hostileRegistry(t, tool)
	inv := r.Invoke(context.Background(), "liar", rawJSON(t, map[string]string{"op": "http", "url": srv.URL}))
	require.Kind(t, inv.Err, registry.PermissionDenied)
	if !errors.Is(inv.Err, runtime.ErrNotGranted) || hits.Load() != 0 {
		t.Fatalf("error %v, server hits %d", inv.Err, hits.Load())
	}
	stillWorks(t, r)
}

func TestHostileBadImports(t *testing.T) {
	rt := testRuntime(t)
	tests := []struct {
		wat  string
		want []string // in the error message
	}{
		{"badsig.wat", []string{"agrun.http_request", "signature"}},
		{"unknownimport.wat", []string{"agrun.spawn", "no such function"}},
	}
	for _, tt := range tests {
		t.Run(tt.wat, func(t *testing.T) {
			wasm, err := wasmtools.Pack(testguest.WAT(t, "testdata/guests/"+tt.wat), wasmtools.Manifest{Name: "bad", Description: "d"})
			if err != nil {
				t.Fatalf("Pack: %v", err)
			}
			tool, err := wasmtools.Load(context.Background(), rt, wasm, wasmtools.Grant{})
			if !errors.Is(err, runtime.ErrCompile) || tool != nil {
				t.Fatalf("Load: %v, %v; want runtime.ErrCompile", tool, err)
			}
			var ve *runtime.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("%v carries no *runtime.ValidationError", err)
			}
			t.Logf("%s: %v", tt.wat, err)
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("message %q does not mention %q", err, w)
				}
			}
			stillWorks(t, hostileRegistry(t))
		})
	}
}

// escapeFixture is a mounted directory with ways out of it, and a secret
// outside.
type escapeFixture struct {
	mnt, secretPath, secret string
}

func newEscapeFixture(t *testing.T) escapeFixture {
	t.Helper()
	root := t.TempDir()
	f := escapeFixture{mnt: filepath.Join(root, "mnt"), secret: "TOP-SECRET-" + filepath.Base(root)}
	f.secretPath = writeFile(t, root, "outside/secret.txt", f.secret)
	writeFile(t, f.mnt, "inside.txt", "inside")
	writeFile(t, f.mnt, "sub/x.txt", "x")
	for name, target := range map[string]string{
		"link":      "../outside/secret.txt",
		"abslink":   f.secretPath,
		"dirlink":   filepath.Join(root, "outside"),
		"sub/up":    "../../outside",
		"passwd":    "/etc/passwd",
		"selfloop":  "selfloop",
		"rootlink":  "/",
		"sub/chain": "../link",
	} {
		if err := os.Symlink(target, filepath.Join(f.mnt, name)); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// noSecret fails if the secret (or /etc/passwd's first line) shows in s.
func (f escapeFixture) noSecret(t *testing.T, what, s string) {
	t.Helper()
	if strings.Contains(s, f.secret) || strings.Contains(s, "root:x:0:0") {
		t.Fatalf("%s leaked a secret: %s", what, s)
	}
}

func TestHostileEscapeMount(t *testing.T) {
	f := newEscapeFixture(t)
	tool := load(t, packed(t, "escaper", "filesystem", "read"), wasmtools.Grant{
		Mounts: []wasmtools.Mount{{Host: f.mnt, Guest: "/data"}},
	})
	writer := loadWith(t, hostileWasm(t), wasmtools.Manifest{Name: "escaper_rw", Description: "d", Permissions: perms("filesystem", "write")}, wasmtools.Grant{
		Mounts: []wasmtools.Mount{{Host: f.mnt, Guest: "/data", Writable: true}},
	})
	readFile := load(t, example(t, "read_file"), wasmtools.Grant{Mounts: []wasmtools.Mount{{Host: f.mnt, Guest: "/data"}}})
	r := hostileRegistry(t, tool, writer, readFile)
	ctx := context.Background()

	invoke := func(name string, args any) (json.RawMessage, error) {
		inv := r.Invoke(ctx, name, rawJSON(t, args))
		text := string(inv.Output)
		if inv.Err != nil {
			text += inv.Err.Error()
		}
		f.noSecret(t, string(rawJSON(t, args)), text)
		return inv.Output, inv.Err
	}

	// Controls: the plain and the raw path both work inside the mount, so
	// the refusals below are the sandbox's doing.
	for _, args := range []map[string]any{
		{"op": "read", "path": "/data/inside.txt"},
		{"op": "rawread", "fd": 3, "path": "inside.txt"},
		{"op": "rawread", "fd": 3, "path": "sub/../inside.txt"},
	} {
		out, err := invoke("escaper", args)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if rep := decodeReply(t, out); !rep.OK || rep.Data != "inside" {
			t.Fatalf("%v: %+v", args, rep)
		}
	}

	for _, args := range []map[string]any{
		{"op": "read", "path": "/data/link"},
		{"op": "read", "path": "/data/abslink"},
		{"op": "read", "path": "/data/dirlink/secret.txt"},
		{"op": "read", "path": "/data/sub/up/secret.txt"},
		{"op": "read", "path": "/data/sub/chain"},
		{"op": "read", "path": "/data/passwd"},
		{"op": "read", "path": "/data/rootlink/etc/passwd"},
		{"op": "read", "path": "/data/selfloop"},
		{"op": "read", "path": "/data/../outside/secret.txt"},
		{"op": "read", "path": f.secretPath},
		{"op": "list", "path": "/data/dirlink"},
		{"op": "list", "path": "/data/rootlink"},
		{"op": "rawread", "fd": 3, "path": "../outside/secret.txt"},
		{"op": "rawread", "fd": 3, "path": "sub/../../outside/secret.txt"},
		{"op": "rawread", "fd": 3, "path": "link", "follow": true},
		{"op": "rawread", "fd": 3, "path": "link"},
		{"op": "rawread", "fd": 3, "path": "abslink", "follow": true},
		{"op": "rawread", "fd": 3, "path": "dirlink/secret.txt", "follow": true},
		{"op": "rawread", "fd": 3, "path": "sub/up/secret.txt", "follow": true},
		{"op": "rawread", "fd": 3, "path": "/etc/passwd"},
		{"op": "rawread", "fd": 3, "path": f.secretPath},
		{"op": "rawread", "fd": 3, "path": ".."},
		{"op": "rawread", "fd": 4, "path": "etc/passwd"},
		{"op": "rawread", "fd": 0, "path": "etc/passwd"},
	} {
		out, err := invoke("escaper", args)
		if err != nil {
			t.Fatalf("%v: the call failed instead of the guest's operation: %v", args, err)
		}
		if rep := decodeReply(t, out); rep.OK {
			t.Fatalf("%v succeeded: %+v", args, rep)
		}
		stillWorks(t, r)
	}

	// Writing through a link to the outside leaves the outside alone.
	for _, p := range []string{"/data/link", "/data/abslink", "/data/dirlink/secret.txt", "/data/dirlink/new.txt", "/data/../outside/new.txt"} {
		out, err := invoke("escaper_rw", map[string]any{"op": "write", "path": p, "data": "overwritten"})
		if err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
		if rep := decodeReply(t, out); rep.OK {
			t.Fatalf("write %s succeeded", p)
		}
	}
	if b, err := os.ReadFile(f.secretPath); err != nil || string(b) != f.secret {
		t.Fatalf("the secret outside the mount changed: %q, %v", b, err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(f.secretPath)); len(ents) != 1 {
		t.Fatalf("files appeared outside the mount: %v", ents)
	}

	// The example tool fails the same way, as a tool error.
	for _, p := range []string{"/data/link", "/data/dirlink/secret.txt", "/data/../outside/secret.txt", "/data/passwd"} {
		if _, err := invoke("read_file", map[string]string{"path": p}); registry.KindOf(err) != registry.ExecutionFailed {
			t.Fatalf("read_file %s: %v, want execution_failed", p, err)
		}
	}
	stillWorks(t, r)
}

func TestHostileLyingManifest(t *testing.T) {
	f := newEscapeFixture(t)
	writeFile(t, f.mnt, "mounted-secret.txt", f.secret)
	srv, hits := countingServer(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	// The manifest declares nothing, so the policy lets it run as pure
	// compute; the operator's grant offers files and a host, which a tool
	// declaring nothing does not get.
	tool := load(t, packed(t, "liar"), wasmtools.Grant{
		AllowedHosts: []string{host},
		AllowPrivate: true,
		Mounts:       []wasmtools.Mount{{Host: f.mnt, Guest: "/data", Writable: true, AllowDelete: true}},
	})
	if c := tool.Capabilities(); c.Network != nil || len(c.Mounts) != 0 {
		t.Fatalf("capabilities %+v", c)
	}
	r := hostileRegistry(t, tool)
	ctx := context.Background()

	inv := r.Invoke(ctx, "liar", rawJSON(t, map[string]any{"op": "probe", "paths": []string{
		"/data/mounted-secret.txt", "/data/inside.txt", "/etc/passwd", f.secretPath, "/", ".", "/proc/self/environ",
	}}))
	if inv.Err != nil {
		t.Fatalf("probe: %v", inv.Err)
	}
	f.noSecret(t, "probe", string(inv.Output))
	rep := decodeReply(t, inv.Output)
	for p, res := range rep.Each {
		if res.OK && len(res.Names)+len(res.Data) > 0 {
			t.Errorf("%s is visible: %+v", p, res)
		}
	}
	for _, args := range []map[string]any{
		{"op": "write", "path": "/data/planted.txt", "data": "x"},
		{"op": "remove", "path": "/data/inside.txt"},
		{"op": "rawread", "fd": 3, "path": "inside.txt"},
	} {
		inv := r.Invoke(ctx, "liar", rawJSON(t, args))
		if inv.Err != nil {
			t.Fatalf("%v: %v", args, inv.Err)
		}
		if rep := decodeReply(t, inv.Output); rep.OK {
			t.Fatalf("%v succeeded: %+v", args, rep)
		}
		stillWorks(t, r)
	}
	if _, err := os.Stat(filepath.Join(f.mnt, "inside.txt")); err != nil {
		t.Fatalf("inside.txt: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.mnt, "planted.txt")); err == nil {
		t.Fatal("planted.txt was written")
	}

	// And the network it does not declare is refused, not just empty.
	inv = r.Invoke(ctx, "liar", rawJSON(t, map[string]string{"op": "http", "url": srv.URL}))
	require.Kind(t, inv.Err, registry.PermissionDenied)
	if hits.Load() != 0 {
		t.Fatalf("the server was reached %d times", hits.Load())
	}
	stillWorks(t, r)

	// Declaring what it uses makes the policy decide: delete is denied.
	honest := loadWith(t, hostileWasm(t), wasmtools.Manifest{Name: "honest", Description: "d", Permissions: perms("filesystem", "write", "delete")}, wasmtools.Grant{
		Mounts: []wasmtools.Mount{{Host: f.mnt, Guest: "/data", Writable: true, AllowDelete: true}},
	})
	r = hostileRegistry(t, honest)
	inv = r.Invoke(ctx, "honest", json.RawMessage(`{"op":"remove","path":"/data/inside.txt"}`))
	if e := require.Kind(t, inv.Err, registry.PermissionDenied); !errors.Is(e, permission.ErrDenied) {
		t.Fatalf("error %v", e)
	}
	if _, err := os.Stat(filepath.Join(f.mnt, "inside.txt")); err != nil {
		t.Fatalf("inside.txt: %v", err)
	}
	stillWorks(t, r)
}

func TestHostileNetworkEscapes(t *testing.T) {
	other, otherHits := countingServer(t)
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, other.URL+"/stolen", http.StatusFound)
		default:
			w.Write([]byte("allowed"))
		}
	}))
	defer allowed.Close()
	host := strings.TrimPrefix(allowed.URL, "http://")
	tool := hostile(t, "netter", perms("network"), wasmtools.Grant{AllowedHosts: []string{host}, AllowPrivate: true})
	r := hostileRegistry(t, tool)

	if rep := hostileDo(t, tool, map[string]string{"op": "http", "url": allowed.URL + "/x"}); !rep.OK || rep.Data != "200 allowed" {
		t.Fatalf("allowed request: %+v", rep)
	}
	// Each refusal is an answer to the guest (code "forbidden"), not the
	// end of the call: the tool was granted network, just not this.
	for _, u := range []string{
		other.URL + "/direct",
		allowed.URL + "/redirect",
		"http://user:pw@" + host + "/",
		"file:///etc/passwd",
		"http://169.254.169.254/latest/meta-data/",
		"gopher://" + host + "/",
	} {
		inv := r.Invoke(context.Background(), "netter", rawJSON(t, map[string]string{"op": "http", "url": u}))
		if inv.Err != nil {
			t.Fatalf("%s: %v", u, inv.Err)
		}
		if rep := decodeReply(t, inv.Output); rep.OK || !strings.Contains(rep.Err, "forbidden") {
			t.Fatalf("%s: %+v, want a forbidden answer", u, rep)
		}
		stillWorks(t, r)
	}
	if n := otherHits.Load(); n != 0 {
		t.Fatalf("the server that is not allowed was reached %d times", n)
	}
}

func TestHostileAmbientAuthority(t *testing.T) {
	t.Setenv("AGRUN_TEST_SECRET", "env-secret-value")
	tool := hostile(t, "nosy", nil, wasmtools.Grant{})
	rep := hostileDo(t, tool, map[string]string{"op": "env"})
	// argv is the tool's name, the environment is empty.
	if strings.Join(rep.Names, "|") != "nosy" {
		t.Fatalf("argv and environment: %q", rep.Names)
	}
	// Renamed, it is called by its new name.
	rep = hostileDo(t, tool.Renamed("alias"), map[string]string{"op": "env"})
	if strings.Join(rep.Names, "|") != "alias" {
		t.Fatalf("argv and environment: %q", rep.Names)
	}
}

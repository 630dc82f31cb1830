package sandboxfs

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tetratelabs/wazero"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/agcore/agrun/internal/testing/leak"
	"github.com/agcore/agrun/internal/testing/testguest"
)

// The fsops guest is compiled once per test binary; every test instantiates
// it afresh with its own mount.
var (
	guestOnce sync.Once
	guestRT   wazero.Runtime
	guestMod  wazero.CompiledModule
	guestErr  error
)

func compiledGuest(t *testing.T) (wazero.Runtime, wazero.CompiledModule) {
	t.Helper()
	guestOnce.Do(func() {
		ctx := context.Background()
		wasm := testguest.Build(t, "testdata/guests/fsops")
		cache, err := wazero.NewCompilationCacheWithDir(testguest.CompilationCacheDir(t))
		if err != nil {
			guestErr = err
			return
		}
		guestRT = wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(cache))
		wasi_snapshot_preview1.MustInstantiate(ctx, guestRT)
		guestMod, guestErr = guestRT.CompileModule(ctx, wasm)
	})
	if guestErr != nil {
		t.Fatalf("compiling guest: %v", guestErr)
	}
	return guestRT, guestMod
}

// cmd and reply mirror the guest's wire format (testdata/guests/fsops).
type cmd struct {
	Op   string `json:"op"`
	Path string `json:"path,omitempty"`
	To   string `json:"to,omitempty"`
	Data string `json:"data,omitempty"`
	N    int64  `json:"n,omitempty"`
}

type reply struct {
	OK    bool     `json:"ok"`
	Errno string   `json:"errno"`
	Err   string   `json:"err"`
	Data  string   `json:"data"`
	Names []string `json:"names"`
	N     int64    `json:"n"`
}

// guest is a running fsops instance driven one command at a time.
type guest struct {
	t      *testing.T
	in     *io.PipeWriter
	dec    *json.Decoder
	done   chan error
	stderr *bytes.Buffer
}

// startGuest runs the fsops guest with fsys mounted at /data. The module is
// closed (and with it every file the guest opened) when the guest exits,
// which stop causes; a test cleanup stops it if the test did not.
func startGuest(t *testing.T, fsys experimentalsys.FS) *guest {
	t.Helper()
	return startGuestFS(t, wazero.NewFSConfig().(sysfs.FSConfig).WithSysFSMount(fsys, "/data"))
}

// startGuestFS is startGuest with any wazero file system configuration.
func startGuestFS(t *testing.T, fsCfg wazero.FSConfig) *guest {
	t.Helper()
	rt, mod := compiledGuest(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	g := &guest{t: t, in: inW, dec: json.NewDecoder(outR), done: make(chan error, 1), stderr: new(bytes.Buffer)}
	cfg := wazero.NewModuleConfig().WithName("").WithArgs("fsops").
		WithStdin(inR).WithStdout(outW).WithStderr(g.stderr).WithFSConfig(fsCfg)
	go func() {
		m, err := rt.InstantiateModule(context.Background(), mod, cfg)
		if m != nil {
			m.Close(context.Background())
		}
		inR.CloseWithError(io.ErrClosedPipe) // unblock a test still writing
		outW.Close()
		g.done <- err
	}()
	t.Cleanup(func() { g.stop() })
	return g
}

// do sends one command and returns the guest's answer.
func (g *guest) do(c cmd) reply {
	g.t.Helper()
	b, _ := json.Marshal(c)
	if _, err := g.in.Write(append(b, '\n')); err != nil {
		g.t.Fatalf("guest gone before %+v: %v; stderr: %s", c, err, g.stderr)
	}
	var r reply
	if err := g.dec.Decode(&r); err != nil {
		g.t.Fatalf("no reply to %+v: %v; stderr: %s", c, err, g.stderr)
	}
	return r
}

// stop ends the guest (end of stdin) and waits until its module is closed.
// It is idempotent.
func (g *guest) stop() {
	if g.done == nil {
		return
	}
	g.in.Close()
	err := <-g.done
	g.done = nil
	if err != nil && !strings.Contains(err.Error(), "exit_code(0)") {
		g.t.Errorf("guest ended with %v; stderr: %s", err, g.stderr)
	}
}

// mustOK asserts a command succeeds.
func (g *guest) mustOK(c cmd) reply {
	g.t.Helper()
	r := g.do(c)
	if !r.OK {
		g.t.Fatalf("%+v: want success, got %s (%s)", c, r.Errno, r.Err)
	}
	return r
}

// mustFail asserts a command fails with errno (any errno if "").
func (g *guest) mustFail(c cmd, errno string) reply {
	g.t.Helper()
	r := g.do(c)
	if r.OK {
		g.t.Errorf("%+v: want %s, succeeded (data %q)", c, or(errno, "failure"), r.Data)
	} else if errno != "" && r.Errno != errno {
		g.t.Errorf("%+v: want %s, got %s (%s)", c, errno, r.Errno, r.Err)
	}
	return r
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// tree is the standard fixture: top/outside holds secrets, top/mount is
// mounted, and the mount holds symlinks of every kind pointing out.
type tree struct {
	top, mount, outside string
}

const secret = "OUTSIDE-SECRET"

func newTree(t *testing.T) tree {
	t.Helper()
	top := t.TempDir()
	tr := tree{top: top, mount: filepath.Join(top, "mount"), outside: filepath.Join(top, "outside")}
	files := map[string]string{
		"outside/secret.txt":      secret,
		"outside/dir/inner.txt":   secret,
		"outside/emptydir/.keep":  "",
		"mount/hello.txt":         "hello",
		"mount/other.txt":         "other",
		"mount/sub/file.txt":      "sub",
		"mount/sub/deeper/x.txt":  "x",
		"mount/d/secret.txt":      "INSIDE",
		"mount/victim/victim.txt": "victim",
	}
	for p, data := range files {
		full := filepath.Join(top, p)
		must(t, os.MkdirAll(filepath.Dir(full), 0o755))
		must(t, os.WriteFile(full, []byte(data), 0o644))
	}
	must(t, os.Mkdir(filepath.Join(tr.mount, "emptydir"), 0o755))
	links := map[string]string{
		"mount/abs_link":      filepath.Join(tr.outside, "secret.txt"),
		"mount/rel_link":      "../outside/secret.txt",
		"mount/dir_link":      "../outside",
		"mount/absdir_link":   tr.outside,
		"mount/sub/deep_link": "../../outside/secret.txt",
		"mount/in_link":       "hello.txt",
		"mount/sub/up_in":     "../hello.txt",
		"mount/dangling_out":  "../outside/new.txt",
	}
	for p, target := range links {
		must(t, os.Symlink(target, filepath.Join(top, p)))
	}
	return tr
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// outsideUnchanged records the tree around the mount and checks at cleanup
// that nothing outside the mount changed.
func (tr tree) outsideUnchanged(t *testing.T) {
	t.Helper()
	before := leak.Tree(t, tr.top, tr.mount)
	t.Cleanup(func() {
		if after := leak.Tree(t, tr.top, tr.mount); after != before {
			t.Errorf("files outside the mount changed:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})
}

// newFS is New that fails the test on error and closes the FS at cleanup.
func newFS(t *testing.T, dir string, opts Options) experimentalsys.FS {
	t.Helper()
	fsys, err := New(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fsys.(io.Closer).Close() })
	return fsys
}

// Package testguest builds WebAssembly guests for tests, once per source
// version, into a cache shared by every test binary of a run (and by later
// runs), and hands out the shared wazero compilation cache directory.
//
//	wasm := testguest.Build(t, "testdata/guests/spin") // a Go main package, GOOS=wasip1
//	wasm = testguest.WAT(t, "testdata/tablebomb.wat") // reads the committed tablebomb.wasm
//
// The cache lives in $AGRUN_TEST_CACHE, else the user cache dir +
// "/agrun-test". Entries are keyed by a hash of the sources and the Go
// version, and written atomically, so concurrent test binaries are safe.
package testguest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
)

// Dir returns the root of the shared test cache, creating it.
func Dir(tb testing.TB) string {
	tb.Helper()
	d := os.Getenv("AGRUN_TEST_CACHE")
	if d == "" {
		uc, err := os.UserCacheDir()
		if err != nil {
			uc = os.TempDir()
		}
		d = filepath.Join(uc, "agrun-test")
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		tb.Fatalf("testguest: %v", err)
	}
	return d
}

// CompilationCacheDir returns the wazero compilation cache directory every
// test shares, so a guest is compiled to machine code once per run.
func CompilationCacheDir(tb testing.TB) string {
	tb.Helper()
	d := filepath.Join(Dir(tb), "wazero")
	if err := os.MkdirAll(d, 0o755); err != nil {
		tb.Fatalf("testguest: %v", err)
	}
	return d
}

var (
	mu    sync.Mutex
	built = map[string][]byte{}
)

// Build compiles the Go main package in dir (relative to the calling test's
// package, or absolute) with GOOS=wasip1 GOARCH=wasm -trimpath and returns
// the module's bytes. The package may import the module's own packages
// (e.g. guest-sdk). Builds are cached by the hash of every .go, go.mod and
// go.sum file under dir and under the module's guest-sdk.
func Build(tb testing.TB, dir string, extraFlags ...string) []byte {
	tb.Helper()
	return build(tb, dir, "go", extraFlags)
}

// BuildNative compiles the Go main package in dir for the host (for
// benchmarks comparing against a native process) and returns the binary's
// path.
func BuildNative(tb testing.TB, dir string) string {
	tb.Helper()
	b := build(tb, dir, "native", nil)
	return string(b)
}

// WAT returns the module assembled from a .wat fixture: the .wasm committed
// beside it (X.wat → X.wasm), so tests need no wabt. scripts/build-wat.sh
// rebuilds every fixture after a .wat changes, and its --check (run by CI)
// fails when a committed .wasm is missing or differs from its source.
func WAT(tb testing.TB, file string) []byte {
	tb.Helper()
	bin := strings.TrimSuffix(file, ".wat") + ".wasm"
	b, err := os.ReadFile(bin)
	if err != nil {
		tb.Fatalf("testguest: %v (the .wasm beside a .wat fixture is committed: run scripts/build-wat.sh)", err)
	}
	return b
}

func build(tb testing.TB, src, mode string, flags []string) []byte {
	tb.Helper()
	abs, err := filepath.Abs(src)
	if err != nil {
		tb.Fatalf("testguest: %v", err)
	}
	root := moduleRoot(tb, abs)
	h := sha256.New()
	fmt.Fprintln(h, mode, runtime.Version(), strings.Join(flags, " "), abs)
	hashTree(tb, h, abs)
	if mode == "go" || mode == "native" {
		hashTree(tb, h, filepath.Join(root, "guest-sdk"))
		for _, f := range []string{"go.mod", "go.sum"} {
			b, _ := os.ReadFile(filepath.Join(root, f))
			h.Write(b)
		}
	}
	key := hex.EncodeToString(h.Sum(nil))[:24]

	mu.Lock()
	defer mu.Unlock()
	if b, ok := built[key]; ok {
		return b
	}
	ext := ".wasm"
	if mode == "native" {
		ext = ".bin"
	}
	out := filepath.Join(Dir(tb), "guests", filepath.Base(abs)+"-"+key+ext)
	if _, err := os.Stat(out); err != nil {
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			tb.Fatalf("testguest: %v", err)
		}
		tmp := fmt.Sprintf("%s.tmp%d", out, os.Getpid())
		var cmd *exec.Cmd
		switch mode {
		case "native":
			cmd = exec.Command("go", append([]string{"build", "-trimpath", "-o", tmp}, flags...)...)
			cmd.Dir = abs
		default:
			cmd = exec.Command("go", append([]string{"build", "-trimpath", "-o", tmp}, flags...)...)
			cmd.Dir = abs
			cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		}
		if outb, err := cmd.CombinedOutput(); err != nil {
			os.Remove(tmp)
			tb.Fatalf("testguest: building %s: %v\n%s", src, err, outb)
		}
		if err := os.Rename(tmp, out); err != nil {
			tb.Fatalf("testguest: %v", err)
		}
	}
	if mode == "native" {
		built[key] = []byte(out)
		return built[key]
	}
	b, err := os.ReadFile(out)
	if err != nil {
		tb.Fatalf("testguest: %v", err)
	}
	built[key] = b
	return b
}

func moduleRoot(tb testing.TB, dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			tb.Fatalf("testguest: no go.mod above %s", dir)
		}
	}
}

func hashTree(tb testing.TB, h interface{ Write([]byte) (int, error) }, root string) {
	st, err := os.Stat(root)
	if err != nil {
		if os.IsNotExist(err) {
			return
		}
		tb.Fatalf("testguest: %v", err)
	}
	if !st.IsDir() {
		b, err := os.ReadFile(root)
		if err != nil {
			tb.Fatalf("testguest: %v", err)
		}
		h.Write(b)
		return
	}
	var files []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".go") || strings.HasSuffix(p, ".c") || strings.HasSuffix(p, ".h") || strings.HasSuffix(p, ".wat")) {
			files = append(files, p)
		}
		return nil
	})
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatalf("testguest: %v", err)
		}
		fmt.Fprintln(h, f)
		h.Write(b)
	}
}

// Hostile builds the attacker guest shared by the wasmtools tests and the
// hostile-input suite (testdata/hostile beside this file: raw WASI and
// agrun imports, one misbehaviour per "op" argument): a WASI command, or,
// with AGRUN_HOSTILE_REACTOR=1 in the environment, a reactor
// (-buildmode=c-shared), so that the same attacks run against instances
// started from a snapshot (.ci/run does both).
func Hostile(tb testing.TB) []byte {
	tb.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		tb.Fatal("testguest: cannot locate the hostile guest's source")
	}
	var flags []string
	if os.Getenv("AGRUN_HOSTILE_REACTOR") == "1" {
		flags = append(flags, "-buildmode=c-shared")
	}
	return Build(tb, filepath.Join(filepath.Dir(file), "testdata", "hostile"), flags...)
}

// Reply is what the Hostile guest answers for its file and network
// operations.
type Reply struct {
	OK    bool              `json:"ok"`
	Data  string            `json:"data"`
	Err   string            `json:"err"`
	N     int64             `json:"n"`
	Names []string          `json:"names"`
	Each  map[string]*Reply `json:"each"`
}

// DecodeReply decodes the Hostile guest's answer; the test fails if it is
// not one.
func DecodeReply(tb testing.TB, out []byte) Reply {
	tb.Helper()
	var r Reply
	if err := json.Unmarshal(out, &r); err != nil {
		s := string(out)
		if len(s) > 300 {
			s = s[:300] + "…"
		}
		tb.Fatalf("guest reply %q: %v", s, err)
	}
	return r
}

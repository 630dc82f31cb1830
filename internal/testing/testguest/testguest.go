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
//
// Each helper taking a testing.TB wraps a plain function returning an
// error ([CacheDir], [CompilationDir], [BuildGo], [BuildFile]); the dev
// commands under internal/cmd use those (the benchmark builds what it
// compares with [BuildFile]), so there is one build cache.
package testguest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Dir returns the root of the shared test cache, creating it (CacheDir).
func Dir(tb testing.TB) string {
	tb.Helper()
	d, err := CacheDir()
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// CompilationCacheDir returns the wazero compilation cache directory every
// test shares, so a guest is compiled to machine code once per run
// (CompilationDir).
func CompilationCacheDir(tb testing.TB) string {
	tb.Helper()
	d, err := CompilationDir()
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// Build compiles the Go main package in dir (relative to the calling test's
// package, or absolute) with GOOS=wasip1 GOARCH=wasm -trimpath and returns
// the module's bytes. The package may import the module's own packages
// (e.g. guest-sdk). Builds are cached by the hash of every .go, go.mod and
// go.sum file under dir and under the module's guest-sdk (BuildGo).
func Build(tb testing.TB, dir string, extraFlags ...string) []byte {
	tb.Helper()
	b, err := BuildGo(dir, extraFlags...)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// BuildNative compiles the Go main package in dir for the host (for
// benchmarks comparing against a native process) and returns the binary's
// path (BuildFile).
func BuildNative(tb testing.TB, dir string) string {
	tb.Helper()
	p, err := BuildFile(Spec{Dir: dir, Native: true})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// agrunFlags are Agrun's go build flags when none are given: -tags
// cluster in a test binary built with that tag (cluster.go), else none.
var agrunFlags []string

// Agrun returns the path (named agrun) of the agrun command (cmd/agrun of this module)
// built for the host with the extra go build flags (e.g. -tags cluster;
// none given: the test binary's own cluster tag, so that all the
// packages of a `go test -tags cluster` run share one build): built once
// per version of the module's sources and flags, into the shared cache,
// so that the test binaries of a run (cmd/agrun's, the hostile suite's)
// and later runs share one build instead of linking a 90 MB program each.
func Agrun(tb testing.TB, flags ...string) string {
	tb.Helper()
	if len(flags) == 0 {
		flags = agrunFlags
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		tb.Fatal("testguest: cannot locate the module")
	}
	root, err := ModuleRoot(filepath.Dir(file))
	if err != nil {
		tb.Fatal(err)
	}
	p, err := BuildFile(Spec{Dir: filepath.Join(root, "cmd", "agrun"), Native: true, Module: true, Flags: flags})
	if err != nil {
		tb.Fatal(err)
	}
	// Named agrun, for the tests that put its folder on $PATH and run the
	// documents' commands as written: a symlink beside the build.
	dir := p + ".d"
	link := filepath.Join(dir, "agrun")
	if _, err := os.Stat(link); err == nil {
		return link
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	tmp := fmt.Sprintf("%s.tmp%d", link, os.Getpid())
	os.Remove(tmp)
	if err := os.Symlink(p, tmp); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		tb.Fatal(err)
	}
	return link
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

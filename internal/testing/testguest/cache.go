package testguest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"
)

// The TB-free core: the cache directories and the builds, as plain
// functions returning errors, so that the dev commands under internal/cmd
// (the benchmark) share the one cache with the tests. The helpers taking a
// testing.TB in testguest.go wrap these.

// CacheDir returns the root of the shared test cache, creating it:
// $AGRUN_TEST_CACHE, else the user cache dir + "/agrun-test" (the temporary
// directory when there is no user cache dir).
func CacheDir() (string, error) {
	d := os.Getenv("AGRUN_TEST_CACHE")
	if d == "" {
		uc, err := os.UserCacheDir()
		if err != nil {
			uc = os.TempDir()
		}
		d = filepath.Join(uc, "agrun-test")
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", fmt.Errorf("testguest: %w", err)
	}
	return d, nil
}

// CompilationDir returns the wazero compilation cache directory every test
// shares (CacheDir + "/wazero"), creating it.
func CompilationDir() (string, error) {
	root, err := CacheDir()
	if err != nil {
		return "", err
	}
	d := filepath.Join(root, "wazero")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", fmt.Errorf("testguest: %w", err)
	}
	return d, nil
}

// Spec says what BuildFile builds and where it keeps the result.
type Spec struct {
	// Dir is the Go main package: absolute, or relative to the working
	// directory.
	Dir string
	// Native builds for the host; if false, for GOOS=wasip1 GOARCH=wasm
	// (with CGO_ENABLED=0).
	Native bool
	// Flags are extra go build flags (after -trimpath -o; -o alone for
	// a Module build for the host with no Env, see plainHost), e.g.
	// -buildmode=c-shared. They are part of the cache key.
	Flags []string
	// Env is extra environment for go build, e.g. CGO_ENABLED=0 for a
	// native build. It is part of the cache key. If nil, the build gets
	// the process's environment (plus the wasip1 settings).
	Env []string
	// Module adds every non-test .go file of the module (outside hidden
	// and testdata directories other than Dir's own) to the cache key:
	// for a program that imports the module's packages, such as
	// cmd/agrun. If false, the key covers Dir's files and guest-sdk's,
	// enough for a guest.
	Module bool
	// Out is the directory the result is kept in. If empty, CacheDir +
	// "/guests".
	Out string
}

var (
	mu    sync.Mutex
	built = map[string][]byte{} // BuildGo's results, by path
)

// BuildGo compiles the Go main package in dir (absolute, or relative to
// the working directory) with GOOS=wasip1 GOARCH=wasm -trimpath and the
// extra flags, and returns the module's bytes. The package may import
// guest-sdk. Builds are cached in CacheDir + "/guests" by the hash of
// every .go, .c, .h and .wat file under dir and under the module's
// guest-sdk, go.mod, go.sum, the flags and the Go version; within a
// process, by path too. It is safe to call concurrently, from several
// processes too (a result is renamed into place).
func BuildGo(dir string, flags ...string) ([]byte, error) {
	mu.Lock()
	defer mu.Unlock()
	out, err := buildFile(Spec{Dir: dir, Flags: flags})
	if err != nil {
		return nil, err
	}
	if b, ok := built[out]; ok {
		return b, nil
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("testguest: %w", err)
	}
	built[out] = b
	return b, nil
}

// BuildFile builds s unless its result, named after Dir's last element
// and the hash of its sources (see Spec), is already in s.Out, and returns
// the result's path: a .wasm, or for a native build a .bin. It is safe to
// call concurrently, from several processes too.
func BuildFile(s Spec) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	return buildFile(s)
}

// buildFile is BuildFile; the caller holds mu.
func buildFile(s Spec) (string, error) {
	abs, err := filepath.Abs(s.Dir)
	if err != nil {
		return "", fmt.Errorf("testguest: %w", err)
	}
	root, err := ModuleRoot(abs)
	if err != nil {
		return "", err
	}
	mode, ext := "go", ".wasm"
	if s.Native {
		mode, ext = "native", ".bin"
	}
	h := sha256.New()
	fmt.Fprintln(h, mode, runtime.Version(), strings.Join(s.Flags, " "), abs)
	if len(s.Env) > 0 {
		fmt.Fprintln(h, "env", strings.Join(s.Env, " "))
	}
	if err := hashTree(h, abs); err != nil {
		return "", err
	}
	if err := hashTree(h, filepath.Join(root, "guest-sdk")); err != nil {
		return "", err
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		b, _ := os.ReadFile(filepath.Join(root, f))
		h.Write(b)
	}
	if s.Module {
		if err := hashModule(h, root, abs); err != nil {
			return "", err
		}
	}
	if plainHost(s) {
		fmt.Fprintln(h, "no -trimpath")
	}
	key := hex.EncodeToString(h.Sum(nil))[:24]

	dir := s.Out
	if dir == "" {
		c, err := CacheDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(c, "guests")
	}
	out := filepath.Join(dir, filepath.Base(abs)+"-"+key+ext)
	if _, err := os.Stat(out); err == nil {
		if s.Module {
			now := time.Now()
			os.Chtimes(out, now, now) // in use: pruneModuleBuilds keeps it
		}
		return out, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("testguest: %w", err)
	}
	tmp := fmt.Sprintf("%s.tmp%d", out, os.Getpid())
	args := []string{"build", "-trimpath", "-o", tmp}
	if plainHost(s) {
		args = []string{"build", "-o", tmp}
	}
	cmd := exec.Command("go", append(args, s.Flags...)...)
	cmd.Dir = abs
	if !s.Native || s.Env != nil {
		cmd.Env = append(os.Environ(), s.Env...)
	}
	if !s.Native {
		cmd.Env = append(cmd.Env, "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	}
	if outb, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("testguest: building %s: %w\n%s", s.Dir, err, outb)
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", fmt.Errorf("testguest: %w", err)
	}
	if s.Module {
		pruneModuleBuilds(out)
	}
	return out, nil
}

// plainHost reports whether s is a program of the module for the host in
// the test binaries' environment (testguest.Agrun): it is built as go
// test builds the module's packages, without -trimpath, so that the link
// reuses the objects the test binaries' compile left in the Go build
// cache (with -trimpath the whole tree compiles again: 3 min for
// cmd/agrun). Everything else keeps -trimpath (the benchmark's programs,
// whose sizes it reports, and the guests).
func plainHost(s Spec) bool { return s.Module && s.Native && s.Env == nil }

// pruneModuleBuilds removes the older builds of out's program (the same
// name, another key) unused for a day: a Module build is keyed by every
// source file of the module, so each change of the tree leaves one
// behind, and agrun's is 90 MB. One used by a run of another branch or
// with other flags within the day stays (a cache hit refreshes its time).
func pruneModuleBuilds(out string) {
	base := filepath.Base(out)
	name := base[:strings.LastIndexByte(base, '-')+1] // "agrun-"
	ext := filepath.Ext(base)
	old, _ := filepath.Glob(filepath.Join(filepath.Dir(out), name+"*"+ext))
	for _, p := range old {
		if p == out || len(filepath.Base(p)) != len(base) {
			continue // the new one, or another program ("agrun-x-...")
		}
		if fi, err := os.Stat(p); err == nil && time.Since(fi.ModTime()) > 24*time.Hour {
			os.Remove(p)
			os.RemoveAll(p + ".d") // testguest.Agrun's link to it
		}
	}
}

// ModuleRoot returns the directory holding go.mod at or above dir.
func ModuleRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("testguest: no go.mod above %s", dir)
		}
	}
}

// hashTree writes root into h: the file, or every .go, .c, .h and .wat
// file under the directory, each after its name. A missing root adds
// nothing.
func hashTree(h hash.Hash, root string) error {
	st, err := os.Stat(root)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("testguest: %w", err)
	}
	if !st.IsDir() {
		b, err := os.ReadFile(root)
		if err != nil {
			return fmt.Errorf("testguest: %w", err)
		}
		h.Write(b)
		return nil
	}
	return hashFiles(h, root, func(p string, d fs.DirEntry) (bool, error) {
		return !d.IsDir() && (strings.HasSuffix(p, ".go") || strings.HasSuffix(p, ".c") || strings.HasSuffix(p, ".h") || strings.HasSuffix(p, ".wat")), nil
	})
}

// hashModule writes every non-test .go file of the module at root into h,
// skipping hidden and testdata directories except those holding pkg.
func hashModule(h hash.Hash, root, pkg string) error {
	return hashFiles(h, root, func(p string, d fs.DirEntry) (bool, error) {
		if d.IsDir() {
			n := d.Name()
			if p != root && (strings.HasPrefix(n, ".") || n == "testdata") && !strings.HasPrefix(pkg, p) {
				return false, filepath.SkipDir
			}
			return false, nil
		}
		return strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go"), nil
	})
}

// hashFiles writes into h, in the order of their names, each file under
// root that keep accepts: its name, then its bytes. keep may return
// filepath.SkipDir for a directory. Entries that cannot be walked are
// left out.
func hashFiles(h hash.Hash, root string, keep func(p string, d fs.DirEntry) (bool, error)) error {
	var files []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		ok, err := keep(p, d)
		if ok {
			files = append(files, p)
		}
		return err
	})
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("testguest: %w", err)
		}
		fmt.Fprintln(h, f)
		h.Write(b)
	}
	return nil
}

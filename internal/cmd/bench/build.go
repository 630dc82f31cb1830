//go:build linux

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// builder builds the programs the comparison needs, once per source
// version: the outputs are kept in dir under a hash of the sources, the Go
// version and the target, so a second run starts measuring at once.
type builder struct {
	root string // the module root (where go.mod is)
	dir  string // where built programs are kept
}

// moduleRoot finds the directory holding go.mod at or above the working
// directory.
func moduleRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		p := filepath.Dir(d)
		if p == d {
			return "", fmt.Errorf("bench: no go.mod above the working directory")
		}
		d = p
	}
}

// target says what a build produces.
type target int

const (
	native        target = iota // for the host
	wasip1                      // GOOS=wasip1 GOARCH=wasm, a WASI command: what a plain go build gives
	wasip1Reactor               // the same with -buildmode=c-shared, as scripts/build-examples.sh builds the examples
)

// build compiles the Go main package pkg (relative to the module root) and
// returns the path of the result. The hash covers pkg's sources and, since
// any package of the module may be imported, every .go file of the module
// outside testdata directories other than pkg's own.
func (b *builder) build(pkg string, t target) (string, error) {
	h := sha256.New()
	fmt.Fprintln(h, pkg, t, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if err := hashSources(h, b.root, filepath.Join(b.root, pkg)); err != nil {
		return "", err
	}
	ext := ".bin"
	if t != native {
		ext = ".wasm"
	}
	out := filepath.Join(b.dir, strings.ReplaceAll(pkg, "/", "_")+"-"+hex.EncodeToString(h.Sum(nil))[:16]+ext)
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(b.dir, 0o755); err != nil {
		return "", err
	}
	tmp := fmt.Sprintf("%s.tmp%d", out, os.Getpid())
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags=-buildid=", "-o", tmp}
	if t == wasip1Reactor {
		args = append(args, "-buildmode=c-shared")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = filepath.Join(b.root, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if t != native {
		cmd.Env = append(cmd.Env, "GOOS=wasip1", "GOARCH=wasm")
	}
	if outb, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("bench: building %s: %w\n%s", pkg, err, outb)
	}
	return out, os.Rename(tmp, out)
}

// hashSources writes every .go file under root (skipping testdata
// directories and hidden ones) and every file under pkg into h, plus go.mod
// and go.sum.
func hashSources(h interface{ Write([]byte) (int, error) }, root, pkg string) error {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			n := d.Name()
			if p != root && (strings.HasPrefix(n, ".") || n == "testdata") && !strings.HasPrefix(pkg, p) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") || p == filepath.Join(root, "go.mod") || p == filepath.Join(root, "go.sum") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		fmt.Fprintln(h, f, len(data))
		h.Write(data)
	}
	return nil
}

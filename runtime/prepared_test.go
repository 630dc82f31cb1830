package runtime

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var updatePrepared = flag.Bool("update-prepared", false, "rewrite testdata/prepared.golden (after bumping preparedVersion)")

// preparedFixtures are committed modules (so their bytes do not depend on
// the toolchain) that cover each shape prepareModule produces: a command,
// a memory image, a reactor with snapshot exports, merged data, and a
// whole Go tool.
var preparedFixtures = []string{
	"testdata/wat/hello.wasm",
	"testdata/wat/data.wasm",
	"testdata/wat/overlap.wasm",
	"testdata/wat/reactorstate.wasm",
	"testdata/wat/reactortable.wasm",
	"testdata/wat/calltree.wasm",
	"../testdata/word_count.wasm",
}

// TestPreparedGolden pins what prepareModule makes of each fixture to
// testdata/prepared.golden, under preparedVersion: if the output changes
// while the version stays, a process would start from a file an older
// build prepared differently. Change the output, bump preparedVersion,
// then run with -update-prepared.
func TestPreparedGolden(t *testing.T) {
	r := newRuntime(t, Config{DisableCache: true})
	got := map[string]string{}
	for _, f := range preparedFixtures {
		wasm, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		info, bin, image, err := r.prepareModule(wasm)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		enc, err := encodePrepared("", info, bin, image)
		if err != nil {
			t.Fatal(err)
		}
		again, bin2, image2, _ := r.prepareModule(wasm)
		enc2, _ := encodePrepared("", again, bin2, image2)
		if string(enc) != string(enc2) {
			t.Fatalf("%s: prepareModule is not deterministic", f)
		}
		in, out := sha256.Sum256(wasm), sha256.Sum256(enc)
		got[filepath.Base(f)] = hex.EncodeToString(in[:8]) + " " + hex.EncodeToString(out[:])
	}
	const golden = "testdata/prepared.golden"
	if *updatePrepared {
		var b strings.Builder
		fmt.Fprintf(&b, "# what prepareModule makes of runtime's fixtures; see TestPreparedGolden\nversion %d\n", preparedVersion)
		for _, f := range preparedFixtures {
			fmt.Fprintf(&b, "%s %s\n", filepath.Base(f), got[filepath.Base(f)])
		}
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	f, err := os.Open(golden)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[string]string{}
	version := -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		k, v, _ := strings.Cut(line, " ")
		if k == "version" {
			fmt.Sscan(v, &version)
			continue
		}
		want[k] = v
	}
	if version != preparedVersion {
		t.Fatalf("%s is for preparedVersion %d, this is %d: run go test ./runtime -run TestPreparedGolden -update-prepared", golden, version, preparedVersion)
	}
	for name, g := range got {
		if gin, win := strings.Fields(g)[0], strings.Fields(want[name] + " ")[0]; gin != win {
			t.Fatalf("fixture %s itself changed (input %s, golden %s): run with -update-prepared (no version bump needed)", name, gin, win)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("prepareModule's output changed but preparedVersion is still %d: bump it (prepared.go), then run with -update-prepared\ngot  %v\nwant %v", preparedVersion, got, want)
	}
}

// TestPreparedReused: a second Runtime on the same cache directory (a new
// process) compiles from the prepared file, and its instances behave as
// the first's: the reactor's snapshot, the memory image, the manifest.
func TestPreparedReused(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	fixtures := map[string][]byte{"reactorstate": wat(t, "reactorstate"), "data": wat(t, "data"), "hello": wat(t, "hello")}
	outputs := func(r *Runtime) map[string]string {
		out := map[string]string{}
		for name, wasm := range fixtures {
			m := compile(t, r, wasm)
			for i := range 2 {
				o, err := r.Run(ctx, m, Input{Args: []string{name}})
				out[fmt.Sprint(name, i)] = fmt.Sprintf("%q %q %v", o.Stdout, o.Stderr, err)
			}
			out[name+" info"] = fmt.Sprintf("%v %v %+v %v %v", m.c.info.reactor, m.c.info.snap != nil, m.c.info.Exports, m.c.info.image != nil, len(m.c.info.Customs))
		}
		return out
	}
	first := newRuntime(t, Config{CacheDir: dir})
	want := outputs(first)
	if n := first.preparedHits.Load(); n != 0 {
		t.Fatalf("first runtime used %d prepared modules of an empty cache", n)
	}
	files, _ := filepath.Glob(filepath.Join(dir, preparedDirName, "*.bin"))
	if len(files) != len(fixtures) {
		t.Fatalf("prepared files: %v, want %d", files, len(fixtures))
	}
	second := newRuntime(t, Config{CacheDir: dir})
	got := outputs(second)
	if n := second.preparedHits.Load(); n != int64(len(fixtures)) {
		t.Fatalf("second runtime used %d prepared modules, want %d", n, len(fixtures))
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("from prepared files:\n%v\nfresh:\n%v", got, want)
	}
	// Another configuration that validate or Instrument reads is another key.
	third := newRuntime(t, Config{CacheDir: dir, MaxStackBytes: 1 << 20})
	compile(t, third, fixtures["hello"])
	if n := third.preparedHits.Load(); n != 0 {
		t.Fatalf("a runtime with another max stack used a prepared module (%d)", n)
	}
}

// TestPreparedDamagedIgnored: a torn, altered, foreign or empty file is
// ignored (the module is prepared again and works) and replaced.
func TestPreparedDamagedIgnored(t *testing.T) {
	wasm := wat(t, "reactorstate")
	for _, tt := range []struct {
		name   string
		damage func([]byte) []byte
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }},
		{"empty", func([]byte) []byte { return nil }},
		{"one bit flipped", func(b []byte) []byte { b[len(b)/2] ^= 1; return b }},
		{"garbage", func([]byte) []byte { return []byte("agrun-prepared\n\xff\xff\xff\xff{}") }},
		{"header length past the end", func(b []byte) []byte {
			b[len(preparedMagic)+3] = 0x7f
			return b
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			compile(t, newRuntime(t, Config{CacheDir: dir}), wasm)
			files, _ := filepath.Glob(filepath.Join(dir, preparedDirName, "*.bin"))
			if len(files) != 1 {
				t.Fatalf("files %v", files)
			}
			good, _ := os.ReadFile(files[0])
			if err := os.WriteFile(files[0], tt.damage(append([]byte(nil), good...)), 0o600); err != nil {
				t.Fatal(err)
			}
			r := newRuntime(t, Config{CacheDir: dir})
			m := compile(t, r, wasm)
			if n := r.preparedHits.Load(); n != 0 {
				t.Fatalf("a damaged prepared file was used")
			}
			if _, err := r.Run(context.Background(), m, Input{}); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if now, _ := os.ReadFile(files[0]); string(now) != string(good) {
				t.Fatalf("the damaged file was not replaced")
			}
		})
	}
}

// TestPreparedNotForRefused: a module Compile refuses leaves no file.
func TestPreparedNotForRefused(t *testing.T) {
	dir := t.TempDir()
	r := newRuntime(t, Config{CacheDir: dir})
	if _, err := r.Compile(context.Background(), wat(t, "bigmem")); err == nil {
		t.Fatal("bigmem compiled")
	}
	if files, _ := filepath.Glob(filepath.Join(dir, preparedDirName, "*")); len(files) != 0 {
		t.Fatalf("files for a refused module: %v", files)
	}
}

// TestCompiledCacheDamaged: wazero's compiled code in the cache directory,
// damaged, makes Compile fail with ErrCompile; it never runs, and a
// damaged entry is never taken for the module. Since the patched wazero
// (third_party/wazero.patch) skips validating the function bodies of a
// module whose compiled code it finds, this is what stands between a
// damaged file and the guest: wazero's CRC-32C over the machine code and
// its length checks. (A file replaced on purpose with other valid
// machine code is not damage: whoever can write the cache directory can
// run code in the process, docs/SECURITY.md.)
func TestCompiledCacheDamaged(t *testing.T) {
	wasm := wat(t, "reactorstate")
	for _, tt := range []struct {
		name   string
		damage func([]byte) []byte
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }},
		{"empty", func([]byte) []byte { return nil }},
		{"one bit flipped in the machine code", func(b []byte) []byte { b[len(b)/2] ^= 1; return b }},
		{"last byte gone", func(b []byte) []byte { return b[:len(b)-1] }},
		{"garbage", func([]byte) []byte { return []byte("WAZEVO\x07v1.12.0\xff\xff\xff\xff") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			compile(t, newRuntime(t, Config{CacheDir: dir}), wasm)
			files, _ := filepath.Glob(filepath.Join(dir, "wazero-*", "*"))
			if len(files) != 1 {
				t.Fatalf("files %v", files)
			}
			good, _ := os.ReadFile(files[0])
			if err := os.WriteFile(files[0], tt.damage(append([]byte(nil), good...)), 0o600); err != nil {
				t.Fatal(err)
			}
			r := newRuntime(t, Config{CacheDir: dir})
			m, err := r.Compile(context.Background(), wasm)
			if err == nil {
				// Only a recompile may succeed: then the call runs as it
				// should.
				if _, err := r.Run(context.Background(), m, Input{}); err != nil {
					t.Fatalf("Run: %v", err)
				}
				t.Log("compiled again")
				return
			}
			t.Logf("Compile: %v", err)
			if !errors.Is(err, ErrCompile) {
				t.Fatalf("Compile: %v, want ErrCompile", err)
			}
		})
	}
}

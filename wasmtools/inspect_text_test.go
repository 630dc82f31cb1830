package wasmtools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInfoWriteText: what `agrun inspect` prints of a module, each part
// of Info on its line, and a file name that would steer a terminal
// escaped.
func TestInfoWriteText(t *testing.T) {
	info, err := Inspect(sampleModule())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := info.WriteText(&b, "x\x1b[2J.wasm"); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"file:     x\\x1b[2J.wasm\n",
		"sha256:   " + info.SHA256 + "\n",
		"manifest: none (add one with agrun pack",
		"memory:   min 1 pages, no max\n",
		"memory:   min 17, max 1024 pages\n",
		"table:    funcref min 1, max 10 elements\n",
		"table:    externref min 3 elements, no max\n",
		"imports:  5\n",
		"exports:  4\n",
		"custom sections: first, last\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("inspect text lacks %q:\n%s", want, got)
		}
	}
	if f := strings.Fields(got[strings.Index(got, "agrun.http_request"):]); f[0] != "agrun.http_request" || f[1] != "func" {
		t.Errorf("import line: %v", f[:4])
	}
}

// TestReadModuleFile: a module is read whole; one over the sandbox's
// module limit is refused before it is read.
func TestReadModuleFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small.wasm")
	if err := os.WriteFile(small, sampleModule(), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadModuleFile(small); err != nil || len(b) != len(sampleModule()) {
		t.Fatalf("ReadModuleFile: %d bytes, %v", len(b), err)
	}
	huge := filepath.Join(dir, "huge.wasm")
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 40); err != nil { // sparse: nothing is written
		t.Fatal(err)
	}
	f.Close()
	if _, err := ReadModuleFile(huge); err == nil || !strings.Contains(err.Error(), "larger than the") {
		t.Fatalf("ReadModuleFile of a 1 TiB file: %v", err)
	}
	if _, err := ReadModuleFile(filepath.Join(dir, "none.wasm")); !os.IsNotExist(err) {
		t.Fatalf("ReadModuleFile of no file: %v", err)
	}
}

package atomicfile_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/atomicfile"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "index.json")
	for _, tc := range []struct {
		data []byte
		perm os.FileMode
	}{
		{[]byte("first\n"), 0o600},
		{[]byte("second, longer\n"), 0o644},
		{nil, 0o600},
	} {
		if err := atomicfile.WriteFile(path, tc.data, tc.perm); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, tc.data) {
			t.Fatalf("read %q, %v; want %q", got, err, tc.data)
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != tc.perm {
			t.Errorf("mode %v, want %v", fi.Mode().Perm(), tc.perm)
		}
	}
	assertOnly(t, dir, "index.json")
}

func TestWriteFileFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	// The target is a non-empty directory: the rename fails after the
	// temporary file was written.
	target := filepath.Join(dir, "busy")
	if err := os.MkdirAll(filepath.Join(target, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.WriteFile(target, []byte("data"), 0o600); err == nil {
		t.Fatal("WriteFile over a non-empty directory succeeded")
	}
	assertOnly(t, dir, "busy")
	if err := atomicfile.WriteFile(filepath.Join(dir, "missing", "f"), nil, 0o600); err == nil {
		t.Fatal("WriteFile into a missing directory succeeded")
	}
}

func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), atomicfile.TempPrefix) {
			t.Errorf("temporary file %s left behind", e.Name())
		}
		got = append(got, e.Name())
	}
	if strings.Join(got, " ") != strings.Join(names, " ") {
		t.Errorf("dir holds %v, want %v", got, names)
	}
}

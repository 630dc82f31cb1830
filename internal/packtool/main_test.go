package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agcore/agrun/wasmtools"
)

// A module with nothing but the header and one custom section.
var bare = []byte("\x00asm\x01\x00\x00\x00\x00\x04\x03abc")

func TestPack(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.wasm")
	out := filepath.Join(dir, "out.wasm")
	man := filepath.Join(dir, "manifest.toml")
	os.WriteFile(in, bare, 0o644)
	os.WriteFile(man, []byte("name = \"t\"\ndescription = \"d\"\n"), 0o644)
	var stderr bytes.Buffer
	// Flags before and after the positional argument, as `agrun pack` takes them.
	if code := run([]string{"-m", man, in, "-o", out}, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	info, err := wasmtools.Inspect(b)
	if err != nil || info.Manifest == nil || info.Manifest.Name != "t" || !bytes.HasPrefix(b, bare) {
		t.Fatalf("packed module: %+v %v", info.Manifest, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Fatalf("left temporary files behind: %v", ents)
	}
}

func TestPackErrors(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.wasm")
	os.WriteFile(in, bare, 0o644)
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"name":"a b","description":"d"}`), 0o644)
	good := filepath.Join(dir, "good.toml")
	os.WriteFile(good, []byte("name = \"t\"\ndescription = \"d\"\n"), 0o644)
	notWasm := filepath.Join(dir, "not.wasm")
	os.WriteFile(notWasm, []byte("#!/bin/sh\n"), 0o644)
	out := filepath.Join(dir, "out.wasm")
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no args", nil, 2, "usage"},
		{"two inputs", []string{"-m", bad, in, in, "-o", out}, 2, "usage"},
		{"no output", []string{"-m", bad, in}, 2, "usage"},
		{"bad manifest", []string{"-m", bad, in, "-o", out}, 1, "invalid manifest"},
		{"missing input", []string{"-m", good, filepath.Join(dir, "nope.wasm"), "-o", out}, 1, "no such file"},
		{"not wasm", []string{"-m", good, notWasm, "-o", out}, 1, "malformed module"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if code := run(tc.args, &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr.String(), tc.code, tc.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Fatal("an output file was written")
			}
		})
	}
}

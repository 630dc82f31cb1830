package wasmtools

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func u32p(v uint32) *uint32 { return &v }

func TestInspectSample(t *testing.T) {
	wasm := sampleModule()
	info, err := Inspect(wasm)
	if err != nil {
		t.Fatal(err)
	}
	wantImports := []Import{
		{"agrun", "http_request", "func", "(i32, i32) -> i32"},
		{"agrun", "log", "func", "(i32, i32, i32)"},
		{"env", "tbl", "table", "funcref min 1, max 10"},
		{"env", "mem", "memory", "min 1, no max"},
		{"env", "g", "global", "mut i32"},
	}
	if !reflect.DeepEqual(info.Imports, wantImports) {
		t.Errorf("imports\n got %+v\nwant %+v", info.Imports, wantImports)
	}
	wantExports := []Export{
		{"_start", "func", "()"},
		{"multi", "func", "(i64) -> (i32, i64)"},
		{"memory", "memory", ""},
		{"log", "func", "(i32, i32, i32)"},
	}
	if !reflect.DeepEqual(info.Exports, wantExports) {
		t.Errorf("exports\n got %+v\nwant %+v", info.Exports, wantExports)
	}
	wantMem := []Memory{{Bounds: Bounds{Min: 1}, Imported: true}, {Bounds: Bounds{Min: 17, Max: u32p(1024)}}}
	if !reflect.DeepEqual(info.Memories, wantMem) {
		t.Errorf("memories %+v", info.Memories)
	}
	wantTables := []Table{{Bounds: Bounds{Min: 1, Max: u32p(10)}, ElemType: "funcref", Imported: true}, {Bounds: Bounds{Min: 3}, ElemType: "externref"}}
	if !reflect.DeepEqual(info.Tables, wantTables) {
		t.Errorf("tables %+v", info.Tables)
	}
	if !reflect.DeepEqual(info.CustomSections, []string{"first", "last"}) {
		t.Errorf("custom sections %v", info.CustomSections)
	}
	if info.Size != len(wasm) || len(info.SHA256) != 64 || strings.ToLower(info.SHA256) != info.SHA256 {
		t.Errorf("size %d sha %q", info.Size, info.SHA256)
	}
	if info.Manifest != nil || info.ManifestError != nil {
		t.Errorf("manifest %v, error %v: want none", info.Manifest, info.ManifestError)
	}
	// Info is what `agrun inspect --json` prints.
	b, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"memories":[{"min":1,"max":null,"imported":true},{"min":17,"max":1024}]`) {
		t.Errorf("json: %s", b)
	}
}

func TestInspectMalformed(t *testing.T) {
	types := sec(secType, vec(functype(nil, nil)))
	tests := []struct {
		name string
		wasm []byte
		want string
	}{
		{"import count beyond section", module(sec(secImport, leb(1<<32-1))), "cannot fit"},
		{"type count beyond section", module(sec(secType, leb(1<<30), []byte{0x60, 0, 0})), "cannot fit"},
		{"param count beyond section", module(sec(secType, vec(cat([]byte{0x60}, leb(1<<31), []byte{i32})))), "cannot fit"},
		{"unknown value type", module(sec(secType, vec(functype([]byte{0x55}, nil)))), "unknown value type"},
		{"non-function type", module(sec(secType, vec([]byte{0x5f, 0, 0}))), "type form"},
		{"import type out of range", module(types, sec(secImport, vec(cat(wname("a"), wname("b"), []byte{0}, leb(5))))), "type index 5 out of range"},
		{"function type out of range", module(types, sec(secFunction, vec(leb(1)))), "out of range"},
		{"export function out of range", module(types, sec(secExport, vec(cat(wname("f"), []byte{0}, leb(0))))), "function index 0 out of range"},
		{"unknown import kind", module(sec(secImport, vec(cat(wname("a"), wname("b"), []byte{9, 0})))), "unknown kind"},
		{"unknown export kind", module(sec(secExport, vec(cat(wname("a"), []byte{9}, leb(0))))), "unknown export kind"},
		{"memory max below min", module(sec(secMemory, vec(cat([]byte{1}, leb(5), leb(2))))), "below its minimum"},
		{"memory64", module(sec(secMemory, vec(cat([]byte{4}, leb(1))))), "64-bit"},
		{"shared table", module(sec(secTable, vec(cat([]byte{0x70, 3}, leb(1), leb(2))))), "limits flag"},
		{"trailing bytes", module(sec(secMemory, vec(cat([]byte{0}, leb(1))), []byte{0})), "unexpected bytes"},
		{"bad global mutability", module(sec(secImport, vec(cat(wname("a"), wname("g"), []byte{3, i32, 7})))), "mutability"},
		{"import name not utf-8", module(sec(secImport, vec(cat([]byte{1, 0xff}, wname("b"), []byte{3, i32, 0})))), "UTF-8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Inspect(tc.wasm)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrMalformed mentioning %q", err, tc.want)
			}
		})
	}
}

func TestInspectManifestErrors(t *testing.T) {
	good := custom(manifestName, []byte(`{"name":"a","description":"d"}`))
	tests := []struct {
		name string
		wasm []byte
		want string
	}{
		{"malformed manifest", module(custom(manifestName, []byte(`{"name":"a b","description":"d"}`))), "does not match"},
		{"empty manifest", module(custom(manifestName, nil)), "empty document"},
		{"two manifests", module(good, good), "more than one agrun.manifest"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			info, err := Inspect(tc.wasm)
			if err != nil {
				t.Fatalf("Inspect: %v (a bad manifest is not an Inspect error)", err)
			}
			if info.Manifest != nil || !errors.Is(info.ManifestError, ErrInvalidManifest) || !strings.Contains(info.ManifestError.Error(), tc.want) {
				t.Fatalf("manifest %v, error %v; want an error mentioning %q", info.Manifest, info.ManifestError, tc.want)
			}
			var me *ManifestError
			if !errors.As(info.ManifestError, &me) {
				t.Fatalf("%T is not a *ManifestError", info.ManifestError)
			}
			if _, err := manifestSection(tc.wasm); tc.name == "two manifests" && !errors.Is(err, ErrInvalidManifest) {
				t.Fatalf("manifestSection: %v", err)
			}
		})
	}
}

// TestInspectExamples inspects the committed example tools: real modules
// built by scripts/build-examples.sh, by Go and by clang.
func TestInspectExamples(t *testing.T) {
	files, _ := filepath.Glob("../testdata/*.wasm")
	if len(files) < 5 {
		t.Fatalf("found %d example .wasm files under ../testdata, want at least 5 (run scripts/build-examples.sh)", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			wasm, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			info, err := Inspect(wasm)
			if err != nil {
				t.Fatal(err)
			}
			name := strings.TrimSuffix(filepath.Base(f), ".wasm")
			if info.ManifestError != nil || info.Manifest == nil || info.Manifest.Name != name {
				t.Fatalf("manifest %+v, error %v", info.Manifest, info.ManifestError)
			}
			if info.CustomSections[len(info.CustomSections)-1] != manifestName {
				t.Errorf("manifest is not the last section: %v", info.CustomSections)
			}
			exports := map[string]string{}
			for _, e := range info.Exports {
				exports[e.Name] = e.Kind + " " + e.Signature
			}
			command := exports["_start"] == "func ()"
			reactor := exports["_initialize"] == "func ()" && exports["agrun_call"] == "func ()"
			if !(command || reactor) || exports["memory"] != "memory " {
				t.Errorf("neither a WASI command nor a reactor: exports %v", exports)
			}
			if !strings.HasSuffix(name, "_c") && !reactor {
				t.Errorf("a Go example is not built as a reactor (scripts/build-examples.sh): exports %v", exports)
			}
			for _, imp := range info.Imports {
				switch {
				case imp.Module == "wasi_snapshot_preview1":
				case imp.Module == "agrun" && imp.Name == "http_request" && imp.Signature == "(i32, i32) -> i32":
				case imp.Module == "agrun" && imp.Name == "http_response" && imp.Signature == "(i32, i32) -> i32":
				case imp.Module == "agrun" && imp.Name == "log" && imp.Signature == "(i32, i32, i32)":
				default:
					t.Errorf("import outside the ABI: %+v", imp)
				}
			}
			if len(info.Memories) != 1 {
				t.Errorf("memories %+v", info.Memories)
			}
			// The manifest's body sits in the file as written by Pack.
			m, err := ReadManifestFile(manifestPath(t, name))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*info.Manifest, m) {
				t.Errorf("embedded manifest\n %+v\ndiffers from the source\n %+v", *info.Manifest, m)
			}
		})
	}
}

// manifestPath finds the manifest source of an example tool.
func manifestPath(t *testing.T, name string) string {
	t.Helper()
	for _, ext := range []string{".toml", ".json"} {
		p := filepath.Join("..", "testdata", name, "manifest"+ext)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("no manifest source for %s", name)
	return ""
}

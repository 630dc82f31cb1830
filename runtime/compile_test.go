package runtime

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/agcore/agrun/internal/wasmbin"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

func TestCompileRefuses(t *testing.T) {
	r := newRuntime(t, Config{})
	tests := []struct {
		name, wat, want string
	}{
		{"table.grow on an unbounded table", "tablegrow", "could grow without bound"},
		{"table.fill on an unbounded table", "tablefill", "table.grow or table.fill"},
		{"table.grow on the unbounded one of two tables", "tablegrow2", "table 1: no maximum"},
		{"initial table over the cap", "tablebig", "initial size 200000 exceeds the limit of 100000"},
		{"initial memory over the limit", "bigmem", "initial memory of 131072000 bytes exceeds"},
		{"WASI import with a wrong signature", "badsig", "import wasi_snapshot_preview1.fd_write: signature"},
		{"unknown import module", "unknown", "import env.system"},
		{"agrun import with a wrong signature", "badagrun", "import agrun.http_request: signature"},
		{"imported memory", "importmem", "importing a memory"},
		{"reactor without agrun_call", "reactor", "_initialize but no agrun_call"},
		{"neither a command nor a reactor", "noentry", "exports no _start function"},
		{"agrun_call with parameters", "reactorsig", "export agrun_call: signature func(i32) ()"},
		{"agrun_call re-exporting an import", "reactorimport", "export _initialize: an imported function"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.Compile(context.Background(), wat(t, tt.wat))
			if !errors.Is(err, ErrCompile) {
				t.Fatalf("err = %v, want ErrCompile", err)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Errorf("err = %v, want a *ValidationError inside", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %q, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestCompileRefusesGarbage(t *testing.T) {
	r := newRuntime(t, Config{MaxModuleBytes: 1 << 20})
	good := wat(t, "trap")
	tests := []struct {
		name string
		wasm []byte
	}{
		{"empty", nil},
		{"not wasm", []byte("#!/bin/sh\necho hi\n")},
		{"truncated", good[:len(good)-3]},
		{"too large", append(append([]byte{}, good...), make([]byte, 1<<20)...)},
		// A function declaring 2^32-1 locals: wazero alone would try to
		// allocate 4 GiB for them.
		{"absurd locals", []byte("\x00asm\x01\x00\x00\x00" +
			"\x01\x04\x01\x60\x00\x00" + // type: func()
			"\x03\x02\x01\x00" + // one function
			"\x0a\x0a\x01\x08\x01\xff\xff\xff\xff\x0f\x7f\x0b")}, // 1 group of 2^32-1 i32
		{"huge vector count", []byte("\x00asm\x01\x00\x00\x00\x01\x05\xff\xff\xff\xff\x0f")},
		{"unknown section", []byte("\x00asm\x01\x00\x00\x00\x0e\x00")},
		{"duplicate section", []byte("\x00asm\x01\x00\x00\x00\x01\x01\x00\x01\x01\x00")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.Compile(context.Background(), tt.wasm)
			if !errors.Is(err, ErrCompile) {
				t.Fatalf("err = %v, want ErrCompile", err)
			}
		})
	}
}

// Go's wasip1 modules declare an unbounded function table but never grow
// it: they must load.
func TestCompileGoModule(t *testing.T) {
	r := newRuntime(t, Config{})
	wasm := probe(t)
	m := compile(t, r, wasm)
	if got := m.SHA256(); len(got) != 64 || strings.ToLower(got) != got {
		t.Errorf("SHA256 = %q", got)
	}
	if !contains(m.Exports(), "_start") || !contains(m.Exports(), "memory") {
		t.Errorf("Exports = %v", m.Exports())
	}
	for _, want := range []string{"agrun.log", "agrun.http_request", "wasi_snapshot_preview1.fd_write"} {
		if !contains(m.Imports(), want) {
			t.Errorf("Imports lacks %s: %v", want, m.Imports())
		}
	}
	parsed, err := wasmbin.Parse(wasm)
	if err != nil {
		t.Fatal(err)
	}
	if len(parsed.Tables) != 1 || parsed.Tables[0].HasMax {
		t.Errorf("tables = %+v, want one without a maximum", parsed.Tables)
	}

	// Same bytes: the same compiled code, a new handle.
	m2 := compile(t, r, wasm)
	if m2.c != m.c {
		t.Error("second Compile of the same bytes compiled again")
	}
	m.Close(context.Background())
	if _, err := r.Run(context.Background(), m, Input{Args: []string{"probe", "echo"}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Run on a closed module: %v, want ErrClosed", err)
	}
	out, err := r.Run(context.Background(), m2, Input{Args: []string{"probe", "echo"}, Stdin: []byte("hi")})
	if err != nil || string(out.Stdout) != "hi" {
		t.Fatalf("Run on the other handle: %v %+v", err, out)
	}
}

func TestCustomSection(t *testing.T) {
	r := newRuntime(t, Config{})
	wasm := wat(t, "trap")
	// Append two custom sections named agrun.manifest; the first wins.
	for _, payload := range []string{`{"name":"a"}`, `{"name":"b"}`} {
		sec := wasmbin.AppendU32(nil, uint32(len("agrun.manifest")))
		sec = append(sec, "agrun.manifest"...)
		sec = append(sec, payload...)
		wasm = append(wasm, 0)
		wasm = wasmbin.AppendU32(wasm, uint32(len(sec)))
		wasm = append(wasm, sec...)
	}
	m := compile(t, r, wasm)
	if got := m.CustomSection("agrun.manifest"); string(got) != `{"name":"a"}` {
		t.Errorf("CustomSection = %q", got)
	}
	if got := m.CustomSection("nope"); got != nil {
		t.Errorf("CustomSection(nope) = %q, want nil", got)
	}
}

func TestBoundedTablesRun(t *testing.T) {
	r := newRuntime(t, Config{})
	for _, tt := range []struct {
		wat  string
		exit uint32
	}{
		{"tablemax", 6},  // grown from 1 by 5, then refused past its maximum 10
		{"twotables", 6}, // 3 + (1 grown by 2)
	} {
		m := compile(t, r, wat(t, tt.wat))
		out, err := r.Run(context.Background(), m, Input{})
		if err != nil {
			t.Fatal(err)
		}
		if out.ExitCode != tt.exit {
			t.Errorf("%s: exit code %d, want the table size %d", tt.wat, out.ExitCode, tt.exit)
		}
	}
}

// Merged data segments must put every byte where the originals did.
func TestMergeDataSegments(t *testing.T) {
	r := newRuntime(t, Config{})
	for _, tt := range []struct {
		wat       string
		mergeable bool
		want      string
	}{
		{"data", true, "AB\x00\x00\x00\x00\x00\x00\x00\x00CDEFGH" + strings.Repeat("\x00", 24) + "XY" + strings.Repeat("\x00", 22) + "far!"},
		{"overlap", false, "aaBBaaaacc"},
	} {
		t.Run(tt.wat, func(t *testing.T) {
			wasm := wat(t, tt.wat)
			pm, err := wasmbin.Parse(wasm)
			if err != nil {
				t.Fatal(err)
			}
			merged, err := wasmbin.MergeData(wasm, pm)
			if (err == nil) != tt.mergeable {
				t.Fatalf("mergeData err = %v, mergeable = %v", err, tt.mergeable)
			}
			if tt.mergeable {
				mm, err := wasmbin.Parse(merged)
				if err != nil {
					t.Fatalf("merged module does not parse: %v", err)
				}
				if len(mm.Data) != 2 {
					t.Errorf("merged into %d segments, want 2", len(mm.Data))
				}
			}
			// Through Run (a memory image), and the merged module as wazero
			// runs it.
			m := compile(t, r, wasm)
			if m.c.info.image == nil {
				t.Error("no memory image")
			}
			out, err := r.Run(context.Background(), m, Input{})
			if err != nil {
				t.Fatal(err)
			}
			if string(out.Stdout) != tt.want {
				t.Errorf("memory = %q, want %q", out.Stdout, tt.want)
			}
			if got := rawRun(t, merged, nil); got != tt.want {
				t.Errorf("merged module: memory = %q, want %q", got, tt.want)
			}
		})
	}
}

// A Go module's thousands of segments merge, and the module still runs.
func TestMergeGoModule(t *testing.T) {
	wasm := probe(t)
	pm, err := wasmbin.Parse(wasm)
	if err != nil {
		t.Fatal(err)
	}
	merged, err := wasmbin.MergeData(wasm, pm)
	if err != nil {
		t.Fatalf("Go module not mergeable: %v", err)
	}
	mm, err := wasmbin.Parse(merged)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d data segments merged into %d", len(pm.Data), len(mm.Data))
	if len(mm.Data) >= len(pm.Data)/10 {
		t.Errorf("%d segments merged into %d", len(pm.Data), len(mm.Data))
	}
	if got := rawRun(t, merged, []string{"probe", "env"}); !strings.Contains(got, `"args":["probe","env"]`) {
		t.Errorf("merged Go module printed %q", got)
	}
}

// rawRun runs a module with plain wazero (no image, no merging) and
// returns its stdout.
func rawRun(t *testing.T, wasm []byte, args []string) string {
	t.Helper()
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(mustCache(t, testguest.CompilationCacheDir(t))))
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	rt.NewHostModuleBuilder("agrun").
		NewFunctionBuilder().WithFunc(func(int32, int32, int32) {}).Export("log").
		NewFunctionBuilder().WithFunc(func(int32, int32) int32 { return -2 }).Export("http_request").
		NewFunctionBuilder().WithFunc(func(int32, int32) int32 { return -2 }).Export("http_response").
		Instantiate(ctx)
	var stdout bytes.Buffer
	mod, err := rt.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().WithName("").WithArgs(args...).WithStdout(&stdout))
	if err != nil {
		t.Fatalf("raw run: %v", err)
	}
	mod.Close(ctx)
	return stdout.String()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Memories are reused between calls: what one instance wrote, in its data,
// its heap or memory it grew, is never seen by the next.
func TestNoStateBetweenCalls(t *testing.T) {
	r := newRuntime(t, Config{MaxInstances: 1})
	m := compile(t, r, wat(t, "datawrite"))
	for i := 0; i < 3; i++ {
		out, err := r.Run(context.Background(), m, Input{})
		if err != nil {
			t.Fatal(err)
		}
		if want := "AAAA\x00\x00\x00\x00CC" + "\x00\x00\x00\x00" + "\x00\x00\x00\x00"; string(out.Stdout) != want {
			t.Fatalf("call %d saw %q, want %q", i, out.Stdout, want)
		}
	}
}

// oneFunction returns a module whose _start has the given body (locals
// declarations included).
func oneFunction(body []byte) []byte {
	code := wasmbin.AppendU32(nil, 1)
	code = wasmbin.AppendU32(code, uint32(len(body)))
	code = append(code, body...)
	mod := []byte("\x00asm\x01\x00\x00\x00")
	mod = append(mod, 1, 4, 1, 0x60, 0, 0) // type func()
	mod = append(mod, 3, 2, 1, 0)          // one function
	mod = append(mod, 5, 3, 1, 0, 1)       // memory 1
	mod = append(mod, 7, 19, 2, 6, '_', 's', 't', 'a', 'r', 't', 0, 0, 6, 'm', 'e', 'm', 'o', 'r', 'y', 2, 0)
	mod = append(mod, 10)
	mod = wasmbin.AppendU32(mod, uint32(len(code)))
	return append(mod, code...)
}

// Small modules that would keep wazero's compiler busy for seconds to
// hours are refused before compiling.
func TestCompileRefusesCompileBombs(t *testing.T) {
	nested := []byte{0}
	for i := 0; i < 16000; i++ {
		nested = append(nested, 0x03, 0x40) // loop
	}
	nested = append(nested, bytes.Repeat([]byte{0x0b}, 16001)...)

	localsTimesBlocks := []byte{1}
	localsTimesBlocks = wasmbin.AppendU32(localsTimesBlocks, 10000)
	localsTimesBlocks = append(localsTimesBlocks, wasmbin.ValI32)
	localsTimesBlocks = append(localsTimesBlocks, bytes.Repeat([]byte{0x02, 0x40, 0x0b}, 1000)...)
	for i := uint32(0); i < 10000; i++ {
		localsTimesBlocks = append(localsTimesBlocks, 0x20)
		localsTimesBlocks = wasmbin.AppendU32(localsTimesBlocks, i)
		localsTimesBlocks = append(localsTimesBlocks, 0x1a)
	}
	localsTimesBlocks = append(localsTimesBlocks, 0x0b)

	r := newRuntime(t, Config{DisableCache: true})
	for name, body := range map[string][]byte{"16,000 nested loops": nested, "10,000 locals read after 1,000 blocks": localsTimesBlocks} {
		t.Run(name, func(t *testing.T) {
			_, err := r.Compile(context.Background(), oneFunction(body))
			if !errors.Is(err, ErrCompile) || !strings.Contains(err.Error(), "too costly to compile") {
				t.Fatalf("err = %v, want ErrCompile for the compile cost", err)
			}
		})
	}
	// Ordinary code is far within the budget.
	for _, wasm := range [][]byte{probe(t), wordcount(t)} {
		m, err := wasmbin.Parse(wasm)
		if err != nil {
			t.Fatal(err)
		}
		if budget := compileBudget(m.Size); m.CompileCost*10 > budget {
			t.Errorf("a Go module scores %d, within a tenth of its budget %d", m.CompileCost, budget)
		}
	}
}

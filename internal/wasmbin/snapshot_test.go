package wasmbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// watText assembles WebAssembly text given inline, with wat2wasm
// (testguest.WAT caches by file and wants files inside the module).
func watText(t *testing.T, text string) []byte {
	t.Helper()
	dir := t.TempDir()
	in, out := filepath.Join(dir, "m.wat"), filepath.Join(dir, "m.wasm")
	if err := os.WriteFile(in, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("wat2wasm", "--enable-all", "-o", out, in).CombinedOutput(); err != nil {
		t.Fatalf("wat2wasm (Debian package wabt; scripts/setup.sh installs it): %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGlobalsAndStart(t *testing.T) {
	m, err := Parse(watText(t, `(module
		(import "env" "g" (global i32))
		(global i32 (i32.const 1))
		(global (mut i64) (i64.const 2))
		(global (mut f64) (f64.const 3))
		(func $f)
		(start $f))`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Global{{ValI32, false}, {ValI64, true}, {ValF64, true}}
	if len(m.Globals) != len(want) {
		t.Fatalf("Globals = %+v, want %+v", m.Globals, want)
	}
	for i := range want {
		if m.Globals[i] != want[i] {
			t.Fatalf("Globals = %+v, want %+v", m.Globals, want)
		}
	}
	if m.GlobalImports != 1 || !m.HasStart {
		t.Fatalf("GlobalImports = %d, HasStart = %v; want 1, true", m.GlobalImports, m.HasStart)
	}
	m, err = Parse(watText(t, `(module (func))`))
	if err != nil || m.HasStart || len(m.Globals) != 0 {
		t.Fatalf("module without start or globals: %+v, %v", m, err)
	}
	// An invalid mutability byte is refused.
	bad := module(sec(SecGlobal, []byte{1, ValI32, 2, 0x41, 0, 0x0b}))
	if _, err := Parse(bad); err == nil || !strings.Contains(err.Error(), "mutability") {
		t.Fatalf("Parse of mutability 2: %v", err)
	}
}

func TestMutatesTables(t *testing.T) {
	const head = `(module (table $t 2 funcref) (elem $e func $f) (func $f) (type $v (func))
		(func (param i32) `
	for body, want := range map[string]bool{
		`(table.set $t (i32.const 0) (ref.null func))`:                 true,
		`(drop (table.grow $t (ref.null func) (i32.const 1)))`:         true,
		`(table.fill $t (i32.const 0) (ref.null func) (i32.const 1))`:  true,
		`(table.copy $t $t (i32.const 0) (i32.const 1) (i32.const 1))`: true,
		`(table.init $t $e (i32.const 0) (i32.const 0) (i32.const 1))`: true,
		`(elem.drop $e)`: true,
		`(drop (table.get $t (i32.const 0))) (drop (table.size $t)) (call_indirect (type $v) (i32.const 0))`: false,
	} {
		m, err := Parse(watText(t, head+body+"))"))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if m.MutatesTables != want {
			t.Errorf("%s: MutatesTables = %v, want %v", body, m.MutatesTables, want)
		}
		for _, s := range m.Sections {
			if s.ID == SecCode {
				if c, err := ScanCode(s); err != nil || c.MutatesTables != want {
					t.Errorf("%s: ScanCode = %v, %v", body, c.MutatesTables, err)
				}
			}
		}
	}
}

func TestAddExports(t *testing.T) {
	extra := []Export{{Name: "agrun.g0", Kind: KindGlobal, Index: 0}, {Name: "agrun.g1", Kind: KindGlobal, Index: 1}}
	for name, text := range map[string]string{
		"with exports": `(module (global (mut i32) (i32.const 0)) (global (mut i64) (i64.const 0))
			(memory (export "memory") 1) (func (export "f")) (data (i32.const 0) "x"))`,
		"without exports": `(module (global (mut i32) (i32.const 0)) (global (mut i64) (i64.const 0))
			(memory 1) (func) (start 0) (data (i32.const 0) "x"))`,
		"nothing after": `(module (global (mut i32) (i32.const 0)) (global (mut i64) (i64.const 0)))`,
	} {
		t.Run(name, func(t *testing.T) {
			b := watText(t, text)
			m, err := Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			out, err := AddExports(b, m, extra)
			if err != nil {
				t.Fatal(err)
			}
			m2, err := Parse(out)
			if err != nil {
				t.Fatalf("the result does not parse: %v", err)
			}
			want := append(append([]Export(nil), m.Exports...), extra...)
			if len(m2.Exports) != len(want) {
				t.Fatalf("exports %+v, want %+v", m2.Exports, want)
			}
			for i := range want {
				if m2.Exports[i] != want[i] {
					t.Fatalf("exports %+v, want %+v", m2.Exports, want)
				}
			}
			if len(m2.Data) != len(m.Data) || m2.HasStart != m.HasStart || len(m2.Globals) != 2 {
				t.Fatalf("other sections changed: %+v", m2)
			}
			if _, err := AddExports(out, m2, extra[:1]); err == nil {
				t.Fatal("AddExports accepted a name that is already exported")
			}
		})
	}
}

package wasmbin

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/testguest"
)

// fixture returns testdata/wat/<name>.wasm, assembled from its .wat beside
// it (scripts/build-wat.sh).
func fixture(t *testing.T, name string) []byte {
	t.Helper()
	return testguest.WAT(t, filepath.Join("testdata", "wat", name+".wat"))
}

func TestGlobalsAndStart(t *testing.T) {
	m, err := Parse(fixture(t, "globals"))
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
	m, err = Parse(fixture(t, "onefunc"))
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
	for name, want := range map[string]bool{
		"tableset":  true,
		"tablegrow": true,
		"tablefill": true,
		"tablecopy": true,
		"tableinit": true,
		"elemdrop":  true,
		"tableread": false, // table.get, table.size, call_indirect
	} {
		m, err := Parse(fixture(t, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m.MutatesTables != want {
			t.Errorf("%s: MutatesTables = %v, want %v", name, m.MutatesTables, want)
		}
		for _, s := range m.Sections {
			if s.ID == SecCode {
				if c, err := ScanCode(s); err != nil || c.MutatesTables != want {
					t.Errorf("%s: ScanCode = %v, %v", name, c.MutatesTables, err)
				}
			}
		}
	}
}

func TestAddExports(t *testing.T) {
	extra := []Export{{Name: "agrun.g0", Kind: KindGlobal, Index: 0}, {Name: "agrun.g1", Kind: KindGlobal, Index: 1}}
	for name, file := range map[string]string{
		"with exports":    "exports_with",
		"without exports": "exports_without",
		"nothing after":   "exports_nothingafter",
	} {
		t.Run(name, func(t *testing.T) {
			b := fixture(t, file)
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

package wasmbin

import (
	"bytes"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/testguest"
)

// watFiles are the runtime's test modules, the fuzz seeds and the modules
// the tests below parse.
func watFiles(tb testing.TB) []string {
	files, err := filepath.Glob("../../runtime/testdata/wat/*.wat")
	if err != nil || len(files) == 0 {
		tb.Fatalf("no .wat files: %v", err)
	}
	return files
}

func wat(tb testing.TB, name string) []byte {
	return testguest.WAT(tb, filepath.Join("../../runtime/testdata/wat", name+".wat"))
}

// FuzzParse: Parse never panics and never accepts what it cannot follow;
// every error wraps ErrMalformed; ParseLenient accepts what Parse accepts
// and reads the same imports, exports, tables and memories; ParseImports
// reads all ParseLenient does but the code; a module with
// its data segments merged,
// or its data section stripped, parses again; ScanCode agrees with Parse
// on the code section of an accepted module.
func FuzzParse(f *testing.F) {
	for _, file := range watFiles(f) {
		f.Add(testguest.WAT(f, file))
	}
	f.Add([]byte(Header))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, lerr := ParseLenient(b)
		if lerr != nil && !errors.Is(lerr, ErrMalformed) {
			t.Fatalf("ParseLenient: error %v (%T) does not wrap ErrMalformed", lerr, lerr)
		}
		h, herr := ParseImports(b)
		if lerr == nil {
			withoutCode := *d
			withoutCode.Code = Code{}
			if herr != nil || !reflect.DeepEqual(*h, withoutCode) {
				t.Fatalf("ParseImports reads what ParseLenient reads differently (%v):\n%+v\n%+v", herr, h, d)
			}
		} else if herr == nil || herr.Error() != lerr.Error() {
			t.Fatalf("ParseImports: %v, ParseLenient: %v", herr, lerr)
		}
		m, err := Parse(b)
		if err == nil && (lerr != nil || !reflect.DeepEqual(d.Imports, m.Imports) || !reflect.DeepEqual(d.Exports, m.Exports) ||
			!reflect.DeepEqual(d.Tables, m.Tables) || !reflect.DeepEqual(d.Memories, m.Memories) || !reflect.DeepEqual(d.GrownTables, m.GrownTables)) {
			t.Fatalf("Parse accepts what ParseLenient reads differently (%v):\n%+v\n%+v", lerr, d, m)
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v (%T) is not an *Error", err, err)
			}
			return
		}
		if merged, err := MergeData(b, m); err == nil {
			if _, err := Parse(merged); err != nil {
				t.Fatalf("merged module does not parse: %v", err)
			}
		}
		if _, err := Parse(StripSections(b, m.Sections, SecData)); err != nil {
			t.Fatalf("stripped module does not parse: %v", err)
		}
		if out, err := AddExports(b, m, []Export{{Name: "\x00fuzz", Kind: KindMemory}}); err == nil {
			if m2, err := Parse(out); err != nil || len(m2.Exports) != len(m.Exports)+1 {
				t.Fatalf("module with an added export: %v", err)
			}
		}
		if out, err := Instrument(b, MeterOptions{ImportModule: "meter", MaxStack: 1 << 20}); err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrMetering) {
				t.Fatalf("Instrument: %v (%T)", err, err)
			}
		} else if m2, err := Parse(out); err != nil {
			t.Fatalf("instrumented module does not parse: %v", err)
		} else if len(m2.Imports) != len(m.Imports)+2 || len(m2.Exports) != len(m.Exports)+2 || len(m2.Customs) != 0 ||
			len(m2.FuncTypes) != len(m.FuncTypes) || len(m2.Globals) != len(m.Globals)+2 {
			t.Fatalf("instrumented module: %d imports, %d exports, %d customs, %d functions, %d globals; from %d, %d, %d, %d, %d",
				len(m2.Imports), len(m2.Exports), len(m2.Customs), len(m2.FuncTypes), len(m2.Globals),
				len(m.Imports), len(m.Exports), len(m.Customs), len(m.FuncTypes), len(m.Globals))
		}
		for _, s := range m.Sections {
			if s.ID != SecCode {
				continue
			}
			c, err := ScanCode(s)
			if err != nil || len(c.GrownTables) != len(m.GrownTables) || c.UsesDataIndex != m.UsesDataIndex || c.MutatesTables != m.MutatesTables {
				t.Fatalf("ScanCode = %+v, %v; Parse found %+v", c, err, m.Code)
			}
		}
	})
}

func TestLEB128(t *testing.T) {
	for _, tt := range []struct {
		in   string
		bits int
		want int64
		ok   bool
	}{
		{"\x00", 32, 0, true},
		{"\x7f", 32, -1, true},
		{"\x80\x01", 32, 128, true},
		{"\xff\xff\xff\xff\x07", 32, 1<<31 - 1, true},
		{"\x80\x80\x80\x80\x78", 32, -1 << 31, true},
		{"\xff\xff\xff\xff\x0f", 32, 0, false}, // bits past 32 not a sign extension
		{"\x80\x80\x80\x80\x80\x00", 32, 0, false},
		{"\x80", 32, 0, false},
		{"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00", 64, 1<<63 - 1, true},
		{"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x7f", 64, -1 << 63, true},
	} {
		r := NewReader([]byte(tt.in), 0)
		got, err := r.Signed(tt.bits)
		if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
			t.Errorf("Signed(%q, %d) = %d, %v; want %d, ok %v", tt.in, tt.bits, got, err, tt.want, tt.ok)
		}
	}
	for _, tt := range []struct {
		in   string
		want uint32
		ok   bool
	}{
		{"\x00", 0, true}, {"\xff\xff\xff\xff\x0f", 1<<32 - 1, true},
		{"\xff\xff\xff\xff\x1f", 0, false}, {"\x80\x80\x80\x80\x80\x00", 0, false},
	} {
		r := NewReader([]byte(tt.in), 0)
		got, err := r.U32()
		if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
			t.Errorf("U32(%q) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
	// AppendU32/AppendS32 round-trip.
	for _, v := range []uint32{0, 1, 127, 128, 300, 1 << 21, 1<<32 - 1} {
		r := NewReader(AppendU32(nil, v), 0)
		if got, err := r.U32(); err != nil || got != v || !r.EOF() {
			t.Errorf("AppendU32(%d) reads back as %d, %v, %d left", v, got, err, r.Remaining())
		}
	}
	for _, v := range []int32{0, 1, -1, 63, 64, -64, -65, 1 << 30, -1 << 31, 1<<31 - 1} {
		r := NewReader(AppendS32(nil, v), 0)
		if got, err := r.Signed(32); err != nil || got != int64(v) {
			t.Errorf("AppendS32(%d) reads back as %d, %v", v, got, err)
		}
	}
}

// Helpers that assemble modules byte by byte.

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func sec(id byte, payload ...[]byte) []byte {
	p := cat(payload...)
	return cat([]byte{id}, AppendU32(nil, uint32(len(p))), p)
}

func module(sections ...[]byte) []byte { return cat(append([][]byte{[]byte(Header)}, sections...)...) }

// emptyTypes is a type section with no types.
var emptyTypes = sec(SecType, []byte{0})

func TestReadSections(t *testing.T) {
	b := AppendCustomSection([]byte(Header), "first", []byte("one"))
	b = append(b, emptyTypes...)
	b = append(b, sec(SecTag, []byte{0})...) // known to ReadSections, refused by Parse
	b = AppendCustomSection(b, "last", nil)
	secs, err := ReadSections(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(secs) != 4 || secs[0].Name != "first" || string(secs[0].Body) != "one" || secs[3].Name != "last" || len(secs[3].Body) != 0 || secs[2].ID != SecTag {
		t.Fatalf("sections: %+v", secs)
	}
	// The sections tile the module after the header.
	at := len(Header)
	for _, s := range secs {
		if s.Start != at || !bytes.Equal(b[s.End-len(s.Payload):s.End], s.Payload) {
			t.Fatalf("section %+v at %d", s, at)
		}
		at = s.End
	}
	if at != len(b) {
		t.Fatalf("sections end at %d of %d", at, len(b))
	}
	// Appending to a returned slice never writes into the module.
	_ = append(secs[0].Body, 'X')
	if !bytes.Equal(b[secs[1].Start:secs[1].End], emptyTypes) {
		t.Fatal("append to a section body overwrote the module")
	}
	if _, err := Parse(b); err == nil || !strings.Contains(err.Error(), "unknown section id 13") {
		t.Fatalf("Parse of a tag section: %v", err)
	}
	stripped := StripSections(b, secs, SecCustom)
	if want := module(emptyTypes, sec(SecTag, []byte{0})); !bytes.Equal(stripped, want) {
		t.Fatalf("StripSections = %x, want %x", stripped, want)
	}
}

// Modules ReadSections and ParseLenient accept and Parse refuses: Parse is
// stricter, never the other way round.
func TestParseStricter(t *testing.T) {
	for _, tt := range []struct {
		name, want string
		wasm       []byte
	}{
		{"out of order", "out of order", module(sec(SecMemory, []byte{1, 0, 1}), emptyTypes)},
		{"two memories", "exceed the limit of 1", module(sec(SecMemory, []byte{2, 0, 1, 0, 1}))},
		{"shared memory", "shared memory is not supported", module(sec(SecMemory, []byte{1, 3, 1, 2}))},
		{"memory over 4 GiB", "exceed 65536 pages", module(sec(SecMemory, cat([]byte{1, 0}, AppendU32(nil, 65537))))},
		{"unread bytes", "1 unexpected bytes at the end of the start section", module(sec(SecStart, []byte{0, 0}))},
		{"code without functions", "1 function bodies for 0 functions", module(sec(SecCode, []byte{1, 2, 0, 0x0b}))},
		{"tag export", "unknown export kind 0x04", module(sec(SecExport, []byte{1, 1, 'e', 4, 0}))},
		{"tag import", "unknown kind 0x04", module(sec(SecType, []byte{1, 0x60, 0, 0}), sec(SecImport, []byte{1, 1, 'a', 1, 'b', 4, 0, 0}))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ReadSections(tt.wasm); err != nil {
				t.Fatalf("ReadSections: %v", err)
			}
			if _, err := ParseLenient(tt.wasm); err != nil {
				t.Fatalf("ParseLenient: %v", err)
			}
			_, err := Parse(tt.wasm)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse: %v, want ErrMalformed mentioning %q", err, tt.want)
			}
		})
	}
}

// Parse and ScanCode find the tables named by table.grow and table.fill.
func TestGrownTables(t *testing.T) {
	for _, tt := range []struct {
		wat   string
		grown []uint32
	}{
		{"tablegrow", []uint32{0}},
		{"tablefill", []uint32{0}},
		{"tablegrow2", []uint32{1}},
		{"twotables", []uint32{1}},
		{"tablebig", nil},
		{"trap", nil},
	} {
		t.Run(tt.wat, func(t *testing.T) {
			b := wat(t, tt.wat)
			m, err := Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			check := func(who string, got map[uint32]bool) {
				t.Helper()
				if len(got) != len(tt.grown) {
					t.Fatalf("%s: grown tables %v, want %v", who, got, tt.grown)
				}
				for _, i := range tt.grown {
					if !got[i] {
						t.Fatalf("%s: grown tables %v, want %v", who, got, tt.grown)
					}
				}
			}
			check("Parse", m.GrownTables)
			for _, s := range m.Sections {
				if s.ID == SecCode {
					c, err := ScanCode(s)
					if err != nil {
						t.Fatal(err)
					}
					check("ScanCode", c.GrownTables)
				}
			}
		})
	}
	// An opcode outside WebAssembly 2.0 (0xfe: threads) is refused.
	_, err := ScanCode(Section{ID: SecCode, Payload: []byte{1, 4, 0, 0xfe, 0, 0x0b}})
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "unsupported opcode 0xfe") {
		t.Fatalf("ScanCode of atomics: %v", err)
	}
}

func TestMergeAndCustom(t *testing.T) {
	b := wat(t, "data")
	m, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	merged, err := MergeData(b, m)
	if err != nil {
		t.Fatal(err)
	}
	mm, err := Parse(merged)
	if err != nil {
		t.Fatal(err)
	}
	if len(mm.Data) >= len(m.Data) {
		t.Fatalf("%d segments merged into %d", len(m.Data), len(mm.Data))
	}
	if _, err := MergeData(merged, mm); !errors.Is(err, ErrNotMergeable) {
		t.Fatalf("merging again: %v, want ErrNotMergeable", err)
	}
	withCustom := AppendCustomSection(append([]byte(nil), b...), "agrun.manifest", []byte("{}"))
	wm, err := Parse(withCustom)
	if err != nil {
		t.Fatal(err)
	}
	if got := wm.CustomSection("agrun.manifest"); string(got) != "{}" {
		t.Fatalf("CustomSection = %q", got)
	}
	if wm.CustomSection("nope") != nil {
		t.Fatal("CustomSection(nope) is not nil")
	}
}

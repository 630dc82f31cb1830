package wasmtools

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/wasmbin"
)

// Helpers that assemble modules byte by byte, so that every test states
// exactly what it feeds the reader.

const (
	secCustom   = wasmbin.SecCustom
	secType     = wasmbin.SecType
	secImport   = wasmbin.SecImport
	secFunction = wasmbin.SecFunction
	secTable    = wasmbin.SecTable
	secMemory   = wasmbin.SecMemory
	secExport   = wasmbin.SecExport
)

var wasmHeader = []byte(wasmbin.Header)

func leb(v uint32) []byte { return wasmbin.AppendU32(nil, v) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func wname(s string) []byte { return cat(leb(uint32(len(s))), []byte(s)) }

func vec(items ...[]byte) []byte { return cat(append([][]byte{leb(uint32(len(items)))}, items...)...) }

func sec(id byte, payload ...[]byte) []byte {
	p := cat(payload...)
	return cat([]byte{id}, leb(uint32(len(p))), p)
}

func custom(name string, body []byte) []byte { return sec(secCustom, wname(name), body) }

func module(sections ...[]byte) []byte { return cat(append([][]byte{wasmHeader}, sections...)...) }

const (
	i32 = 0x7f
	i64 = 0x7e
)

func functype(params, results []byte) []byte {
	return cat([]byte{0x60}, leb(uint32(len(params))), params, leb(uint32(len(results))), results)
}

// sampleModule has a type section, imports of every kind but tag, a
// function, a table, a memory, exports and custom sections.
func sampleModule() []byte {
	types := sec(secType, vec(
		functype([]byte{i32, i32}, []byte{i32}), // 0: http_request
		functype([]byte{i32, i32, i32}, nil),    // 1: log
		functype(nil, nil),                      // 2: _start
		functype([]byte{i64}, []byte{i32, i64}), // 3: multi-value
	))
	imports := sec(secImport, vec(
		cat(wname("agrun"), wname("http_request"), []byte{0}, leb(0)),
		cat(wname("agrun"), wname("log"), []byte{0}, leb(1)),
		cat(wname("env"), wname("tbl"), []byte{1, 0x70, 0x01}, leb(1), leb(10)),
		cat(wname("env"), wname("mem"), []byte{2, 0x00}, leb(1)),
		cat(wname("env"), wname("g"), []byte{3, i32, 1}),
	))
	funcs := sec(secFunction, vec(leb(2), leb(3)))
	tables := sec(secTable, vec(cat([]byte{0x6f, 0x00}, leb(3))))
	mems := sec(secMemory, vec(cat([]byte{0x01}, leb(17), leb(1024))))
	exports := sec(secExport, vec(
		cat(wname("_start"), []byte{0}, leb(2)),
		cat(wname("multi"), []byte{0}, leb(3)),
		cat(wname("memory"), []byte{2}, leb(1)),
		cat(wname("log"), []byte{0}, leb(1)),
	))
	code := sec(10, vec(cat(leb(2), []byte{0, 0x0b}), cat(leb(7), []byte{0, 0x41, 0, 0x42, 0, 0x0b, 0x0b})[:8]))
	return module(custom("first", []byte("one")), types, imports, funcs, tables, mems, exports, code, custom("last", nil))
}

func TestReadSectionsMalformed(t *testing.T) {
	ok := sampleModule()
	tests := []struct {
		name string
		wasm []byte
		want string
	}{
		{"empty", nil, "bad magic"},
		{"not wasm", []byte("#!/bin/sh\necho hi\n"), "bad magic"},
		{"version 2", cat([]byte("\x00asm"), []byte{2, 0, 0, 0}), "version"},
		{"truncated section", ok[:len(ok)-1], "exceeds"},
		{"size beyond end", module([]byte{secType}, leb(1000), []byte{0}), "declares 1000 bytes"},
		{"unknown id", module([]byte{99, 0}), "unknown section id 99"},
		{"leb too long", module([]byte{secType, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}), "integer too large"},
		{"leb too large", module([]byte{secType, 0xff, 0xff, 0xff, 0xff, 0x7f}), "too large"},
		{"missing size", module([]byte{secType}), "unexpected end"},
		{"custom name not utf-8", module(sec(secCustom, []byte{2, 0xff, 0xfe})), "UTF-8"},
		{"custom name beyond payload", module(sec(secCustom, []byte{9, 'a'})), "name bytes cannot fit"},
		{"duplicate type section", module(sec(secType, vec()), sec(secType, vec())), "appears twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readSections(tc.wasm)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrMalformed mentioning %q", err, tc.want)
			}
		})
	}
	secs, err := readSections(ok)
	if err != nil {
		t.Fatal(err)
	}
	if len(secs) != 9 || secs[0].Name != "first" || string(secs[0].Body) != "one" || secs[8].Name != "last" || len(secs[8].Body) != 0 {
		t.Fatalf("sections: %+v", secs)
	}
	// The sections tile the module after the header.
	at := len(wasmHeader)
	for _, s := range secs {
		if s.Start != at {
			t.Fatalf("section at %d, want %d", s.Start, at)
		}
		at = s.End
	}
	if at != len(ok) {
		t.Fatalf("sections end at %d of %d", at, len(ok))
	}
}

// Inspect reports which tables the code grows, counting imported tables
// in the index space, and stays lenient: code the runtime's reader cannot
// decode leaves Grows false instead of failing.
func TestInspectTableGrows(t *testing.T) {
	types := sec(secType, vec(functype(nil, nil)))
	imports := sec(secImport, vec(cat(wname("env"), wname("tbl"), []byte{1, 0x70, 0x00}, leb(1))))
	funcs := sec(secFunction, vec(leb(0)))
	tables := sec(secTable, vec(cat([]byte{0x70, 0x00}, leb(1)), cat([]byte{0x70, 0x01}, leb(1), leb(4))))
	grow2 := []byte{0, 0xd0, 0x70, 0x41, 1, 0xfc, 15, 2, 0x1a, 0x0b} // table.grow 2
	body := func(b []byte) []byte { return sec(10, vec(cat(leb(uint32(len(b))), b))) }
	for _, tt := range []struct {
		name  string
		wasm  []byte
		grows []bool
	}{
		{"grows table 2", module(types, imports, funcs, tables, body(grow2)), []bool{false, false, true}},
		{"fills table 0", module(types, imports, funcs, tables, body([]byte{0, 0x41, 0, 0xd0, 0x70, 0x41, 1, 0xfc, 17, 0, 0x0b})), []bool{true, false, false}},
		{"no code", module(types, imports, tables), []bool{false, false, false}},
		// 0xfe (threads) is outside WebAssembly 2.0: Load refuses it,
		// Inspect still describes the module.
		{"undecodable code", module(types, imports, funcs, tables, body(append([]byte{0, 0xfe, 3, 0}, grow2[1:]...))), []bool{false, false, false}},
		// Sections out of order: the runtime refuses the module, Inspect
		// describes it, and the code is still scanned.
		{"out of order", module(types, imports, funcs, body(grow2), tables), []bool{false, false, true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			info, err := Inspect(tt.wasm)
			if err != nil {
				t.Fatal(err)
			}
			if len(info.Tables) != len(tt.grows) {
				t.Fatalf("tables: %+v", info.Tables)
			}
			for i, want := range tt.grows {
				if info.Tables[i].Grows != want {
					t.Errorf("table %d: Grows = %v, want %v", i, info.Tables[i].Grows, want)
				}
			}
		})
	}
}

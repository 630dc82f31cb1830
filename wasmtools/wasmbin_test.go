package wasmtools

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// Helpers that assemble modules byte by byte, so that every test states
// exactly what it feeds the reader.

func leb(v uint32) []byte { return appendU32(nil, v) }

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
	if len(secs) != 9 || secs[0].name != "first" || string(secs[0].body) != "one" || secs[8].name != "last" || len(secs[8].body) != 0 {
		t.Fatalf("sections: %+v", secs)
	}
	// The sections tile the module after the header.
	at := len(wasmHeader)
	for _, s := range secs {
		if s.start != at {
			t.Fatalf("section at %d, want %d", s.start, at)
		}
		at = s.end
	}
	if at != len(ok) {
		t.Fatalf("sections end at %d of %d", at, len(ok))
	}
}

func TestAppendU32(t *testing.T) {
	for _, v := range []uint32{0, 1, 127, 128, 300, 1 << 21, 1<<32 - 1} {
		r := &binReader{b: leb(v)}
		got, err := r.u32()
		if err != nil || got != v || r.left() != 0 {
			t.Fatalf("%d: got %d, %v, %d left", v, got, err, r.left())
		}
	}
}

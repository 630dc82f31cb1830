package runtime

import (
	"path/filepath"
	"testing"

	"github.com/agcore/agrun/internal/testguest"
)

// FuzzParseModule: the parser never panics and never accepts what it
// cannot follow; a merged module parses again.
func FuzzParseModule(f *testing.F) {
	files, _ := filepath.Glob("testdata/wat/*.wat")
	for _, file := range files {
		f.Add(testguest.WAT(f, file))
	}
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseModule(b)
		if err != nil {
			return
		}
		if merged, err := mergeData(b, m); err == nil {
			if _, err := parseModule(merged); err != nil {
				t.Fatalf("merged module does not parse: %v", err)
			}
		}
		if _, ok := buildImage(m); ok {
			if _, err := parseModule(stripData(b, m)); err != nil {
				t.Fatalf("stripped module does not parse: %v", err)
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
		r := &reader{b: []byte(tt.in)}
		got, err := r.signed(tt.bits)
		if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
			t.Errorf("signed(%q, %d) = %d, %v; want %d, ok %v", tt.in, tt.bits, got, err, tt.want, tt.ok)
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
		r := &reader{b: []byte(tt.in)}
		got, err := r.u32()
		if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
			t.Errorf("u32(%q) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
	// appendU32/appendS32 round-trip.
	for _, v := range []int32{0, 1, -1, 63, 64, -64, -65, 1 << 30, -1 << 31, 1<<31 - 1} {
		r := &reader{b: appendS32(nil, v)}
		if got, err := r.signed(32); err != nil || got != int64(v) {
			t.Errorf("appendS32(%d) reads back as %d, %v", v, got, err)
		}
	}
}

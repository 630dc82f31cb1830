package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"testing"

	"oras.land/oras-go/v2/content"
)

// FuzzParseRef: any text is parsed or refused with ErrReference, never a
// panic, and what parses prints back as it was read.
func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"ghcr.io/a/b:1", "localhost:5000/x@sha256:" + string(bytes.Repeat([]byte("a"), 64)), "a/b:c@sha256:", "x", "/:@"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRef(s)
		if err != nil {
			if !errors.Is(err, ErrReference) {
				t.Fatalf("ParseRef(%q): %v, not ErrReference", s, err)
			}
			return
		}
		if r.String() != s {
			t.Fatalf("ParseRef(%q).String() = %q", s, r.String())
		}
	})
}

// FuzzTarLayer: a hostile (gzip) tar layer, whose digest matches, is
// unpacked or refused with a sentinel; never a panic, never a module over
// the limit.
func FuzzTarLayer(f *testing.F) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: "plugin.wasm", Mode: 0o644, Size: 8, Typeflag: tar.TypeReg})
	tw.Write([]byte("\x00asm\x01\x00\x00\x00"))
	tw.Close()
	zw.Close()
	f.Add(buf.Bytes())
	f.Add([]byte{0x1f, 0x8b})
	const max = 4096
	f.Fuzz(func(t *testing.T, b []byte) {
		layer := content.NewDescriptorFromBytes(mediaTypeTarGzip, b)
		wasm, err := tarLayer(true)(bytes.NewReader(b), layer, max)
		if err != nil {
			for _, s := range []error{ErrMediaType, ErrTooLarge, ErrNoPlugin, ErrDigest} {
				if errors.Is(err, s) {
					return
				}
			}
			t.Fatalf("refused with %v: not one of the sentinels", err)
		}
		if len(wasm) > max {
			t.Fatalf("unpacked %d bytes, the limit %d", len(wasm), max)
		}
	})
}

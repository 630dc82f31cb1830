package wasmtools

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// FuzzParseManifest: ParseManifest never panics, every error is a
// *ManifestError, and an accepted manifest survives Pack and Inspect
// unchanged (and re-encodes to a document that parses to the same value).
// Seeds are in testdata/fuzz/FuzzParseManifest.
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(`{"name":"get_weather","version":"1.0.0","description":"Current weather for a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"permissions":["network"],"output":"json"}`))
	f.Add([]byte(`{"name":"x","description":"d","output":"text","permissions":["custom:a.b","filesystem","read"]}`))
	f.Add([]byte(`{"name":"x","description":"d","parameters":{"type":"object","properties":{"a":{"$ref":"#/$defs/b"}},"$defs":{"b":{"type":"integer","minimum":1e400}}}}`))
	f.Add([]byte(`{"name":"x","name":"x","description":"d"}`))
	base := module(sec(secType, vec(functype(nil, nil))), custom("keep", []byte("k")))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if !checkParsed(t, m, err) {
			return
		}
		packed, err := Pack(base, m)
		if err != nil {
			t.Fatalf("Pack refused an accepted manifest: %v", err)
		}
		info, err := Inspect(packed)
		if err != nil || info.Manifest == nil || !reflect.DeepEqual(*info.Manifest, m) {
			t.Fatalf("Inspect after Pack: %+v, %v, %v", info.Manifest, info.ManifestError, err)
		}
	})
}

// FuzzInspect: Inspect never panics on any bytes, and a module it accepts
// can be packed, after which Inspect sees the same structure and the new
// manifest. Seeds are in testdata/fuzz/FuzzInspect.
func FuzzInspect(f *testing.F) {
	f.Add(sampleModule())
	f.Add(module(custom(manifestName, []byte(`{"name":"a","description":"d"}`))))
	f.Add(module(sec(secImport, leb(1<<32-1))))
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	m := Manifest{Name: "fuzz", Description: "d"}
	f.Fuzz(func(t *testing.T, wasm []byte) {
		info, err := Inspect(wasm)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if info.Size != len(wasm) {
			t.Fatalf("size %d, want %d", info.Size, len(wasm))
		}
		packed, err := Pack(wasm, m)
		if err != nil {
			t.Fatalf("Pack refused a module Inspect accepted: %v", err)
		}
		after, err := Inspect(packed)
		if err != nil {
			t.Fatalf("Inspect after Pack: %v", err)
		}
		if after.Manifest == nil || after.Manifest.Name != "fuzz" {
			t.Fatalf("manifest after Pack: %+v, %v", after.Manifest, after.ManifestError)
		}
		if !reflect.DeepEqual(info.Imports, after.Imports) || !reflect.DeepEqual(info.Exports, after.Exports) ||
			!reflect.DeepEqual(info.Memories, after.Memories) || !reflect.DeepEqual(info.Tables, after.Tables) {
			t.Fatal("Pack changed the module's structure")
		}
		if !bytes.HasPrefix(packed, wasm[:8]) {
			t.Fatal("Pack changed the header")
		}
	})
}

// checkParsed checks the outcome of a manifest parser on fuzzed input: an
// error is a *ManifestError, and an accepted manifest re-encodes to JSON
// that ParseManifest reads back as the same manifest. It reports whether
// the manifest was accepted.
func checkParsed(t *testing.T, m Manifest, err error) bool {
	t.Helper()
	if err != nil {
		var me *ManifestError
		if !errors.As(err, &me) || !errors.Is(err, ErrInvalidManifest) {
			t.Fatalf("error %v (%T) is not a *ManifestError", err, err)
		}
		return false
	}
	body, err := m.MarshalJSON()
	if err != nil {
		t.Fatalf("accepted manifest does not encode: %v", err)
	}
	again, err := ParseManifest(body)
	if err != nil || !reflect.DeepEqual(again, m) {
		t.Fatalf("re-encoded manifest %s parses to %+v, %v; want %+v", body, again, err, m)
	}
	return true
}

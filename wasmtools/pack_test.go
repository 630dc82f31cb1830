package wasmtools

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"

	"github.com/agcore/agrun/permission"
)

func weatherManifest() Manifest {
	return Manifest{
		Name: "get_weather", Version: "1.0.0", Description: "Current weather for a city",
		Parameters:  json.RawMessage(`{"type":"object", "properties":{"city":{"type":"string"}},"required":["city"]}`),
		Permissions: []permission.Permission{permission.Network},
	}
}

func TestPackInspectRoundTrip(t *testing.T) {
	wasm := sampleModule()
	m := weatherManifest()
	packed, err := Pack(wasm, m)
	if err != nil {
		t.Fatal(err)
	}
	info, err := Inspect(packed)
	if err != nil {
		t.Fatal(err)
	}
	if info.ManifestError != nil || info.Manifest == nil {
		t.Fatalf("manifest %v, error %v", info.Manifest, info.ManifestError)
	}
	if want := m.normalized(); !reflect.DeepEqual(*info.Manifest, want) {
		t.Fatalf("got  %+v\nwant %+v", *info.Manifest, want)
	}
	if string(info.Manifest.Parameters) != `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}` || info.Manifest.Output != "json" {
		t.Fatalf("not normalized: %+v", info.Manifest)
	}
	// Everything else Inspect sees is the same as before packing.
	before, _ := Inspect(wasm)
	if !reflect.DeepEqual(before.Imports, info.Imports) || !reflect.DeepEqual(before.Exports, info.Exports) || !reflect.DeepEqual(before.Memories, info.Memories) {
		t.Fatal("packing changed the module's structure")
	}
	if !reflect.DeepEqual(info.CustomSections, []string{"first", "last", manifestName}) {
		t.Fatalf("custom sections %v", info.CustomSections)
	}
	// The body is the manifest's compact JSON.
	body, err := manifestSection(packed)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"name":"get_weather","version":"1.0.0","description":"Current weather for a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"permissions":["network"],"output":"json"}`; string(body) != want {
		t.Fatalf("body %s", body)
	}
	// The original is untouched.
	if !bytes.Equal(wasm, sampleModule()) {
		t.Fatal("Pack modified its input")
	}
}

// TestPackReplacesKeepingOtherBytes: every agrun.manifest section goes, the
// new one is appended, and every other byte stays where it was relative to
// its neighbours.
func TestPackReplacesKeepingOtherBytes(t *testing.T) {
	old1 := custom(manifestName, []byte(`{"name":"old","description":"d"}`))
	old2 := custom(manifestName, []byte(`not even json`))
	a := custom("a", []byte("keep me \x00\xff"))
	types := sec(secType, vec(functype(nil, nil)))
	mem := sec(secMemory, vec(cat([]byte{0}, leb(1))))
	b := custom("name", []byte{0, 1, 2})
	wasm := module(a, old1, types, mem, old2, b)
	packed, err := Pack(wasm, weatherManifest())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := weatherManifest().normalized().MarshalJSON()
	want := cat(module(a, types, mem, b), custom(manifestName, body))
	if !bytes.Equal(packed, want) {
		t.Fatalf("packed module differs from the expected bytes\n got %x\nwant %x", packed, want)
	}
	// Packing again replaces, it does not accumulate.
	other := weatherManifest()
	other.Name, other.Output = "renamed", "text"
	again, err := Pack(packed, other)
	if err != nil {
		t.Fatal(err)
	}
	direct, _ := Pack(wasm, other)
	if !bytes.Equal(again, direct) {
		t.Fatal("Pack(Pack(w, a), b) != Pack(w, b)")
	}
	info, _ := Inspect(again)
	if info.Manifest == nil || info.Manifest.Name != "renamed" || info.Manifest.Output != "text" {
		t.Fatalf("after repack: %+v %v", info.Manifest, info.ManifestError)
	}
	// Deterministic.
	again2, _ := Pack(packed, other)
	if !bytes.Equal(again, again2) {
		t.Fatal("Pack is not deterministic")
	}
}

// TestPackExamples repacks the committed example tools with their own
// manifests: the result must be the committed file, byte for byte.
func TestPackExamples(t *testing.T) {
	for _, name := range []string{"word_count", "get_weather", "read_file", "write_note", "sum_c"} {
		t.Run(name, func(t *testing.T) {
			wasm, err := os.ReadFile("../testdata/" + name + ".wasm")
			if err != nil {
				t.Fatal(err)
			}
			m, err := ReadManifestFile(manifestPath(t, name))
			if err != nil {
				t.Fatal(err)
			}
			packed, err := Pack(wasm, m)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(packed, wasm) {
				t.Fatalf("repacking %s with its manifest changed it (%d -> %d bytes)", name, len(wasm), len(packed))
			}
		})
	}
}

func TestPackErrors(t *testing.T) {
	if _, err := Pack(sampleModule(), Manifest{Name: "bad name", Description: "d"}); !errors.Is(err, ErrInvalidManifest) {
		t.Fatalf("invalid manifest: %v", err)
	}
	if _, err := Pack([]byte("\x00asm\x01\x00\x00\x00\x01\x05"), weatherManifest()); !errors.Is(err, ErrMalformed) {
		t.Fatalf("malformed module: %v", err)
	}
	if _, err := Pack(nil, weatherManifest()); !errors.Is(err, ErrMalformed) {
		t.Fatalf("empty: %v", err)
	}
}

package wasmtools

import (
	"testing"

	"github.com/BurntSushi/toml"
)

// FuzzParseManifestTOML: a manifest.toml (a third-party tool's, named by
// `manifest =` in agrun.toml, or given to `agrun pack -m`) never panics
// the parser, every error is a *ManifestError, and an accepted manifest
// means the same as its JSON encoding; and the depth checkTOMLDepth counts
// on the bytes never falls short of the decoded document's (that check is
// what keeps deep nesting, slow in BurntSushi/toml, from the decoder:
// internal/testing/hostile TestManifestTOMLNesting). Inputs are capped at 4 KiB.
// (Part of the hostile-input suite; see internal/testing/hostile and
// docs/SECURITY.md.)
// Seeds: testdata/fuzz/FuzzParseManifestTOML.
func FuzzParseManifestTOML(f *testing.F) {
	f.Add([]byte("name = \"get_weather\"\nversion = \"1.0.0\"\ndescription = \"Weather\"\npermissions = [\"network\"]\noutput = \"json\"\n[parameters]\ntype = \"object\"\nrequired = [\"city\"]\n[parameters.properties.city]\ntype = \"string\"\n"))
	f.Add([]byte("name = \"x\"\ndescription = \"d\"\nname = \"y\"\n"))
	f.Add([]byte("name = \"x\"\ndescription = \"d\"\n[parameters]\ntype = \"object\"\nminimum = 1979-05-27T07:32:00Z\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4<<10 {
			return
		}
		if counted, _ := tomlDepth(data, 2*maxTOMLDepth); counted <= 2*maxTOMLDepth {
			var v map[string]any
			if _, err := toml.Decode(string(data), &v); err == nil {
				if d := decodedDepth(v, 0); d > counted {
					t.Fatalf("decodes %d deep; checkTOMLDepth counted %d", d, counted)
				}
			}
		}
		m, err := ParseManifestTOML(data)
		checkParsed(t, m, err)
	})
}

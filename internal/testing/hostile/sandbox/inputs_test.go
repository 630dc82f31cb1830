package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/hostile"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// TestManifests: manifests written to deceive are refused at load (or at
// registration) with a typed error, and what is accepted is what the
// sandbox enforces.
func TestManifests(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	refHits := hostile.NewPeer(t, nil)
	bare := hostile.HostileWasm(t)
	m := func(s string) []byte { return hostile.WithSection(bare, "agrun.manifest", []byte(s)) }
	ok := `{"name":"x","description":"d"}`
	for _, c := range []struct {
		name string
		wasm []byte
	}{
		{"oversize", m(`{"name":"x","description":"` + strings.Repeat("a", 70<<10) + `"}`)},
		{"duplicate keys", m(`{"name":"x","name":"word_count","description":"d"}`)},
		{"duplicate nested keys", m(`{"name":"x","description":"d","parameters":{"type":"object","type":"string"}}`)},
		{"not JSON", m(`name = "x"`)},
		{"not UTF-8", m("{\"name\":\"x\",\"description\":\"\xff\"}")},
		{"trailing data", m(ok + `{"name":"y"}`)},
		{"unknown field", m(`{"name":"x","description":"d","grant":{"allowed_hosts":["*"]}}`)},
		{"null field", m(`{"name":"x","description":"d","permissions":null}`)},
		{"deep nesting", m(`{"name":"x","description":"d","parameters":{"type":"object","properties":` + strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat(`}`, 5000) + `}}`)},
		{"name with a path", m(`{"name":"../../etc/passwd","description":"d"}`)},
		{"name with a space", m(`{"name":"word count","description":"d"}`)},
		{"name with a homoglyph", m(`{"name":"w\u043erd_count","description":"d"}`)},
		{"name with NUL", m(`{"name":"x\u0000","description":"d"}`)},
		{"name of 65 bytes", m(`{"name":"` + strings.Repeat("a", 65) + `","description":"d"}`)},
		{"empty name", m(`{"name":"","description":"d"}`)},
		{"escape in the description", m(`{"name":"x","description":"\u001b[2Jhi\u202e\u200b"}`)},
		{"unknown permission", m(`{"name":"x","description":"d","permissions":["root"]}`)},
		{"permission listed twice", m(`{"name":"x","description":"d","permissions":["network","network"]}`)},
		{"wrong output", m(`{"name":"x","description":"d","output":"binary"}`)},
		{"two manifest sections", hostile.WithSection(m(ok), "agrun.manifest", []byte(`{"name":"y","description":"d","permissions":["network"]}`))},
		{"schema $ref to a file", m(`{"name":"x","description":"d","parameters":{"type":"object","$ref":"file:///etc/passwd"}}`)},
		{"schema $ref to a URL", m(`{"name":"x","description":"d","parameters":{"type":"object","properties":{"a":{"$ref":"` + refHits.URL + `/schema.json"}}}}`)},
		{"schema $id rebasing to a URL", m(`{"name":"x","description":"d","parameters":{"type":"object","$id":"` + refHits.URL + `/","properties":{"a":{"$ref":"other.json"}}}}`)},
		{"schema not an object type", m(`{"name":"x","description":"d","parameters":{"type":"string"}}`)},
		{"schema with a bad regex", m(`{"name":"x","description":"d","parameters":{"type":"object","properties":{"a":{"type":"string","pattern":"(("}}}}`)},
		{"shadowing an existing tool", m(`{"name":"word_count","description":"d"}`)},
		{"no manifest", bare},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := f.Snapshot(t)
			tool, err := wasmtools.Load(context.Background(), f.Rt, c.wasm, wasmtools.Grant{})
			if err == nil {
				err = f.Reg.Register(tool)
				tool.Close(context.Background())
			}
			if err == nil {
				t.Errorf("accepted: %s", tool.Name())
				f.Reg.Unregister(tool.Name())
			} else {
				hostile.CheckModelText(t, err.Error())
			}
			if c.name == "escape in the description" {
				// Refused at load, naming the field, not cleaned silently.
				var me *wasmtools.ManifestError
				if !errors.As(err, &me) || me.Field != "description" {
					t.Errorf("error %v (%T); want a *wasmtools.ManifestError for the description", err, err)
				}
			}
			if refHits.Hits.Load() != 0 {
				t.Errorf("a schema reference was fetched")
			}
			f.After(t, before, hostile.Outcome{}, "")
		})
	}

	t.Run("pinned hash mismatch", func(t *testing.T) {
		before := f.Snapshot(t)
		wasm := hostile.Pack(t, bare, "pinned")
		sum := sha256.Sum256(append(wasm, 0))
		_, err := wasmtools.Load(context.Background(), f.Rt, wasm, wasmtools.Grant{SHA256: hex.EncodeToString(sum[:])})
		if !errors.Is(err, wasmtools.ErrIntegrity) {
			t.Errorf("error %v; want ErrIntegrity", err)
		}
		f.After(t, before, hostile.Outcome{}, "")
	})

	// Lying permissions: what a manifest declares is checked against the
	// operator's policy before anything runs, and what it does not declare
	// it does not get.
	t.Run("declares shell, which the policy denies", func(t *testing.T) {
		f.Register(t, f.Load(t, hostile.Pack(t, bare, "liar_shell", "shell"), wasmtools.Grant{}))
		before := f.Snapshot(t)
		f.After(t, before, hostile.Inv(f.Reg.Invoke(context.Background(), "liar_shell", hostile.ArgsJSON(t, map[string]any{"op": "spin"}))), registry.PermissionDenied)
	})
	t.Run("declares nothing, calls the network", func(t *testing.T) {
		f.Register(t, f.Load(t, hostile.Pack(t, bare, "liar_net"), wasmtools.Grant{AllowedHosts: []string{refHits.Host}, AllowPrivate: true}))
		before := f.Snapshot(t)
		f.After(t, before, hostile.Inv(f.Reg.Invoke(context.Background(), "liar_net", hostile.ArgsJSON(t, map[string]any{"op": "http", "url": refHits.URL}))), registry.PermissionDenied)
		if refHits.Hits.Load() != 0 {
			t.Errorf("the undeclared request reached the server")
		}
	})
}

// TestArguments: arguments a model (or an attacker speaking through one)
// writes are validated strictly before any tool runs. The hostile tool's
// schema is {"type":"object"}, so only the decoder stands in the way; had
// it run, "spin" would end in timeout instead of invalid_arguments.
func TestArguments(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	f.Hostile(t, "h", wasmtools.Grant{Limits: runtime.Limits{Timeout: hostile.CallTimeout}})
	deep := strings.Repeat(`{"a":`, 100000) + `1` + strings.Repeat(`}`, 100000)
	for _, c := range []struct {
		name, tool, args string
		want             registry.Kind
	}{
		{"duplicate keys (the last would win)", "h", `{"op":"emit","op":"spin"}`, registry.InvalidArguments},
		{"duplicate keys deep inside", "h", `{"op":"spin","x":{"a":1,"a":2}}`, registry.InvalidArguments},
		{"number over float64", "h", `{"op":"spin","n":1e999999}`, registry.InvalidArguments},
		{"huge integer", "h", `{"op":"spin","n":` + strings.Repeat("9", 100000) + `}`, registry.InvalidArguments},
		{"NaN literal", "h", `{"op":"spin","n":NaN}`, registry.InvalidArguments},
		{"deep nesting", "h", deep, registry.InvalidArguments},
		{"deep arrays", "h", `{"op":"spin","a":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`, registry.InvalidArguments},
		{"2 MiB string", "h", `{"op":"spin","s":"` + strings.Repeat("a", 2<<20) + `"}`, registry.InvalidArguments},
		{"not an object", "h", `["op","spin"]`, registry.InvalidArguments},
		{"null", "h", `null`, registry.InvalidArguments},
		{"two objects", "h", `{"op":"spin"}{"op":"spin"}`, registry.InvalidArguments},
		{"truncated", "h", `{"op":"spin"`, registry.InvalidArguments},
		{"invalid UTF-8", "h", "{\"op\":\"spin\",\"s\":\"\xff\"}", registry.InvalidArguments},
		{"wrong type for the schema", "word_count", `{"text":42}`, registry.InvalidArguments},
		{"missing required field", "word_count", `{}`, registry.InvalidArguments},
		{"unknown tool", "nope\x1b[2J", `{}`, registry.NotFound},
		{"huge tool name", strings.Repeat("n", 1<<20), `{}`, registry.NotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := f.Snapshot(t)
			f.After(t, before, hostile.Inv(f.Reg.Invoke(context.Background(), c.tool, json.RawMessage(c.args))), c.want)
		})
	}
}

// TestManifestTOMLNesting: a third-party manifest.toml (named by `manifest
// =` in agrun.toml, or given to `agrun pack -m`) nested deep within the
// 64 KiB cap. BurntSushi/toml takes time growing faster than quadratically
// with the depth of inline tables (4000 levels: about 6 s; 16000, which fits
// in 64 KiB: minutes), so wasmtools scans the depth on the bytes before
// decoding and refuses it with a *ManifestError.
func TestManifestTOMLNesting(t *testing.T) {
	n := (wasmtools.MaxManifestBytes - 100) / 4
	doc := "name = \"x\"\ndescription = \"d\"\nx = " + strings.Repeat("{a=", n) + "1" + strings.Repeat("}", n) + "\n"
	done := make(chan error, 1)
	go func() {
		_, err := wasmtools.ParseManifestTOML([]byte(doc))
		done <- err
	}()
	select {
	case err := <-done:
		var me *wasmtools.ManifestError
		if !errors.As(err, &me) || !strings.Contains(err.Error(), "nested deeper than") {
			t.Errorf("error %v (%T); want a *wasmtools.ManifestError about the nesting", err, err)
		} else {
			hostile.CheckModelText(t, err.Error())
		}
	case <-time.After(10 * time.Second): // a hang detector, far above any honest parse
		t.Errorf("ParseManifestTOML of %d nested tables (%d bytes) still running after 10 s", n, len(doc))
	}
}

package wasmtools_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/mddoc"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// TestOutputSchema: a manifest's optional output_schema is checked at
// load like parameters (an object schema that compiles, bounded, with
// output "json"; JSON and TOML manifests alike), the tool presents it
// (registry.Presented, what `agrun mcp serve` advertises), a result that
// matches passes unchanged, and one that does not fails the call
// (execution_failed) instead of reaching anyone as a result.
func TestOutputSchema(t *testing.T) {
	const base = `{"name":"word_count","description":"Count words.","parameters":{"type":"object","properties":{"text":{"type":"string"}}}`
	for _, tc := range []struct{ name, manifest, want string }{
		{"not an object schema", base + `,"output_schema":{"type":"string"}}`, "output_schema"},
		{"does not compile", base + `,"output_schema":{"type":"object","properties":{"x":{"type":"nonsense"}}}}`, "output_schema"},
		{"outside reference", base + `,"output_schema":{"type":"object","$ref":"https://example.com/s.json"}}`, "output_schema"},
		{"text output", base + `,"output":"text","output_schema":{"type":"object"}}`, `output = "text"`},
		{"null", base + `,"output_schema":null}`, "null"},
		{"too large", base + `,"output_schema":{"type":"object","description":"` + strings.Repeat("x", wasmtools.MaxManifestBytes) + `"}}`, "bytes"},
	} {
		_, err := wasmtools.ParseManifest([]byte(tc.manifest))
		if !errors.Is(err, wasmtools.ErrInvalidManifest) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a manifest error naming %q", tc.name, err, tc.want)
		}
	}
	toml, err := wasmtools.ParseManifestTOML([]byte("name = \"word_count\"\ndescription = \"Count words.\"\n[output_schema]\ntype = \"object\"\nrequired = [\"words\"]\n[output_schema.properties.words]\ntype = \"integer\"\n"))
	if err != nil || string(toml.OutputSchema) != `{"properties":{"words":{"type":"integer"}},"required":["words"],"type":"object"}` {
		t.Fatalf("TOML: %s, %v", toml.OutputSchema, err)
	}

	// guest-sdk/ABI.md's example.
	blocks := mddoc.Read(t, "guest-sdk/ABI.md").Section(t, "## 5. Manifest").Blocks("toml")
	if len(blocks) == 0 {
		t.Fatal("guest-sdk/ABI.md's manifest section has no output_schema example")
	}
	doc, err := wasmtools.ParseManifestTOML([]byte("name = \"word_count\"\ndescription = \"Count words.\"\n" + blocks[len(blocks)-1]))
	if err != nil || string(doc.OutputSchema) != `{"properties":{"words":{"type":"integer"}},"required":["words"],"type":"object"}` {
		t.Errorf("guest-sdk/ABI.md's example: %s, %v", doc.OutputSchema, err)
	}

	ctx := context.Background()
	rt, err := runtime.New(ctx, runtime.Config{DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	wasm, err := os.ReadFile(filepath.Join("..", "testdata", "word_count.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	load := func(schema string) *wasmtools.Tool {
		m, err := wasmtools.ParseManifest([]byte(base + `,"output_schema":` + schema + `}`))
		if err != nil {
			t.Fatal(err)
		}
		tool, err := wasmtools.LoadWithManifest(ctx, rt, wasm, m, wasmtools.Grant{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tool.Close(ctx) })
		return tool
	}
	good := load(`{"type":"object","required":["words","lines"],"properties":{"words":{"type":"integer","minimum":0},"lines":{"type":"integer"}}}`)
	title, schema := registry.PresentationOf(good)
	if title != "" || !json.Valid(schema) || !strings.Contains(string(schema), `"required":["words","lines"]`) {
		t.Errorf("presented: %q, %s", title, schema)
	}
	out, err := good.Execute(ctx, json.RawMessage(`{"text":"one two three"}`))
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Words int }
	if json.Unmarshal(out, &got) != nil || got.Words != 3 {
		t.Errorf("a matching result: %s", out)
	}

	bad := load(`{"type":"object","required":["sentences"]}`)
	_, err = bad.Execute(ctx, json.RawMessage(`{"text":"one two"}`))
	var re *registry.Error
	if !errors.As(err, &re) || re.Kind != registry.ExecutionFailed || !strings.Contains(err.Error(), "does not match its output_schema") || !strings.Contains(err.Error(), "sentences") {
		t.Errorf("a result that breaks its schema: %v", err)
	}
	if _, schema := registry.PresentationOf(load(`{"type":"object"}`)); string(schema) != `{"type":"object"}` {
		t.Errorf("schema %s", schema)
	}
}

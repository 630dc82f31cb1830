package registry_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/agcore/agrun/registry"
)

// FuzzValidateArgs feeds arbitrary bytes to argument validation: it must
// return either the arguments or an invalid_arguments error, never panic or
// hang, and accepted arguments are always a JSON object.
func FuzzValidateArgs(f *testing.F) {
	for _, s := range []string{`{}`, `{"city":"Paris","days":3}`, `{"n":1e10000000}`, `[`, `{"a":{"a":{"a":[]}}}`, `{"n":0.1e-999}`, `{"city":"a","city":"b"}`} {
		f.Add([]byte(s))
	}
	r := registry.New()
	schema := `{"type":"object","properties":{"city":{"type":"string","maxLength":50},"days":{"type":"integer","minimum":1,"maximum":16},"n":{"type":"number","multipleOf":0.01,"exclusiveMaximum":1e300}},"additionalProperties":{"type":["object","array","string","number"]}}`
	if err := r.Register(&fnTool{name: "f", schema: schema}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		out, err := r.ValidateArgs("f", args)
		if err != nil {
			if !errors.Is(err, registry.ErrInvalidArguments) {
				t.Fatalf("error of the wrong kind: %v", err)
			}
			return
		}
		var m map[string]any
		if json.Unmarshal(out, &m) != nil || m == nil {
			t.Fatalf("accepted arguments %q are not a JSON object", out)
		}
	})
}

// FuzzCompileSchema: any schema text either compiles or is refused with
// ErrInvalidSchema; never a panic.
func FuzzCompileSchema(f *testing.F) {
	for _, s := range []string{`{"type":"object"}`, `{"type":"object","properties":{"a":{"$ref":"#/$defs/x"}},"$defs":{"x":{"minimum":1e999999}}}`, `{"type":"object","pattern":"(a+)+"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, schema []byte) {
		if _, err := registry.CompileSchema(schema); err != nil && !errors.Is(err, registry.ErrInvalidSchema) {
			t.Fatalf("error does not wrap ErrInvalidSchema: %v", err)
		}
	})
}

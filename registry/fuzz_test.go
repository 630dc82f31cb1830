package registry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
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

// FuzzSchemaBounds: a schema generated from the fuzzer's seed (nested
// $ref, anyOf, allOf, oneOf, not, if-then-else, properties, items) is
// refused by CompileSchema, or validating values against it stays within
// the computed cost (a value without parts) and the run-time budget (any
// value).
func FuzzSchemaBounds(f *testing.F) {
	for i := uint64(0); i < 8; i++ {
		f.Add(i, i*7919)
	}
	f.Fuzz(func(t *testing.T, a, b uint64) {
		rng := rand.New(rand.NewPCG(a, b))
		registry.CheckSchemaBounds(t, registry.GenSchema(rng), rng)
	})
}

// FuzzSchemaText: any schema text that compiles validates any arguments
// within the run-time budget, never panicking.
func FuzzSchemaText(f *testing.F) {
	f.Add([]byte(registry.ChainSchema("anyOf", 11)), []byte(`{"x":1}`))
	f.Add([]byte(registry.ChainSchema("allOf", 11)), []byte(`{"x":"s"}`))
	f.Add([]byte(registry.LevelBomb), []byte(registry.NestedA(40)))
	f.Add([]byte(`{"type":"object","properties":{"s":{"pattern":"[a-z]{1000}b"}}}`), []byte(`{"s":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}`))
	f.Fuzz(func(t *testing.T, schema, args []byte) {
		s, err := registry.CompileSchema(schema)
		if err != nil {
			return
		}
		var v any
		d := json.NewDecoder(bytes.NewReader(args))
		d.UseNumber()
		if d.Decode(&v) != nil {
			return
		}
		visits, steps, err := registry.Metered(context.Background(), s, v)
		if visits > registry.MaxValidationVisits+1+int64(len(args))/16 || steps > registry.MaxValidationSteps+registry.MaxOvershoot {
			t.Fatalf("%d visits, %d steps, %v", visits, steps, err)
		}
	})
}

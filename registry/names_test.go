package registry

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/textsafe"
)

// TestCleanSchemaDepth: descriptions are cleaned at every depth a schema
// may have (found in review: cleaning stopped at 64 levels while 128 are
// accepted), and what cannot be cleaned without changing what the model
// sends back refuses the schema.
func TestCleanSchemaDepth(t *testing.T) {
	deep := `{"type":"object","description":"x\u001b[2J\u200b"}`
	for range 55 {
		deep = `{"type":"object","properties":{"p":` + deep + `}}`
	}
	out, err := CleanSchema(json.RawMessage(deep))
	if err != nil {
		t.Fatal(err)
	}
	var s string
	json.Unmarshal(out, &s)
	if i := textsafe.IndexUnsafe(string(out)); i >= 0 || strings.Contains(string(out), `\u001b`) || strings.Contains(string(out), `\u200b`) {
		t.Fatalf("an unsafe character survives at depth 55: %s", out[len(out)-120:])
	}
	for _, bad := range []string{
		`{"type":"object","properties":{"a\u202eb":{"type":"string"}}}`,
		`{"type":"object","properties":{"a":{"enum":["x\u001b[31m"]}}}`,
		strings.Repeat(`{"allOf":[`, 130) + `{}` + strings.Repeat(`]}`, 130),
	} {
		if _, err := CleanSchema(json.RawMessage(bad)); err == nil {
			t.Errorf("taken: %.80s", bad)
		}
	}
}

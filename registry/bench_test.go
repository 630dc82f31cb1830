package registry_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

// The registry's own cost per call, without a tool's: look-up,
// permission check, argument validation and the Invocation record, with a
// tool that returns a constant. internal/cmd/bench puts it beside the cost of
// a whole sandboxed call.
//
//	go test -run '^$' -bench . -benchmem ./registry

// benchTool answers at once.
type benchTool struct{ params string }

func (t benchTool) Name() string                         { return "word_count" }
func (t benchTool) Description() string                  { return "Count the words of a text." }
func (t benchTool) Parameters() json.RawMessage          { return json.RawMessage(t.params) }
func (t benchTool) Permissions() []permission.Permission { return nil }
func (t benchTool) Execute(context.Context, json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`{"words":180}`), nil
}

// word_count's schema, as its manifest declares it.
const benchSchema = `{"type":"object","required":["text"],"additionalProperties":false,"properties":{"text":{"type":"string","description":"The text to count."}}}`

var benchArgs = func() json.RawMessage {
	b, _ := json.Marshal(map[string]string{"text": strings.Repeat("the quick brown fox jumps over the lazy dog\n", 20)})
	return b
}()

// BenchmarkInvoke is one call through the whole path with the default
// permission policy: small arguments, the 880-byte text of internal/cmd/bench,
// and a 64 KiB text.
func BenchmarkInvoke(b *testing.B) {
	reg := registry.New(registry.WithPermissionChecker(permission.NewChecker(permission.DefaultConfig())))
	if err := reg.Register(benchTool{params: benchSchema}); err != nil {
		b.Fatal(err)
	}
	big, _ := json.Marshal(map[string]string{"text": strings.Repeat("lorem ipsum dolor sit amet\n", 64<<10/27)})
	for _, bm := range []struct {
		name string
		args json.RawMessage
	}{
		{"small", json.RawMessage(`{"text":"a b c"}`)},
		{"880B", benchArgs},
		{"64KiB", big},
	} {
		b.Run(bm.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			b.SetBytes(int64(len(bm.args)))
			for b.Loop() {
				if inv := reg.Invoke(ctx, "word_count", bm.args); inv.Err != nil {
					b.Fatal(inv.Err)
				}
			}
		})
	}
}

// BenchmarkValidateArgs is the validation step alone (strict decoding and
// the schema).
func BenchmarkValidateArgs(b *testing.B) {
	reg := registry.New()
	if err := reg.Register(benchTool{params: benchSchema}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reg.ValidateArgs("word_count", benchArgs); err != nil {
			b.Fatal(err)
		}
	}
}

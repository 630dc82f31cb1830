package config

import (
	"errors"
	"strings"
	"testing"
)

// The keys of bounded tool results, the context window and structured
// output decode, per tool and per server too; bad values name the key.
func TestLoopKeys(t *testing.T) {
	c, err := Parse("agrun.toml", []byte(`[llm]
max_tool_result = "16KiB"
context_window = 128000
schema_mode = "prompt"

[tools.t]
wasm = "t.wasm"
max_tool_result = "0"

[mcp.s]
command = "x"
max_tool_result = "1MiB"
`))
	if err != nil {
		t.Fatal(err)
	}
	if *c.LLM.MaxToolResult != 16<<10 || c.LLM.ContextWindow != 128000 || c.LLM.SchemaMode != "prompt" ||
		*c.Tools["t"].MaxToolResult != 0 || *c.MCP["s"].MaxToolResult != 1<<20 {
		t.Errorf("decoded %+v", c.LLM)
	}
	if d := Default(); d.LLM.MaxToolResult != nil || d.LLM.ContextWindow != 0 {
		t.Errorf("defaults %+v", d.LLM)
	}
	for _, tc := range []struct{ toml, key, msg string }{
		{"[llm]\ncontext_window = -1\n", "llm.context_window", "must be positive"},
		{"[llm]\nschema_mode = \"strict\"\n", "llm.schema_mode", `"auto", "native" or "prompt"`},
		{"[llm]\nmax_tool_result = \"big\"\n", "llm.max_tool_result", "bad size"},
	} {
		_, err := Parse("agrun.toml", []byte(tc.toml))
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != tc.key || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q: %v", tc.toml, err)
		}
	}
}

package mcp

import (
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/registry"
)

func TestToolName(t *testing.T) {
	long := strings.Repeat("t", 80)
	for _, tc := range []struct{ server, tool, want string }{
		{"fs", "read_file", "fs__read_file"},
		{"everything", "get-sum", "everything__get-sum"},
		{"my.server", "a b/c", "my_server__a_b_c"},
		{"s", "héllo", "s__h_llo"},
	} {
		if got := ToolName(tc.server, tc.tool); got != tc.want {
			t.Errorf("ToolName(%q, %q) = %q, want %q", tc.server, tc.tool, got, tc.want)
		}
	}
	a, b := ToolName("srv", long+"a"), ToolName("srv", long+"b")
	for _, n := range []string{a, b} {
		if !registry.ValidName(n) || len(n) != 64 {
			t.Errorf("shortened name %q (%d bytes) is not a valid 64-byte name", n, len(n))
		}
	}
	if a == b {
		t.Errorf("two long names shortened to the same %q", a)
	}
	if ToolName("srv", long+"a") != a {
		t.Error("shortening is not stable")
	}
	if !strings.HasPrefix(a, "srv__ttt") {
		t.Errorf("shortened name %q lost its prefix", a)
	}
}

func TestSanitizeText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text\nnext line\ttab", "plain text\nnext line\ttab"},
		{"zero\u200bwidth\u200d\ufeff", "zerowidth"},
		{"bidi \u202eoverride\u202c \u2066isolate\u2069", "bidi override isolate"},
		{"\x1b[31mred\x1b[0m\x07\r", "[31mred[0m"},
		{"tags\U000E0049\U000E0047\U000E004E", "tags"},
		{"vs\ufe0f\U000E0100", "vs"},
		{"bad \xff utf8", "bad \ufffd utf8"},
		{"private\ue000use", "privateuse"},
	} {
		if got := SanitizeText(tc.in, 0); got != tc.want {
			t.Errorf("SanitizeText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	got := SanitizeText(strings.Repeat("é", 100), 21)
	if len(got) > 21 || !strings.HasSuffix(got, "…") || !strings.HasPrefix(got, "éééé") {
		t.Errorf("cut = %q (%d bytes)", got, len(got))
	}
}

func TestSanitizeSchema(t *testing.T) {
	raw, err := sanitizeSchema(map[string]any{
		"type":        "object",
		"description": "top\u202e",
		"properties": map[string]any{
			"description": map[string]any{"type": "string", "title": "\u200bT", "enum": []any{"keep"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	for _, w := range []string{`"description":"top"`, `"title":"T"`, `"keep"`, `"properties":{"description":`} {
		if !strings.Contains(s, w) {
			t.Errorf("schema %s lacks %s", s, w)
		}
	}
	// A value the model must send back as it is cannot be cleaned: an
	// unsafe one refuses the schema (the tool is left out).
	if _, err := sanitizeSchema(map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"enum": []any{"keep\u200b"}}}}); err == nil {
		t.Error("an enum value with an invisible character was taken")
	}
	if _, err := sanitizeSchema(map[string]any{"type": "object", "description": strings.Repeat("x", registry.MaxSchemaBytes)}); err == nil {
		t.Error("an oversized schema was accepted")
	}
}

func TestResultMapping(t *testing.T) {
	res := &sdk.CallToolResult{Content: []sdk.Content{
		&sdk.TextContent{Text: "a"},
		&sdk.ImageContent{MIMEType: "image/png", Data: make([]byte, 10)},
		&sdk.AudioContent{Data: make([]byte, 3)},
		&sdk.ResourceLink{URI: "https://example.com/x"},
		&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "mem://b", MIMEType: "application/octet-stream", Blob: make([]byte, 7)}},
	}}
	out, err := resultJSON(res)
	if err != nil {
		t.Fatal(err)
	}
	want := `"a\n[image: image/png, 10 bytes]\n[audio: unknown type, 3 bytes]\nhttps://example.com/x\n[resource mem://b: application/octet-stream, 7 bytes]"`
	if string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
	out, err = resultJSON(&sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "ignored"}}, StructuredContent: map[string]any{"n": 1}})
	if err != nil || string(out) != `{"n":1}` {
		t.Errorf("structured = %s, %v", out, err)
	}
	out, err = resultJSON(&sdk.CallToolResult{})
	if err != nil || string(out) != `""` {
		t.Errorf("empty = %s, %v", out, err)
	}
}

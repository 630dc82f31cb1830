package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/textsafe"
)

// TestConfigDecoding: hostile or careless agrun.toml files end in a
// *Error naming the key, never a panic, and the message is safe to
// show (textsafe); FuzzParse (fuzz_hostile_test.go) explores further.
func TestConfigDecoding(t *testing.T) {
	for _, c := range []struct{ name, toml string }{
		{"duplicate table", "[llm]\nmodel = \"a\"\n[llm]\nmodel = \"b\"\n"},
		{"duplicate key", "[llm]\nmodel = \"a\"\nmodel = \"b\"\n"},
		{"unknown key", "[sandbox]\nallow_everything = true\n"},
		{"bad tool name", "[tools.\"../x\"]\nwasm = \"a.wasm\"\n"},
		{"tool name with escape", "[tools.\"a\\u001b[2J\"]\nwasm = \"a.wasm\"\n"},
		{"allowed host with scheme", "[tools.t]\nwasm = \"a.wasm\"\nallowed_hosts = [\"http://x\"]\n"},
		{"allowed host wildcard with path", "[tools.t]\nwasm = \"a.wasm\"\nallowed_hosts = [\"*/x\"]\n"},
		{"sha256 not hex", "[tools.t]\nwasm = \"a.wasm\"\nsha256 = \"zz\"\n"},
		{"mount mode", "[tools.t]\nwasm = \"a.wasm\"\nmounts = [\"./a:/a:rwx\"]\n"},
		{"relative guest path", "[tools.t]\nwasm = \"a.wasm\"\nmounts = [\"./a:a\"]\n"},
		{"negative timeout", "[sandbox]\ntimeout = \"-5s\"\n"},
		{"absurd memory", "[sandbox]\nmemory = \"99999999999TiB\"\n"},
		{"negative max_parallel", "[sandbox]\nmax_parallel = -1\n"},
		{"mcp both command and url", "[mcp.s]\ncommand = \"x\"\nurl = \"http://x\"\n"},
		{"mcp file url", "[mcp.s]\nurl = \"file:///etc/passwd\"\n"},
		{"mcp name with separator", "[mcp.a__b]\ncommand = \"x\"\n"},
		{"wrong type", "[llm]\nmax_turns = \"ten\"\n"},
		{"deep inline tables", "x = " + strings.Repeat("{a=", 300) + "1" + strings.Repeat("}", 300) + "\n"},
		{"not UTF-8", "[llm]\nmodel = \"\xff\"\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("hostile.toml", []byte(c.toml))
			var ce *Error
			if err == nil {
				t.Errorf("accepted")
				return
			}
			if !errors.As(err, &ce) {
				t.Logf("error is %T, not *Error: %v", err, err)
			}
			if !textsafe.IsSafe(err.Error()) {
				t.Errorf("message carries unsafe text: %q", err.Error())
			}
		})
	}
}

package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: whatever agrun.toml holds, Parse never panics and every
// error is a *Error (which names the file). Inputs are capped at 8 KiB:
// BurntSushi/toml's time on deeply nested inline tables grows faster than
// quadratically (internal/testing/hostile TestConfigDecoding), which is a slow
// input, not a crash. Seeds: the repository's agrun.toml and
// testdata/fuzz/FuzzParse. (Part of the hostile-input suite; see
// internal/testing/hostile and docs/SECURITY.md.)
func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "agrun.toml")); err == nil {
		f.Add(b)
	}
	f.Add([]byte("[tools.t]\nwasm = \"a.wasm\"\nmounts = [\"./a:/a:rwd\"]\nallowed_hosts = [\"h:1\"]\nsha256 = \"00\"\n"))
	f.Add([]byte("[sandbox]\ntimeout = \"1h\"\nmemory = \"64MiB\"\nmax_output = \"1KiB\"\n[mcp.m]\nurl = \"http://x\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 8<<10 {
			return
		}
		c, err := Parse("agrun.toml", data)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T) is not a *config.Error", err, err)
			}
			return
		}
		if c == nil {
			t.Fatal("nil config without an error")
		}
		c.PermissionConfig()
	})
}

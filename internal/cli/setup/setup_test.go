package setup

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

// testConfig is the default config with [tools] word_count (the
// committed example), missing (no such file) and pinned (word_count with
// a sha256 it does not have).
func testConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Sandbox.CacheDir = t.TempDir()
	wasm := filepath.Join("..", "..", "..", "testdata", "word_count.wasm")
	cfg.Tools = map[string]config.Tool{
		"word_count": {Wasm: wasm},
		"missing":    {Wasm: filepath.Join(t.TempDir(), "missing.wasm")},
		"pinned":     {Wasm: wasm, SHA256: strings.Repeat("0", 64)},
	}
	return cfg
}

// TestNewRecordsRefusedTools: a tool that fails to load does not stop
// the others; it is recorded under its name, naming the setting, and
// registered as refused, so that a call to it fails with module_refused.
func TestNewRecordsRefusedTools(t *testing.T) {
	ctx := context.Background()
	e, err := New(ctx, testConfig(t), slog.New(slog.NewTextHandler(io.Discard, nil)), nil, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if n := e.Loaded(); n != 1 {
		t.Errorf("Loaded() = %d, want 1 (word_count)", n)
	}
	if got := e.Source("word_count"); !strings.HasPrefix(got, "wasm:") {
		t.Errorf("Source(word_count) = %q, want wasm:PATH", got)
	}
	broken := e.Broken()
	if len(broken) != 2 {
		t.Fatalf("Broken() = %v, want missing and pinned", broken)
	}
	if err := e.BrokenFor("pinned"); err == nil || !strings.Contains(err.Error(), "[tools.pinned] sha256") {
		t.Errorf("BrokenFor(pinned) = %v, want the error to name [tools.pinned] sha256", err)
	}
	for _, name := range []string{"missing", "pinned"} {
		tool, ok := e.Registry.Get(name)
		if !ok || !Refused(tool) {
			t.Errorf("%s: registered %v, refused stand-in %v; want both", name, ok, ok && Refused(tool))
		}
		inv := e.Registry.Invoke(ctx, name, json.RawMessage(`{}`))
		if registry.KindOf(inv.Err) != registry.ModuleRefused {
			t.Errorf("Invoke(%s): %v, want kind module_refused", name, inv.Err)
		}
	}
	inv := e.Registry.Invoke(ctx, "word_count", json.RawMessage(`{"text":"one two three"}`))
	if inv.Err != nil {
		t.Fatalf("Invoke(word_count): %v", inv.Err)
	}
}

// TestOnly: the filter of one name loads its [tools] entry alone, and
// the sections whose tools are named SECTION__*.
func TestOnly(t *testing.T) {
	f := Only("srv__echo")
	for _, c := range []struct {
		kind, name string
		want       bool
	}{
		{"wasm", "srv__echo", true},
		{"wasm", "srv", false},
		{"mcp", "srv", true},
		{"plugin", "srv", true},
		{"mcp", "sr", false},
		{"mcp", "other", false},
	} {
		if got := f(c.kind, c.name); got != c.want {
			t.Errorf("Only(srv__echo)(%q, %q) = %v, want %v", c.kind, c.name, got, c.want)
		}
	}
}

// TestConsent: the grants of a call given on the command line allow the
// permissions they need, whatever the policy denies, and an empty
// allow-list stays empty (adding to it would switch to allow-list mode).
func TestConsent(t *testing.T) {
	tool := config.Tool{AllowedHosts: []string{"api.example.com"}, Mounts: []config.Mount{{Host: "/tmp", Guest: "/data", Writable: true}}}
	p := config.Permissions{Denied: []permission.Permission{permission.Network, permission.Shell}}
	got := Consent(p, permission.Config{AllowUnspecified: true}, tool)
	if len(got.Denied) != 1 || got.Denied[0] != permission.Shell {
		t.Errorf("Denied = %v, want [shell]", got.Denied)
	}
	if len(got.Allowed) != 0 {
		t.Errorf("Allowed = %v, want none (allow_unspecified decides)", got.Allowed)
	}
	got = Consent(config.Permissions{Allowed: []permission.Permission{permission.Read}}, permission.Config{Allowed: []permission.Permission{permission.Read}}, tool)
	for _, need := range []permission.Permission{permission.Network, permission.Filesystem, permission.Write} {
		found := false
		for _, a := range got.Allowed {
			found = found || a == need
		}
		if !found {
			t.Errorf("Allowed = %v, want %s in it", got.Allowed, need)
		}
	}
}

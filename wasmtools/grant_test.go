package wasmtools_test

import (
	"slices"
	"testing"
	"time"

	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// TestToolGrant: a tool describes what its calls can touch — the mounts
// the sandbox links (declared ∩ granted, with host path and mode), the
// allowed hosts, and its limits with the runtime's defaults filled in —
// and the permissions that approval policies ask about follow from it.
func TestToolGrant(t *testing.T) {
	notes := t.TempDir()
	note := load(t, example(t, "write_note"), wasmtools.Grant{
		Mounts: []wasmtools.Mount{{Host: notes, Guest: "/notes", Writable: true, AllowDelete: true}},
		Limits: runtime.Limits{MemoryBytes: 32 << 20},
	})
	g := note.Grant()
	if g.Source != "wasm" || len(g.Mounts) != 1 || g.Mounts[0] != (registry.GrantMount{Guest: "/notes", Host: notes, Mode: registry.ReadWrite}) {
		t.Fatalf("grant %+v: want /notes rw (write_note declares no delete)", g)
	}
	if g.MemoryBytes != 32<<20 || g.Timeout != runtime.DefaultTimeout || g.MaxOutputBytes != runtime.DefaultMaxStdout || g.MaxWriteBytes != runtime.DefaultMaxWriteBytes {
		t.Fatalf("limits %+v", g)
	}
	if uses := g.Uses(); !slices.Contains(uses, permission.Write) || slices.Contains(uses, permission.Delete) || slices.Contains(uses, permission.Network) {
		t.Fatalf("uses %v", uses)
	}

	weather := load(t, example(t, "get_weather"), wasmtools.Grant{AllowedHosts: []string{"api.open-meteo.com"}, Limits: runtime.Limits{Timeout: 3 * time.Second}})
	g = weather.Grant()
	if !slices.Equal(g.AllowedHosts, []string{"api.open-meteo.com"}) || len(g.Mounts) != 0 || g.Timeout != 3*time.Second || g.MaxWriteBytes != 0 {
		t.Fatalf("grant %+v", g)
	}
	if uses := g.Uses(); !slices.Equal(uses, []permission.Permission{permission.Network}) {
		t.Fatalf("uses %v", uses)
	}
	// Described through the registry as the loop sees it.
	if d := registry.DescribeGrant(weather); d.Source != "wasm" || len(d.AllowedHosts) != 1 {
		t.Fatalf("DescribeGrant %+v", d)
	}
}

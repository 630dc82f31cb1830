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

// TestGrantDescribe: an offer described without a module shows every
// mount and host it offers, and its limits from the tool's own, then the
// defaults given, then the sandbox's package defaults; a loaded tool's
// Grant of the same offer is narrowed by its declarations.
func TestGrantDescribe(t *testing.T) {
	notes := t.TempDir()
	offer := wasmtools.Grant{
		AllowedHosts: []string{"api.example.com"},
		Mounts:       []wasmtools.Mount{{Host: notes, Guest: "/notes", Writable: true, AllowDelete: true}},
		Limits:       runtime.Limits{MemoryBytes: 32 << 20},
	}
	g := offer.Describe(runtime.Limits{Timeout: 3 * time.Second})
	want := registry.Grant{
		Source: "wasm", AllowedHosts: []string{"api.example.com"},
		Mounts:  []registry.GrantMount{{Guest: "/notes", Host: notes, Mode: registry.ReadWriteDelete}},
		Timeout: 3 * time.Second, MemoryBytes: 32 << 20, MaxOutputBytes: runtime.DefaultMaxStdout, MaxWriteBytes: runtime.DefaultMaxWriteBytes,
	}
	if !slices.Equal(g.AllowedHosts, want.AllowedHosts) || !slices.Equal(g.Mounts, want.Mounts) || g.Permissions != nil ||
		g.Timeout != want.Timeout || g.MemoryBytes != want.MemoryBytes || g.MaxOutputBytes != want.MaxOutputBytes || g.MaxWriteBytes != want.MaxWriteBytes {
		t.Fatalf("described %+v\nwant      %+v", g, want)
	}
	// write_note declares filesystem and write, not network or delete.
	loaded := load(t, example(t, "write_note"), offer).Grant()
	if len(loaded.AllowedHosts) != 0 || loaded.Mounts[0].Mode != registry.ReadWrite {
		t.Fatalf("loaded tool's grant %+v: want no hosts, /notes rw", loaded)
	}
	if none := (wasmtools.Grant{}).Describe(runtime.Limits{}); none.MaxWriteBytes != 0 || none.Timeout != runtime.DefaultTimeout {
		t.Fatalf("empty offer described %+v: want the defaults, no write limit (nothing writable)", none)
	}
}

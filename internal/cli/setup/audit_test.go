package setup

import (
	"testing"
	"time"

	"github.com/agcore/agrun/audit/lpriv"
	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/registry"
)

// TestSuggestedBlockParses: the [tools.NAME] block `agrun audit` suggests
// (lpriv.TOML) is one agrun.toml accepts, and it means the grant it was
// made from.
func TestSuggestedBlockParses(t *testing.T) {
	g := registry.Grant{
		Source: "wasm",
		Mounts: []registry.GrantMount{
			{Host: "./docs", Guest: "/docs", Mode: registry.ReadOnly},
			{Host: "./notes", Guest: "/notes", Mode: registry.ReadWrite},
		},
		AllowedHosts:   []string{"api.example.com"},
		AllowPrivate:   true,
		Timeout:        time.Second,
		MemoryBytes:    11 << 20,
		MaxOutputBytes: 64 << 10,
	}
	cfg, err := config.Parse("agrun.toml", []byte(lpriv.TOML("notes", "testdata/notes.wasm", g)))
	if err != nil {
		t.Fatalf("the suggested block does not parse: %v", err)
	}
	tc := cfg.Tools["notes"]
	if len(tc.Mounts) != 2 || tc.Mounts[0].Writable || !tc.Mounts[1].Writable || tc.Mounts[1].AllowDelete || int64(tc.Memory) != 11<<20 || int64(tc.MaxOutput) != 64<<10 ||
		tc.Timeout.Std() != time.Second || len(tc.AllowedHosts) != 1 || !tc.AllowPrivate {
		t.Fatalf("parsed back: %+v", tc)
	}
	// The config's grant, described as the registry describes grants, is
	// what the block was made from.
	back := GrantOf(cfg, tc)
	if len(back.Mounts) != 2 || back.Mounts[1] != g.Mounts[1] || back.MemoryBytes != g.MemoryBytes || back.MaxOutputBytes != g.MaxOutputBytes ||
		back.Timeout != g.Timeout || !back.AllowPrivate || back.MaxWriteBytes == 0 {
		t.Fatalf("GrantOf: %+v", back)
	}
	// A tool from a registry: the block keeps its pinned reference.
	const ref = "registry.example.com/tools/notes:1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	cfg, err = config.Parse("agrun.toml", []byte(lpriv.TOML("notes", "oci:"+ref, g)))
	if err != nil || cfg.Tools["notes"].OCI != ref || cfg.Tools["notes"].Wasm != "" {
		t.Fatalf("the suggested block of an oci tool: %v, %+v", err, cfg.Tools["notes"])
	}
}

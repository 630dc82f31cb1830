package main

import (
	"testing"
	"time"

	"github.com/agcore/agrun/audit/lpriv"
	"github.com/agcore/agrun/cmd/agrun/internal/config"
	"github.com/agcore/agrun/registry"
)

// TestSuggestedBlockParses: the [tools.NAME] block `agrun audit` suggests
// (lpriv.TOML) is one agrun.toml accepts, and it means the grant it was
// made from.
func TestSuggestedBlockParses(t *testing.T) {
	g := lpriv.Grant{
		Wasm: "testdata/notes.wasm",
		Mounts: []lpriv.Mount{
			{Host: "./docs", Guest: "/docs", Mode: registry.ReadOnly},
			{Host: "./notes", Guest: "/notes", Mode: registry.ReadWrite},
		},
		AllowedHosts: []string{"api.example.com"},
		Timeout:      time.Second,
		Memory:       11 << 20,
		MaxOutput:    64 << 10,
	}
	cfg, err := config.Parse("agrun.toml", []byte(lpriv.TOML("notes", g)))
	if err != nil {
		t.Fatalf("the suggested block does not parse: %v", err)
	}
	tc := cfg.Tools["notes"]
	if len(tc.Mounts) != 2 || tc.Mounts[0].Writable || !tc.Mounts[1].Writable || tc.Mounts[1].AllowDelete || int64(tc.Memory) != 11<<20 || tc.Timeout.Std() != time.Second || len(tc.AllowedHosts) != 1 {
		t.Fatalf("parsed back: %+v", tc)
	}
}

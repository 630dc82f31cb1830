package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestText: a release build says its version, revision, commit time,
// that its tree was modified, and a replaced wazero (a directory: patched); a binary without
// build info says what it does not know. (The text of the real binary:
// cmd/agrun's TestVersion.)
func TestText(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "github.com/agcore/agrun", Version: "v1.2.3"},
		Deps:     []*debug.Module{{Path: "github.com/tetratelabs/wazero", Version: "v1.12.0", Replace: &debug.Module{Path: "../wazero"}}},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}}}
	got := Text(bi, true, true)
	for _, want := range []string{"agrun v1.2.3\n", "  revision  0123456789abcdef (2026-01-02 03:04:05 UTC) modified\n", "  go        go1.99.1 ", "  wazero    v1.12.0 (patched: ../wazero)\n", "  cluster   built in"} {
		if !strings.Contains(got, want) {
			t.Errorf("Text lacks %q:\n%s", want, got)
		}
	}
	// Replaced by another module's release, not a directory: named so.
	bi.Deps[0].Replace = &debug.Module{Path: "example.com/wazero", Version: "v1.12.1"}
	if got := Text(bi, true, true); !strings.Contains(got, "  wazero    v1.12.0 => example.com/wazero v1.12.1\n") {
		t.Errorf("Text with a module replace:\n%s", got)
	}
	got = Text(nil, false, false)
	if !strings.HasPrefix(got, "agrun (devel)\n  revision  unknown (built without VCS information") || !strings.Contains(got, "wazero    unknown") || !strings.Contains(got, "cluster   not built in") {
		t.Errorf("Text without build info:\n%s", got)
	}
	if v := Version(&debug.BuildInfo{}, true); v != "(devel)" {
		t.Errorf("Version of a build without a module version = %q", v)
	}
}

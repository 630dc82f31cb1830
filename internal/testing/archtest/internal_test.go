package archtest

import (
	"slices"
	"strings"
	"testing"
)

// owners: who may import each shared internal package from non-test code.
// The folder says who owns a package and Go's internal rule enforces most
// of it (runtime/internal/... only runtime); these are the packages under
// the top-level internal/, which the compiler lets every package of the
// module import (internal/cli/...: mayImportCLI).
var owners = map[string][]string{
	"internal/wasmbin":    {"runtime", "wasmtools"},
	"internal/audit":      {"runtime", "registry", "wasmtools"},                                                                               // the one audit type: runtime fills it, registry aliases it, wasmtools cleans it
	"internal/textsafe":   {"registry", "wasmtools", "mcp", "loop", "session", "telemetry", "server", "cmd/agrun", "cluster", "oci", "audit"}, // cluster: run errors it stores and returns; oci: registries' answers; audit: lpriv's report
	"internal/atomicfile": {"runtime", "session", "server", "cmd/agrun", "cluster", "mcp"},                                                    // runtime: prepared modules (prepared.go); session: rewrites; server: its data directory; cluster: DirObjects
	"internal/flock":      {"session", "server", "cmd/agrun"},                                                                                 // session files, serve's data directory
	"internal/termsafe":   {"server", "cmd/agrun"},
	"internal/netguard":   {"runtime", "mcp", "oci"}, // the one SSRF address check: http_request, MCP authorization requests, registry redirects                                                                                   // JSON safe on a terminal: the HTTP API and --json
}

// TestInternalEdges checks the edges of internal/: the shared packages
// are imported only by their owners (and by tests), the test kits under
// internal/testing/ only by tests and the dev commands (mayImportKit), the
// hostile suite only by tests, and nothing imports a command.
func TestInternalEdges(t *testing.T) {
	lines := goList(t, "-f", `{{.ImportPath}}|{{join .Imports " "}}`, "./...")
	for _, l := range lines {
		path, imports, _ := strings.Cut(l, "|")
		rel := strings.TrimPrefix(path, module+"/")
		for _, imp := range strings.Fields(imports) {
			irel, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				continue
			}
			switch {
			case strings.HasPrefix(irel, "internal/testing/"): // the kits and the hostile suite
				if !mayImportKit(rel, irel) {
					t.Errorf("%s imports %s: test kits are for tests only", rel, irel)
				}
			case strings.HasPrefix(irel, "internal/cmd/") || irel == "cmd/agrun":
				t.Errorf("%s imports the command %s", rel, irel)
			case strings.HasPrefix(irel, "internal/cli/"):
				if !mayImportCLI(rel) {
					t.Errorf("%s imports %s: internal/cli/... is the agrun command's (cmd/agrun) alone", rel, irel)
				}
			}
			for pkg, allowed := range owners {
				if irel != pkg {
					continue
				}
				owner := slices.ContainsFunc(allowed, func(o string) bool { return rel == o || strings.HasPrefix(rel, o+"/") })
				if !owner && !strings.HasPrefix(rel, "internal/") {
					t.Errorf("%s imports %s, which only %v may import", rel, pkg, allowed)
				}
			}
		}
	}
}

// mayImportCLI reports whether the non-test code of the package rel may
// import a package of internal/cli/ (the command's config decoding and
// what builds a config's tools): cmd/agrun, internal/cli/... itself, and
// the top floor (kits, dev commands), never a library package nor a leaf
// (TestInternalFloors holds the leaves to each other).
func mayImportCLI(rel string) bool {
	return rel == "cmd/agrun" || strings.HasPrefix(rel, "internal/cli/") ||
		strings.HasPrefix(rel, "internal/testing/") || strings.HasPrefix(rel, "internal/cmd/")
}

// mayImportKit reports whether the non-test code of the package rel may
// import kit, a test kit under internal/testing/ or the hostile suite.
// The kits may import each other. The dev commands under internal/cmd/
// may import internal/testing/... too: they are run with go run from a
// checkout and never shipped (nothing imports them, and no release builds
// them), and the benchmark builds what it compares with testguest's
// build cache rather than a copy of it. Nothing else may: a kit in a
// library or in cmd/agrun would ship test code.
func mayImportKit(rel, kit string) bool {
	if strings.HasPrefix(rel, "internal/testing/") {
		return true
	}
	return strings.HasPrefix(rel, "internal/cmd/") && strings.HasPrefix(kit, "internal/testing/") && !isHostile(kit)
}

// isHostile reports whether pkg is the hostile suite: its kit
// (internal/testing/hostile) or one of its packages of cases.
func isHostile(pkg string) bool {
	return pkg == "internal/testing/hostile" || strings.HasPrefix(pkg, "internal/testing/hostile/")
}

// TestMayImportKit pins mayImportKit: only the kits themselves and the dev
// commands, and the commands not the hostile suite.
func TestMayImportKit(t *testing.T) {
	for _, c := range []struct {
		rel, kit string
		want     bool
	}{
		{"internal/testing/testrt", "internal/testing/testguest", true},
		{"internal/cmd/bench", "internal/testing/testguest", true},
		{"internal/cmd/other/sub", "internal/testing/require", true},
		{"internal/cmd/bench", "internal/testing/hostile", false},
		{"internal/cmd/bench", "internal/testing/hostile/sandbox", false},
		{"internal/testing/hostile/cli", "internal/testing/hostile", true},
		{"internal/cmdx", "internal/testing/testguest", false},
		{"internal/cmd", "internal/testing/testguest", false},
		{"internal/testing/hostile", "internal/testing/testguest", true},
		{"internal/wasmbin", "internal/testing/testguest", false},
		{"runtime", "internal/testing/testguest", false},
		{"wasmtools", "internal/testing/testguest", false},
		{"cmd/agrun", "internal/testing/testguest", false},
		{"server", "internal/testing/leak", false},
		{"mcp", "internal/testing/hostile", false},
	} {
		if got := mayImportKit(c.rel, c.kit); got != c.want {
			t.Errorf("mayImportKit(%q, %q) = %v, want %v", c.rel, c.kit, got, c.want)
		}
	}
}

// TestMayImportCLI pins mayImportCLI: the command and the top floor, not
// a library package, a leaf or a folder whose name only begins so.
func TestMayImportCLI(t *testing.T) {
	for rel, want := range map[string]bool{
		"cmd/agrun":                true,
		"internal/cli/setup":       true,
		"internal/testing/hostile": true,
		"internal/cmd/bench":       true,
		"cmd/agrunx":               false,
		"server":                   false,
		"registry":                 false,
		"internal/textsafe":        false,
		"internal/clix":            false,
	} {
		if got := mayImportCLI(rel); got != want {
			t.Errorf("mayImportCLI(%q) = %v, want %v", rel, got, want)
		}
	}
}

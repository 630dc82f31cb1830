package archtest

import (
	"slices"
	"strings"
	"testing"
)

// owners: who may import each shared internal package from non-test code.
// The folder says who owns a package and Go's internal rule enforces most
// of it (runtime/internal/... only runtime, cmd/agrun/internal/... only
// the CLI); these are the packages under the top-level internal/, which
// the compiler lets every package of the module import.
var owners = map[string][]string{
	"internal/wasmbin":    {"runtime", "wasmtools"},
	"internal/textsafe":   {"registry", "wasmtools", "mcp", "loop", "cmd/agrun"},
	"internal/atomicfile": {"cmd/agrun"},
}

// TestInternalEdges checks the edges of internal/: the shared packages
// are imported only by their owners (and by tests), the test kits under
// internal/testing/ and the hostile suite only by tests, and nothing
// imports a command.
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
			case strings.HasPrefix(irel, "internal/testing/") || irel == "internal/hostile":
				if !strings.HasPrefix(rel, "internal/testing/") {
					t.Errorf("%s imports %s: test kits are for tests only", rel, irel)
				}
			case strings.HasPrefix(irel, "internal/cmd/") || irel == "cmd/agrun":
				t.Errorf("%s imports the command %s", rel, irel)
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

package archtest

import (
	"strings"
	"testing"
)

// leaves are internal packages that every layer may import (registry and
// runtime included), so they must stay leaves: the standard library only,
// nothing of the project and no third-party module. Otherwise they would
// become the back door TestTransitive looks for.
var leaves = []string{"internal/atomicfile", "internal/textsafe", "internal/wasmbin", "internal/audit", "internal/netguard"}

func TestLeafPackages(t *testing.T) {
	std := map[string]bool{}
	for _, p := range goList(t, "std") {
		std[p] = true
	}
	for _, leaf := range leaves {
		for _, dep := range goList(t, "-deps", "./"+leaf) {
			if std[dep] || dep == module+"/"+leaf {
				continue
			}
			if strings.HasPrefix(dep, "vendor/") || strings.HasPrefix(dep, "internal/") {
				continue // the standard library's own
			}
			t.Errorf("%s depends on %s: it may use only the standard library", leaf, dep)
		}
	}
}

// TestInternalFloors: internal/ has three floors. The ground floor is the
// packages directly under it (internal/textsafe, internal/wasmbin, ...):
// leaves any layer may import, so they import nothing of the project but
// each other (and golang.org/x/sys, for internal/flock on Windows). The
// command's floor is internal/cli/... (config decoding, and building what
// a config describes): above every layer, imported only by cmd/agrun
// (TestInternalEdges, mayImportCLI). The top floor is internal/testing/...
// (test kits, the hostile suite, this test) and internal/cmd/... (dev
// commands): nothing below imports them (TestInternalEdges). So no import
// arrow climbs from a leaf back up to a layer, the command or a kit.
func TestInternalFloors(t *testing.T) {
	std := map[string]bool{}
	for _, p := range goList(t, "std") {
		std[p] = true
	}
	ground := map[string]bool{}
	for _, p := range goList(t, "./internal/...") {
		rel := strings.TrimPrefix(p, module+"/")
		if !strings.HasPrefix(rel, "internal/testing/") && !strings.HasPrefix(rel, "internal/cmd/") && !strings.HasPrefix(rel, "internal/cli/") {
			ground[p] = true
		}
	}
	if len(ground) < 5 {
		t.Fatalf("the ground floor of internal/ has %d packages: the listing is broken", len(ground))
	}
	for p := range ground {
		for _, dep := range goList(t, "-deps", p) {
			switch {
			case std[dep] || ground[dep] || strings.HasPrefix(dep, "vendor/") || strings.HasPrefix(dep, "internal/"):
			case strings.HasPrefix(dep, "golang.org/x/sys/"):
			default:
				t.Errorf("%s (ground floor of internal/) depends on %s", p, dep)
			}
		}
	}
}

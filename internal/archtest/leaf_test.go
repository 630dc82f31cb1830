package archtest

import (
	"strings"
	"testing"
)

// leaves are internal packages that every layer may import (registry and
// runtime included), so they must stay leaves: the standard library only,
// nothing of the project and no third-party module. Otherwise they would
// become the back door TestTransitive looks for.
var leaves = []string{"internal/atomicfile", "internal/textsafe", "internal/wasmbin"}

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

package guest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestBuildsForWasip1 compiles the package for the target tools are built
// for; the host-GOOS tests above do not see the wasmimport declarations.
// End-to-end tests of a running guest live with wasmtools.Load.
func TestBuildsForWasip1(t *testing.T) {
	cmd := exec.Command("go", "vet", ".")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOOS=wasip1 go vet: %v\n%s", err, out)
	}
}

// TestNoNetHTTP: package guest must not pull net/http into every tool
// (about 2 MB of module and a second of first compile); HTTP is in
// package guesthttp, which only tools with network import.
func TestNoNetHTTP(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", ".")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "net/http" || dep == "net" || strings.HasPrefix(dep, "crypto/tls") {
			t.Errorf("package guest depends on %s; keep networking in guesthttp", dep)
		}
	}
}

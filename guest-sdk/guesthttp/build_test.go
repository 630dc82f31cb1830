package guesthttp

import (
	"os"
	"os/exec"
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

//go:build cluster

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPullIntoClusterStore: with [cluster], `agrun pull` stores the tool
// in the cluster's shared module store ([cluster] module_store), not the
// local [oci] dir, and a tool with that oci = loads from it offline — as
// every worker, whose tools load the same way, does.
func TestPullIntoClusterStore(t *testing.T) {
	host, stop := startRegistry(t)
	e := newTestEnv(t, "", "\n[oci]\ndir = \"local-modules\"\n[cluster]\ntemporal_address = \"127.0.0.1:1\"\nmodule_store = \"shared\"\n")
	wasm := filepath.Join(repoRoot(t), "testdata", "word_count.wasm")
	e.run("", "push", wasm, host+"/tools/wc:1").wantCode(t, exitOK)
	r := e.run("", "pull", host+"/tools/wc:1").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "stored in shared ([cluster] module_store)") {
		t.Fatalf("pull with [cluster]: %s", r.stdout)
	}
	line := regexp.MustCompile(`(?m)^  (oci = "[^"]+")$`).FindStringSubmatch(r.stdout)
	if line == nil {
		t.Fatalf("no line to write: %s", r.stdout)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "local-modules")); err == nil {
		t.Error("the local [oci] dir was written with [cluster] on")
	}
	mods, _ := filepath.Glob(filepath.Join(e.dir, "shared", "sha256", "*.wasm"))
	if len(mods) != 1 {
		t.Fatalf("the shared store holds %v, want the module", mods)
	}
	stop() // offline from here
	cfg, _ := os.ReadFile(e.config)
	os.WriteFile(e.config, append(cfg, []byte("\n[tools.wc]\n"+line[1]+"\n")...), 0o644)
	r = e.run("", "call", "wc", `{"text":"a b c"}`).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, `"words":3`) {
		t.Fatalf("call from the shared store: %q %s", r.stdout, r.stderr)
	}
}

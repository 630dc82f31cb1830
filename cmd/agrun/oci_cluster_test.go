//go:build cluster

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/devtemporal"
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

// TestClusterRunUsesAPulledPlugin: on a real cluster, an MCP-style
// plug-in pulled into the shared module store is loaded by the worker
// by its digest (the registry is gone by then, and nothing is in the
// local [oci] dir), offered to the model as kit__TOOL, and a run's call
// of it runs on the worker.
func TestClusterRunUsesAPulledPlugin(t *testing.T) {
	t.Parallel()
	addr := devtemporal.Start(t)
	host, stop := startRegistry(t)
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_1", Name: "kit__reverse", Args: `{"text":"stressed"}`}}, Check: func(t testing.TB, r chattest.Request) {
			if !hasTool(r, "kit__reverse") || !hasTool(r, "kit__stats") {
				t.Errorf("the pulled plug-in's tools are not offered: %+v", r.Tools)
			}
		}},
		chattest.Reply{Text: "reversed"},
	)
	e := clusterTestEnv(t, srv.URL, addr)
	cfg, _ := os.ReadFile(e.config)
	os.WriteFile(e.config, append(cfg, []byte("\n[oci]\ndir = \"local-modules\"\n")...), 0o644)
	e.run("", "push", filepath.Join(repoRoot(t), "testdata", "plugins", "textkit.wasm"), host+"/plugins/textkit:1").wantCode(t, exitOK)
	r := e.run("", "pull", host+"/plugins/textkit:1").wantCode(t, exitOK)
	line := regexp.MustCompile(`(?m)^  (oci = "[^"]+")$`).FindStringSubmatch(r.stdout)
	if line == nil {
		t.Fatalf("pull: %s", r.stdout)
	}
	stop() // the worker cannot reach the registry
	cfg, _ = os.ReadFile(e.config)
	os.WriteFile(e.config, append(cfg, []byte("\n[plugins.kit]\n"+line[1]+"\n")...), 0o644)
	startWorker(t, e, "w1")
	r = e.run("", "run", "--json", "--session", "pk1", "reverse it")
	if r.code != 0 || !strings.Contains(r.stdout, `"name":"kit__reverse","output":"desserts"`) || !strings.Contains(r.stdout, `"text":"reversed"`) {
		t.Fatalf("run: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "local-modules")); err == nil {
		t.Error("the local [oci] dir was used with [cluster] on")
	}
}

//go:build !cluster

package main

import (
	"strings"
	"testing"
)

// TestWithoutClusterSupport: a build without the cluster tag (the
// default) says how to get it, for `agrun worker` and for a config with
// [cluster], instead of running anything (exit 2); its help is the same.
func TestWithoutClusterSupport(t *testing.T) {
	e := newTestEnv(t, "", "\n[cluster]\ntemporal_address = \"127.0.0.1:7233\"\n")
	for _, args := range [][]string{{"worker"}, {"run", "x"}, {"chat"}, {"serve", "--addr", "127.0.0.1:0"}} {
		r := e.run("", args...)
		if r.code != 2 || !strings.Contains(r.stderr, "go build -tags cluster ./cmd/agrun") || !strings.Contains(r.stderr, "go install -tags cluster ./cmd/agrun") {
			t.Errorf("%v: %+v", args, r)
		}
	}
	if r := e.run("", "version"); !strings.Contains(r.stdout, "go install, -tags cluster") {
		t.Errorf("version does not name go install for the cluster: %q", r.stdout)
	}
	if r := e.run("", "worker", "-h"); r.code != 0 || !strings.Contains(r.stdout, "--queues") {
		t.Errorf("worker -h: %+v", r)
	}
}

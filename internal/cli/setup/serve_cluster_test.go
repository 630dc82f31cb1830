//go:build cluster

package setup

import (
	"bytes"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/testing/devtemporal"
	"github.com/agcore/agrun/server"
)

// TestServeCluster: `agrun serve`'s [cluster] gives the server its
// shared store and its runs (a real Temporal dev server: nothing runs
// here, ServeCluster only dials), and a [serve] approval_timeout, which
// the workflow's timer does not read, is warned about, naming the one
// that holds.
func TestServeCluster(t *testing.T) {
	addr := devtemporal.Start(t)
	dir := t.TempDir()
	cfg, err := config.Parse(filepath.Join(dir, "agrun.toml"), []byte(fmt.Sprintf(`
[sessions]
dir = "sessions"
[serve]
approval_timeout = "1m"
[cluster]
temporal_address = %q
module_store = "objects"
approval_timeout = "5m"
`, addr)))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var opts server.Options
	closeCluster, err := ServeCluster(t.Context(), cfg, slog.New(slog.NewTextHandler(&logs, nil)), &opts)
	if err != nil {
		t.Fatal(err)
	}
	defer closeCluster()
	if opts.SharedStore == nil {
		t.Error("no shared store")
	}
	runs, ok := opts.Runs.(*ClusterRuns)
	if !ok || runs.Client.Defaults.ApprovalTimeout.String() != "5m0s" {
		t.Errorf("Runs = %#v", opts.Runs)
	}
	if !strings.Contains(logs.String(), "[serve] approval_timeout is not used in cluster mode") || !strings.Contains(logs.String(), "cluster_approval_timeout=5m0s") {
		t.Errorf("log: %s", logs.String())
	}
}

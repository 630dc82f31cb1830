//go:build !cluster

package setup

import (
	"context"
	"errors"
	"log/slog"

	"github.com/agcore/agrun/cluster/store"
	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/server"
	"github.com/agcore/agrun/session"
)

// This agrun is built without the cluster (the default: linking Temporal,
// gRPC, the AWS SDK and pgx makes a first build much slower, see
// docs/RATIONALE.md). `go build -tags cluster ./cmd/agrun` has it.

// ErrNoCluster is what [cluster] and `agrun worker` get from this build.
var ErrNoCluster = &ConfigError{errors.New("this agrun is built without cluster support, which [cluster] and `agrun worker` need: " +
	"build it with `go build -tags cluster ./cmd/agrun`, or `go install -tags cluster ./cmd/agrun` if you installed it with go install (docs/SCALING.md)")}

// ClusterObjects is [cluster] module_store: not in this build.
func ClusterObjects(context.Context, *config.Config) (store.ObjectStore, error) {
	return nil, ErrNoCluster
}

// ClusterErrorKind is the run error kind of a run on the cluster: there
// is none in this build (ok false).
func ClusterErrorKind(error) (string, bool) { return "", false }

// ServeCluster is `agrun serve` with [cluster]: not in this build.
func ServeCluster(context.Context, *config.Config, *slog.Logger, *server.Options) (func(), error) {
	return nil, ErrNoCluster
}

// SessionAdmin opens the store `agrun sessions` works on: in this build
// the sessions folder, whatever [cluster] says. where names it in
// messages; close releases it.
func SessionAdmin(_ context.Context, cfg *config.Config, _ *slog.Logger) (st session.Admin, where string, close func(), err error) {
	files, err := SessionStore(cfg)
	if err != nil {
		return nil, "", nil, err
	}
	return files, files.Dir(), func() {}, nil
}

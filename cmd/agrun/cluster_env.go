//go:build cluster

package main

import (
	"context"

	"go.temporal.io/sdk/client"

	"github.com/agcore/agrun/cluster"
	"github.com/agcore/agrun/cluster/store"
	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/session"
)

// clusterSupport says whether this build runs [cluster] (agrun version).
const clusterSupport = true

// clusterEnv is setup's Cluster (the Temporal client and the stores of
// [cluster]) under the names the command's files use.
type clusterEnv struct {
	*setup.Cluster
	cfg      *config.Config
	temporal client.Client
	sessions session.Store
	objects  store.ObjectStore
	queues   cluster.Queues
}

func (ce *clusterEnv) close()            { ce.Close() }
func (ce *clusterEnv) namespace() string { return ce.Namespace() }

// openCluster dials Temporal and opens the stores of cfg's [cluster]
// (setup.OpenCluster), the SDK's log on c's.
func (c *cli) openCluster(ctx context.Context, cfg *config.Config) (*clusterEnv, error) {
	sc, err := setup.OpenCluster(ctx, cfg, c.logger())
	if err != nil {
		return nil, err
	}
	return &clusterEnv{Cluster: sc, cfg: sc.Config, temporal: sc.Temporal, sessions: sc.Sessions, objects: sc.Objects, queues: sc.Queues}, nil
}

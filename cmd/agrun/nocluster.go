//go:build !cluster

package main

import (
	"context"
	"flag"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/cli/setup"
)

// This agrun is built without the cluster (the default: linking Temporal,
// gRPC, the AWS SDK and pgx makes a first build much slower, see
// docs/RATIONALE.md). `go build -tags cluster ./cmd/agrun` has it.

// clusterSupport says whether this build runs [cluster] (agrun version).
const clusterSupport = false

// errNoCluster is what [cluster] and `agrun worker` get from this build.
var errNoCluster = setup.ErrNoCluster

func (c *cli) runOnCluster(context.Context, *flag.FlagSet, *config.Config, string, *runOptions, bool) (string, turnStats, error) {
	return "", turnStats{}, errNoCluster
}

func (c *cli) chatOnCluster(context.Context, *flag.FlagSet, *config.Config, *runOptions) error {
	return errNoCluster
}

func (c *cli) worker(ctx context.Context, args []string) error {
	fs := newFlags("worker")
	defineWorkerFlags(fs)
	if _, err := c.parseFlags(fs, args); err != nil {
		return err
	}
	return errNoCluster
}

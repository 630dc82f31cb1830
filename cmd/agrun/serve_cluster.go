//go:build cluster

package main

import (
	"context"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/server"
)

// serveShared opens cfg's cluster for `agrun serve`: the shared store of
// uploads (server.NewSharedStore over [cluster] module_store), and what
// closes it.
func (c *cli) serveShared(ctx context.Context, cfg *config.Config) (server.SharedStore, func(), error) {
	ce, err := c.openCluster(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return server.NewSharedStore(ce.objects, 0), ce.close, nil
}

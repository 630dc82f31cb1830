//go:build cluster

package setup

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/agcore/agrun/cluster/s3store"
	"github.com/agcore/agrun/cluster/store"
	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/session"
)

// ClusterObjects opens [cluster] module_store: S3 (s3://bucket/prefix)
// or a directory (relative to the config; "": one beside the sessions
// folder). Uploaded modules, payloads passed by reference and, with
// [cluster], what `agrun pull` fetched (OCIStore) live there.
func ClusterObjects(ctx context.Context, cfg *config.Config) (store.ObjectStore, error) {
	cc := cfg.Cluster
	switch m := cc.ModuleStore; {
	case strings.HasPrefix(m, "s3://"):
		bucket, prefix, _ := strings.Cut(strings.TrimPrefix(m, "s3://"), "/")
		s3, err := s3store.New(ctx, s3store.Config{Bucket: bucket, Prefix: prefix, Endpoint: cc.S3Endpoint, Region: cc.S3Region, UsePathStyle: cc.S3PathStyle})
		if err != nil {
			return nil, fmt.Errorf("[cluster] module_store: %w", err)
		}
		return s3, nil
	default:
		dir := m
		if dir == "" {
			dir = filepath.Join(filepath.Dir(session.DefaultDir()), "cluster")
		} else if !filepath.IsAbs(dir) && cfg.Path != "" {
			dir = filepath.Join(filepath.Dir(cfg.Path), dir)
		}
		objs, err := store.NewDirObjects(dir)
		if err != nil {
			return nil, fmt.Errorf("[cluster] module_store: %w", err)
		}
		return objs, nil
	}
}

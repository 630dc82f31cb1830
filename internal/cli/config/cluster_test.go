package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// [cluster] decodes strictly; it is off by default; bad values name the
// key and its line.
func TestClusterKeys(t *testing.T) {
	c, err := Parse("agrun.toml", []byte(`[cluster]
temporal_address = "127.0.0.1:7233"
namespace = "agents"
task_queue_prefix = "prod-"
retry_side_effects = true
heartbeat_timeout = "5s"
approval_timeout = "15m"
module_store = "s3://bucket/agrun"
s3_endpoint = "http://127.0.0.1:9000"
s3_path_style = true
session_store = "postgres"
postgres_dsn_env = "PG_DSN"
models = ["gpt-small", "gpt-large"]
`))
	if err != nil {
		t.Fatal(err)
	}
	cc := c.Cluster
	if !cc.Enabled() || cc.Namespace != "agents" || cc.TaskQueuePrefix != "prod-" || !cc.RetrySideEffects || cc.HeartbeatTimeout.Std() != 5*time.Second || cc.ApprovalTimeout.Std() != 15*time.Minute ||
		cc.ModuleStore != "s3://bucket/agrun" || !cc.S3PathStyle || cc.SessionStore != "postgres" || cc.PostgresDSNEnv != "PG_DSN" ||
		strings.Join(cc.Models, ",") != "gpt-small,gpt-large" {
		t.Errorf("decoded %+v", cc)
	}
	if Default().Cluster.Enabled() {
		t.Error("the cluster is on by default")
	}
	for _, tc := range []struct {
		toml, key, msg string
		line           int
	}{
		{"[cluster]\ntemporal_address = \"http://x:7233\"\n", "cluster.temporal_address", "host:port", 2},
		{"[cluster]\ntemporal_address = \"localhost\"\n", "cluster.temporal_address", "host:port", 2},
		{"[cluster]\n\nsession_store = \"sqlite\"\n", "cluster.session_store", `"postgres"`, 3},
		{"[cluster]\nmodule_store = \"gs://b\"\n", "cluster.module_store", "s3://bucket/prefix", 2},
		{"[cluster]\nmodule_store = \"s3://\"\n", "cluster.module_store", "needs a bucket", 2},
		{"[cluster]\ns3_endpoint = \"minio:9000\"\n", "cluster.s3_endpoint", "http://", 2},
		{"[cluster]\nheartbeat_timeout = \"-1s\"\n", "cluster.heartbeat_timeout", "", 2},
		{"[cluster]\napproval_timeout = \"-1s\"\n", "cluster.approval_timeout", "", 2},
		{"[cluster]\nqueues = 3\n", "cluster.queues", "unknown key", 2},
		{"[cluster]\nmodels = [\"a\", \" \"]\n", "cluster.models", "model name", 2},
	} {
		_, err := Parse("agrun.toml", []byte(tc.toml))
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != tc.key || ce.Line != tc.line || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q: %v", tc.toml, err)
		}
	}
}

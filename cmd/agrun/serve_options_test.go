package main

import (
	"reflect"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/server"
	"github.com/agcore/agrun/wasmtools"
)

// TestServeOptions checks that every key of [serve] reaches the server's
// options (tokens_env is read by cmd/agrun itself).
func TestServeOptions(t *testing.T) {
	cfg, err := config.Parse("agrun.toml", []byte(`
[serve]
addr = "127.0.0.1:9"
tokens_env = "X_TOKENS"
max_upload = "2MiB"
max_body = "3KiB"
max_concurrent_calls = 5
max_calls_per_client = 2
max_connections = 100
max_connections_per_client = 10
call_timeout = "7s"
read_timeout = "8s"
write_timeout = "9s"
body_timeout = "4s"
uploads_per_minute = 6
data_dir = "/srv/agrun"
allowed_hosts = ["agrun.example.com"]

[serve.uploads]
allowed_hosts = ["api.example.com"]
allow_private = true
timeout = "1s"
memory = "32MiB"
max_output = "1KiB"
`))
	if err != nil {
		t.Fatal(err)
	}
	got := serveOptions(cfg.Serve)
	want := server.Options{
		Addr:         "127.0.0.1:9",
		AllowedHosts: []string{"agrun.example.com"},
		DataDir:      "/srv/agrun",
		Uploads: wasmtools.Grant{
			AllowedHosts: []string{"api.example.com"},
			AllowPrivate: true,
			Limits:       runtime.Limits{Timeout: time.Second, MemoryBytes: 32 << 20, MaxStdout: 1 << 10},
		},
		MaxUpload:               2 << 20,
		MaxBody:                 3 << 10,
		MaxConcurrentCalls:      5,
		MaxCallsPerClient:       2,
		CallTimeout:             7 * time.Second,
		ReadTimeout:             8 * time.Second,
		WriteTimeout:            9 * time.Second,
		BodyTimeout:             4 * time.Second,
		UploadsPerMinute:        6,
		MaxConnections:          100,
		MaxConnectionsPerClient: 10,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("serveOptions =\n%+v\nwant\n%+v", got, want)
	}
}

// Package devtemporal starts a real Temporal server for tests: the
// Temporal CLI's dev server (`temporal server start-dev`, SQLite in
// memory, on a free loopback port), from the binary that
// scripts/setup-cluster.sh builds into .cache/temporal/bin (or
// $AGRUN_TEMPORAL_CLI). It is ready in about a second and is stopped when
// the test ends.
//
// Without the binary a test skips, with a message that names the setup
// script — unless AGRUN_REQUIRE_CLUSTER=1 (.ci/run sets it), where a
// missing server fails the test: CI must never pass by skipping.
package devtemporal

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/agcore/agrun/internal/testing/testguest"
)

// LowLatency are the dev server's settings for a hand-off in
// milliseconds: its one history shard reads new tasks at most 20 times a
// second by default (history.transferProcessorMaxPollRPS), so every task
// a workflow schedules (an activity, the workflow task after it) waited
// about 45 ms for the next read — most of a cluster tool call's cost
// (docs/SCALING.md, "Figures").
//
// And one partition per task queue (matching.numTaskqueue*Partitions,
// 4 by default): with few pollers, a task written to a partition that no
// poller waits on waited about 2 s to be forwarded — one run in ten of
// a 5-call benchmark.
var LowLatency = []string{
	"--dynamic-config-value", "history.transferProcessorMaxPollRPS=10000",
	"--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
	"--dynamic-config-value", "matching.numTaskqueueWritePartitions=1",
}

// Binary returns the dev server's executable, or "" if there is none.
func Binary() string {
	if p := os.Getenv("AGRUN_TEMPORAL_CLI"); p != "" {
		return p
	}
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	root, err := testguest.ModuleRoot(wd)
	if err != nil {
		return ""
	}
	p := filepath.Join(root, ".cache", "temporal", "bin", "temporal")
	if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
		return ""
	}
	return p
}

// Start starts a dev server for the test and returns its frontend
// address (host:port, namespace "default").
func Start(t testing.TB) string {
	t.Helper()
	bin := Binary()
	if bin == "" {
		msg := "no Temporal dev server: run scripts/setup-cluster.sh (it builds .cache/temporal/bin/temporal), or set AGRUN_TEMPORAL_CLI"
		if os.Getenv("AGRUN_REQUIRE_CLUSTER") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath: bin,
		LogLevel:     "error",
		ExtraArgs:    LowLatency,
		Stdout:       io.Discard,
		Stderr:       io.Discard,
		ClientOptions: &client.Options{
			HostPort:  "127.0.0.1:" + freePort(t),
			Namespace: "default",
			Logger:    tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
		},
	})
	if err != nil {
		t.Fatalf("starting the Temporal dev server (%s): %v", bin, err)
	}
	t.Cleanup(func() { srv.Stop() })
	return srv.FrontendHostPort()
}

// freePort returns a loopback port nobody listens on now.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// Client dials the dev server at addr for the test (namespace "default",
// the SDK's log discarded) and closes the client when the test ends.
func Client(t testing.TB, addr string) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: addr, Logger: tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatalf("dialling the Temporal dev server at %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

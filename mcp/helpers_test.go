package mcp

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/syncbuf"
	"github.com/agcore/agrun/internal/testing/testguest"
)

// testServer builds (once per run) the test server testdata/servers/name
// and returns its path.
func testServer(t *testing.T, name string) string {
	t.Helper()
	return testguest.BuildNative(t, filepath.Join("testdata", "servers", name))
}

func newLogger() (*slog.Logger, *syncbuf.Buffer) {
	b := &syncbuf.Buffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// stdioClient connects a Client to the test server name, with env added to
// its environment; the client is closed when the test ends.
func stdioClient(t *testing.T, name string, env []string, opts *ClientOptions) *Client {
	t.Helper()
	c := newStdioClient(t, name, env, opts)
	if err := c.Connect(context.Background()); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	return c
}

func newStdioClient(t *testing.T, name string, env []string, opts *ClientOptions) *Client {
	t.Helper()
	if opts == nil {
		opts = &ClientOptions{}
	}
	if opts.Logger == nil {
		opts.Logger, _ = newLogger()
	}
	c, err := NewClient(name, Stdio{Command: testServer(t, name), Env: env}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// eventually polls cond until it holds or 10 s pass (a deadline for a
// broken implementation, not a performance claim).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readPID reads a process id a test server wrote to file.
func readPID(t *testing.T, file string) int {
	t.Helper()
	var pid int
	eventually(t, "the pid file", func() bool {
		b, err := os.ReadFile(file)
		if err != nil || len(bytes.TrimSpace(b)) == 0 {
			return false
		}
		lines := strings.Fields(string(b))
		pid, _ = strconv.Atoi(lines[len(lines)-1])
		return pid > 0
	})
	return pid
}

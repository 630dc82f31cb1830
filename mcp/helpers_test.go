package mcp

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/syncbuf"
	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/agcore/agrun/registry"
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

// wantKind fails the test unless err is a *registry.Error of kind k.
func wantKind(t *testing.T, err error, k registry.Kind) *registry.Error {
	t.Helper()
	var e *registry.Error
	if !errors.As(err, &e) {
		t.Fatalf("error = %v (%T), want a *registry.Error of kind %s", err, err, k)
	}
	if e.Kind != k {
		t.Fatalf("kind = %s, want %s (error: %v)", e.Kind, k, err)
	}
	return e
}

// processGone reports whether pid no longer runs (absent or a zombie).
func processGone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	// pid (comm) state ...
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z' || s[i+2] == 'X'
	}
	return false
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

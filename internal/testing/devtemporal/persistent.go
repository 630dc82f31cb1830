package devtemporal

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
)

// Server is a dev server whose state is a SQLite file, so that a test can
// kill it the hard way (SIGKILL: no shutdown, writes cut wherever they
// were) and start it again on the same address and the same file, as an
// operator's restart after a crash would (docs/SCALING.md, "Faults").
type Server struct {
	t    testing.TB
	bin  string
	args []string
	addr string
	cmd  *exec.Cmd
}

// StartPersistent starts a dev server that keeps its state in a file of
// the test's temporary directory; it is stopped when the test ends.
func StartPersistent(t testing.TB) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		msg := "no Temporal dev server: run scripts/setup-cluster.sh (it builds .cache/temporal/bin/temporal), or set AGRUN_TEMPORAL_CLI"
		if os.Getenv("AGRUN_REQUIRE_CLUSTER") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	port := freePort(t)
	s := &Server{t: t, bin: bin, addr: "127.0.0.1:" + port, args: append([]string{
		"server", "start-dev", "--ip", "127.0.0.1", "--port", port, "--namespace", "default",
		"--dynamic-config-value", "frontend.enableServerVersionCheck=false",
		"--log-level", "error", "--headless",
		"--db-filename", filepath.Join(t.TempDir(), "temporal.db"),
	}, LowLatency...)}
	s.Start()
	t.Cleanup(func() {
		if s.cmd != nil {
			s.cmd.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { s.cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				s.cmd.Process.Kill()
			}
		}
	})
	return s
}

// Addr is the server's frontend address (host:port), the same across
// restarts.
func (s *Server) Addr() string { return s.addr }

// Start starts the server (again) and waits until it answers.
func (s *Server) Start() {
	s.t.Helper()
	cmd := exec.Command(s.bin, s.args...)
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting the Temporal dev server (%s): %v", s.bin, err)
	}
	s.cmd = cmd
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		c, err := client.Dial(client.Options{HostPort: s.addr, Logger: discard()})
		if err == nil {
			_, err = c.CheckHealth(ctx, &client.CheckHealthRequest{})
			c.Close()
			if err == nil {
				return
			}
		}
		select {
		case <-ctx.Done():
			s.t.Fatalf("the Temporal dev server at %s did not answer: %v", s.addr, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Kill ends the server with SIGKILL and waits
// for it to be gone.
func (s *Server) Kill() {
	s.t.Helper()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill() // SIGKILL; the CLI runs the whole server in its one process
	s.cmd.Wait()
	s.cmd = nil
}

// discard is the SDK's logger, silenced.
func discard() tlog.Logger { return tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)) }

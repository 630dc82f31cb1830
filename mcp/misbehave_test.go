package mcp

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/internal/testing/leak"
	"github.com/agcore/agrun/internal/testing/require"
	"github.com/agcore/agrun/registry"
)

// The server exits in the middle of a call: the call fails at once with
// mcp_error (not after the 20 s timeout, which would be mcp_timeout), the
// next call restarts the server, and restarts in a row are bounded.
func TestServerExitsMidCall(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pids")
	// CRASH_TOGETHER: the first server dies only once all three calls
	// are in progress (a call started after the crash would restart it).
	c := stdioClient(t, "crash", []string{"PIDFILE=" + pidfile, "CRASH_TOGETHER=3"}, &ClientOptions{
		Timeout: 20 * time.Second, MaxRestarts: 2, RestartBackoff: 10 * time.Millisecond,
	})
	ctx := context.Background()
	starts := func() int {
		b, _ := os.ReadFile(pidfile)
		return len(strings.Fields(string(b)))
	}

	// Several calls are pending when the server dies; all fail.
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = c.CallTool(ctx, "crash", nil)
		}()
	}
	wg.Wait()
	sawStatus := false
	for _, err := range errs {
		e := require.Kind(t, err, registry.MCPError)
		sawStatus = sawStatus || strings.Contains(e.Message(), "exit status 3")
	}
	if !sawStatus {
		t.Errorf("no error mentions the exit status: %v", errs)
	}

	// The next call restarts the server.
	out, err := c.CallTool(ctx, "echo", json.RawMessage(`{"text":"back"}`))
	if err != nil || string(out) != `"back"` {
		t.Fatalf("echo after crash = %s, %v", out, err)
	}
	if n := starts(); n != 2 {
		t.Fatalf("server started %d times, want 2", n)
	}

	// Crash on every call: two restarts in a row are allowed, then no more.
	for range 3 {
		_, err := c.CallTool(ctx, "crash", nil)
		require.Kind(t, err, registry.MCPError)
	}
	if n := starts(); n != 4 {
		t.Fatalf("server started %d times, want 4", n)
	}
	_, err = c.CallTool(ctx, "echo", json.RawMessage(`{"text":"x"}`))
	e := require.Kind(t, err, registry.MCPError)
	if !strings.Contains(e.Message(), "not restarted") {
		t.Errorf("error after the restart budget: %q", e.Message())
	}
	if n := starts(); n != 4 {
		t.Fatalf("server started %d times after the budget was spent, want 4", n)
	}
}

func TestServerExitsAtStart(t *testing.T) {
	log, buf := newLogger()
	c := newStdioClient(t, "crash", []string{"CRASH_AT_START=1"}, &ClientOptions{Logger: log})
	err := c.Connect(context.Background())
	e := require.Kind(t, err, registry.MCPError)
	if !strings.Contains(e.Message(), "exit status 4") {
		t.Errorf("error %q does not give the exit status", e.Message())
	}
	eventually(t, "stderr in the log", func() bool { return strings.Contains(buf.String(), "dying at start") })
}

func TestServerNeverAnswers(t *testing.T) {
	c := stdioClient(t, "hang", nil, &ClientOptions{Timeout: 300 * time.Millisecond})
	ctx := context.Background()
	_, err := c.CallTool(ctx, "hang", nil)
	require.Kind(t, err, registry.MCPTimeout)
	// The server is alive; other calls still work.
	out, err := c.CallTool(ctx, "echo", json.RawMessage(`{"text":"still here"}`))
	if err != nil || string(out) != `"still here"` {
		t.Fatalf("echo after a timeout = %s, %v", out, err)
	}
	// The caller's own deadline is the caller's timeout, not the server's.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = c.CallTool(short, "hang", nil)
	require.Kind(t, err, registry.Timeout)
}

func TestServerNeverAnswersHandshake(t *testing.T) {
	c := newStdioClient(t, "hang", []string{"HANG_INIT=1"}, &ClientOptions{Timeout: 300 * time.Millisecond})
	err := c.Connect(context.Background())
	require.Kind(t, err, registry.MCPTimeout)
	_, err = c.CallTool(context.Background(), "echo", nil)
	require.Kind(t, err, registry.MCPNotInitialized)
}

func TestServerPrintsNonJSON(t *testing.T) {
	log, buf := newLogger()
	c := stdioClient(t, "garbage", nil, &ClientOptions{Logger: log})
	out, err := c.CallTool(context.Background(), "noisy", nil)
	if err != nil || string(out) != `"quiet now"` {
		t.Fatalf("noisy = %s, %v", out, err)
	}
	out, err = c.CallTool(context.Background(), "echo", json.RawMessage(`{"text":"ok"}`))
	if err != nil || string(out) != `"ok"` {
		t.Fatalf("echo = %s, %v", out, err)
	}
	for _, w := range []string{"Starting garbage server", "DEBUG: computing the answer", "non-JSON"} {
		if !strings.Contains(buf.String(), w) {
			t.Errorf("log lacks %q:\n%s", w, buf.String())
		}
	}
}

func TestServerSendsHugeMessage(t *testing.T) {
	c := stdioClient(t, "huge", nil, &ClientOptions{RestartBackoff: 10 * time.Millisecond})
	ctx := context.Background()
	_, err := c.CallTool(ctx, "huge", nil)
	e := require.Kind(t, err, registry.MCPError)
	if !strings.Contains(e.Message(), "larger than the 16777216-byte cap") {
		t.Errorf("error %q does not name the cap", e.Message())
	}
	// The connection was dropped; the next call gets a new server.
	out, err := c.CallTool(ctx, "big", nil)
	if err != nil || len(out) != 1<<20+2 {
		t.Fatalf("big = %d bytes, %v", len(out), err)
	}
}

func TestMessageCapIsConfigurable(t *testing.T) {
	c := stdioClient(t, "huge", nil, &ClientOptions{MaxMessageBytes: 512 << 10})
	_, err := c.CallTool(context.Background(), "big", nil)
	require.Kind(t, err, registry.MCPError)
}

func TestResponsesWithUnknownIDs(t *testing.T) {
	c := stdioClient(t, "unknownid", nil, &ClientOptions{Timeout: 500 * time.Millisecond})
	ctx := context.Background()
	out, err := c.CallTool(ctx, "late", nil)
	if err != nil || string(out) != `"finally"` {
		t.Fatalf("late = %s, %v", out, err)
	}
	_, err = c.CallTool(ctx, "never", nil)
	require.Kind(t, err, registry.MCPTimeout)
	out, err = c.CallTool(ctx, "late", nil)
	if err != nil || string(out) != `"finally"` {
		t.Fatalf("late after stray ids = %s, %v", out, err)
	}
}

func TestNotificationFlood(t *testing.T) {
	log, buf := newLogger()
	// A generous timeout: under -race on a loaded machine the SDK takes its
	// time over 15000 messages; the point is that nothing breaks.
	c := stdioClient(t, "flood", []string{"FLOOD_N=5000"}, &ClientOptions{Logger: log, Timeout: 2 * time.Minute})
	ctx := context.Background()
	out, err := c.CallTool(ctx, "flood", nil)
	if err != nil || string(out) != `"done flooding"` {
		t.Fatalf("flood = %s, %v", out, err)
	}
	// 5000 tools/list_changed notifications coalesce into a few refreshes
	// (the server answers nothing else while it floods).
	out, err = c.CallTool(ctx, "stats", nil)
	if err != nil {
		t.Fatal(err)
	}
	var lists string
	json.Unmarshal(out, &lists)
	if n := atoiOr(lists, 1<<30); n > 5 {
		t.Errorf("server answered %d tools/list requests during a flood of 5000 list_changed", n)
	}
	if buf.Len() > 64<<10 {
		t.Errorf("the flood produced %d bytes of log", buf.Len())
	}
}

func atoiOr(s string, def int) int {
	n := 0
	if s == "" {
		return def
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return def
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// Close ends the server's whole process group: the child the server
// spawned does not outlive it, and the server's exit status 1 on end of
// input is not reported as an error.
func TestCloseLeavesNoOrphans(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pid")
	c := newStdioClient(t, "grandchild", []string{"PIDFILE=" + pidfile}, nil)
	if err := c.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	pid := readPID(t, pidfile)
	if leak.ProcessGone(pid) {
		t.Fatal("grandchild not running")
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatalf("Close after a normal shutdown: %v", err)
	}
	// Close has signalled the group; the kernel finishes the job.
	eventually(t, "the grandchild to be gone after Close", func() bool { return leak.ProcessGone(pid) })
}

// A server that ignores the end of its input and SIGTERM is killed; Close
// takes no longer than its context allows (plus the SIGKILL).
func TestCloseKillsStubbornServer(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pid")
	c := newStdioClient(t, "grandchild", []string{"PIDFILE=" + pidfile, "STUBBORN=1"}, nil)
	if err := c.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	pid := readPID(t, pidfile)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	eventually(t, "the grandchild to be gone after Close", func() bool { return leak.ProcessGone(pid) })
}

// The server dies while its child still holds its stdout open: stdout
// never reaches EOF, yet the pending call fails at once, and the child is
// ended too.
func TestServerDiesWhileChildHoldsStdout(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pid")
	c := newStdioClient(t, "grandchild", []string{"PIDFILE=" + pidfile}, &ClientOptions{Timeout: 20 * time.Second})
	if err := c.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	pid := readPID(t, pidfile)
	_, err := c.CallTool(context.Background(), "die", nil)
	e := require.Kind(t, err, registry.MCPError)
	if !strings.Contains(e.Message(), "exit status 5") {
		t.Errorf("error %q lacks the exit status", e.Message())
	}
	eventually(t, "the orphaned child to be ended", func() bool { return leak.ProcessGone(pid) })
}

func TestStderrIsDrainedAndCapped(t *testing.T) {
	log, buf := newLogger()
	c := stdioClient(t, "stderrflood", []string{"STDERR_MB=32"}, &ClientOptions{Logger: log, MaxStderrBytes: 16 << 10})
	out, err := c.CallTool(context.Background(), "echo", json.RawMessage(`{"text":"alive"}`))
	if err != nil || string(out) != `"alive"` {
		t.Fatalf("echo = %s, %v", out, err)
	}
	if n := buf.Len(); n > 64<<10 {
		t.Errorf("32 MiB of stderr produced %d bytes of log; cap is 16 KiB of stderr", n)
	}
	if !strings.Contains(buf.String(), "over the cap") {
		t.Errorf("log does not say stderr was cut")
	}
}

// The shortfalls of the SDK's CommandTransport that Stdio works around:
// Close reports the exit status of a server that shut down normally, and
// the server's own children survive it.
func TestCommandTransportShortfall(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pid")
	cmd := exec.Command(testServer(t, "grandchild"))
	cmd.Env = append(os.Environ(), "PIDFILE="+pidfile)
	client := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, &sdk.ClientOptions{Capabilities: &sdk.ClientCapabilities{}})
	cs, err := client.Connect(context.Background(), &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pid := readPID(t, pidfile)
	defer func() {
		if p, err := os.FindProcess(pid); err == nil {
			p.Kill()
		}
	}()
	err = cs.Close()
	if err == nil || !strings.Contains(err.Error(), "exit status 1") {
		t.Errorf("CommandTransport Close = %v; expected the shortfall (exit status 1 reported as an error)", err)
	}
	if leak.ProcessGone(pid) {
		t.Errorf("grandchild gone after CommandTransport Close; expected the shortfall (an orphan)")
	}
}

// After a crash the Client waits RestartBackoff before restarting; a call
// whose context ends first fails with the caller's timeout, and does not
// restart the server.
func TestRestartBackoff(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pids")
	c := stdioClient(t, "crash", []string{"PIDFILE=" + pidfile}, &ClientOptions{RestartBackoff: time.Hour})
	_, err := c.CallTool(context.Background(), "crash", nil)
	require.Kind(t, err, registry.MCPError)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = c.CallTool(ctx, "echo", json.RawMessage(`{"text":"too soon"}`))
	require.Kind(t, err, registry.Timeout)
	b, _ := os.ReadFile(pidfile)
	if n := len(strings.Fields(string(b))); n != 1 {
		t.Errorf("server started %d times during the backoff, want 1", n)
	}
	// The interrupted wait did not use up the restart budget.
	c.mu.Lock()
	n := c.restarts
	c.mu.Unlock()
	if n != 0 {
		t.Errorf("restarts = %d after an interrupted backoff, want 0", n)
	}
}

func TestCommandNotFound(t *testing.T) {
	c, err := NewClient("ghost", Stdio{Command: filepath.Join(t.TempDir(), "no-such-server")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	e := require.Kind(t, c.Connect(context.Background()), registry.MCPError)
	if !strings.Contains(e.Message(), "no-such-server") {
		t.Errorf("error %q does not name the command", e.Message())
	}
}

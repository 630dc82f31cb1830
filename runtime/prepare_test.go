package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"
	"time"
)

// waitPrepared waits until the entry has an instance prepared ahead.
func waitPrepared(t *testing.T, e *snapEntry) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !e.hasReady() {
		if time.Now().After(deadline) {
			t.Fatal("no instance was prepared ahead")
		}
		time.Sleep(time.Millisecond)
	}
}

// A call of a snapshotted reactor prepares the next instance; the next
// call uses it, bound to that call's stdin, stdout, mounts and limits.
func TestPrepareAhead(t *testing.T) {
	if goruntime.GOMAXPROCS(0) < 2 {
		t.Skip("preparing ahead needs an idle CPU: GOMAXPROCS is 1")
	}
	r := newRuntime(t, Config{MaxInstances: 8}) // room for one prepared per configuration below
	m := compile(t, r, probeReactor(t))
	dirs := make([]string, 3)
	for i := range dirs {
		dirs[i] = t.TempDir()
		if err := os.WriteFile(filepath.Join(dirs[i], "f"), []byte{'A' + byte(i)}, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	in := func(i int) Input {
		return Input{Args: []string{"probe", "read", "/data/f"}, Mounts: []Mount{{Host: dirs[i], Guest: "/data"}}}
	}
	for i := range dirs {
		out, err := r.Run(context.Background(), m, in(i))
		if err != nil || string(out.Stdout) != string(rune('A'+i)) {
			t.Fatalf("call %d: %q, %v; want the file of its own mount", i, out.Stdout, err)
		}
		e := entry(m, in(i))
		waitPrepared(t, e)
	}

	// stdin and stdout are the call's.
	echo := Input{Args: []string{"probe", "echo"}}
	for _, msg := range []string{"one", "two", "three"} {
		echo.Stdin = []byte(msg)
		out, err := r.Run(context.Background(), m, echo)
		if err != nil || string(out.Stdout) != msg {
			t.Fatalf("echo %q: %q, %v", msg, out.Stdout, err)
		}
		waitPrepared(t, entry(m, echo))
	}

	// Limits bind too: a prepared instance runs into its call's output cap
	// and timeout.
	flood := Input{Args: []string{"probe", "floodout"}, Limits: Limits{MaxStdout: 1000}}
	for i := 0; i < 2; i++ {
		out, err := r.Run(context.Background(), m, flood)
		if !errors.Is(err, ErrOutputLimit) || len(out.Stdout) != 1000 {
			t.Fatalf("flood %d: %d bytes, %v; want ErrOutputLimit at 1000", i, len(out.Stdout), err)
		}
		waitPrepared(t, entry(m, flood))
	}
	spin := Input{Args: []string{"probe", "spin"}, Limits: Limits{Timeout: 100 * time.Millisecond}}
	for i := 0; i < 2; i++ {
		if _, err := r.Run(context.Background(), m, spin); !errors.Is(err, ErrTimeout) {
			t.Fatalf("spin %d: %v; want ErrTimeout", i, err)
		}
		waitPrepared(t, entry(m, spin))
	}

	// An instance prepared for one memory limit is not used by a call with
	// another: the call makes its own, under its limit.
	alloc := Input{Args: []string{"probe", "alloc"}, Limits: Limits{MemoryBytes: 32 << 20}}
	if _, err := r.Run(context.Background(), m, alloc); !errors.Is(err, ErrMemoryLimit) {
		t.Fatalf("alloc: %v; want ErrMemoryLimit", err)
	}
	waitPrepared(t, entry(m, alloc))
	alloc.Limits.MemoryBytes = 16 << 20
	if _, err := r.Run(context.Background(), m, alloc); !errors.Is(err, ErrMemoryLimit) {
		t.Fatalf("alloc under 16 MiB: %v; want ErrMemoryLimit", err)
	}

	// Closing the module closes what was prepared for it.
	if n := r.prepared.Load(); n == 0 || n > 8 {
		t.Fatalf("%d instances prepared before Close, want 1 to MaxInstances (8)", n)
	}
	m.Close(context.Background())
	// The last reference may be a call's instance still closing behind it.
	deadline := time.Now().Add(30 * time.Second)
	for r.prepared.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := r.prepared.Load(); n != 0 {
		t.Errorf("%d instances still prepared after the module was closed", n)
	}
}

// With DisablePrepare, nothing is made ahead.
func TestDisablePrepare(t *testing.T) {
	r := newRuntime(t, Config{DisablePrepare: true})
	m := compile(t, r, probeReactor(t))
	in := Input{Args: []string{"probe", "echo"}, Stdin: []byte("x")}
	for i := 0; i < 3; i++ {
		if out, err := r.Run(context.Background(), m, in); err != nil || string(out.Stdout) != "x" {
			t.Fatalf("call %d: %q, %v", i, out.Stdout, err)
		}
	}
	if e := entry(m, in); e == nil || e.hasReady() || r.prepared.Load() != 0 {
		t.Fatal("an instance was prepared with DisablePrepare")
	}
}

// A Runtime closed while an instance waits prepared closes it and returns.
func TestCloseWithPrepared(t *testing.T) {
	if goruntime.GOMAXPROCS(0) < 2 {
		t.Skip("preparing ahead needs an idle CPU: GOMAXPROCS is 1")
	}
	r, err := New(context.Background(), Config{CacheDir: newRuntime(t, Config{}).cfg.CacheDir})
	if err != nil {
		t.Fatal(err)
	}
	m := compile(t, r, probeReactor(t))
	in := Input{Args: []string{"probe", "echo"}}
	if _, err := r.Run(context.Background(), m, in); err != nil {
		t.Fatal(err)
	}
	waitPrepared(t, entry(m, in))
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Run(context.Background(), m, in); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close: %v", err)
	}
}

// Calls in parallel, with instances prepared and taken concurrently, each
// see only their own input.
func TestPrepareConcurrent(t *testing.T) {
	r := newRuntime(t, Config{})
	m := compile(t, r, probeReactor(t))
	errs := make(chan error, 4)
	for w := 0; w < 4; w++ {
		go func() {
			for i := 0; i < 15; i++ {
				msg := fmt.Sprintf("worker %d call %d", w, i)
				out, err := r.Run(context.Background(), m, Input{Args: []string{"probe", "echo"}, Stdin: []byte(msg)})
				if err == nil && string(out.Stdout) != msg {
					err = fmt.Errorf("%q saw %q", msg, out.Stdout)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

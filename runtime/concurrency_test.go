package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/leak"
)

// Many goroutines calling Run at once: every call gets its own fresh
// instance and its own output, and at most MaxInstances run at a time.
func TestRunConcurrent(t *testing.T) {
	const maxInstances = 3
	r := newRuntime(t, Config{MaxInstances: maxInstances})
	m := compile(t, r, probe(t))
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := fmt.Sprintf("call %d", i)
			out, err := r.Run(context.Background(), m, Input{Args: []string{"probe", "echo"}, Stdin: []byte(in)})
			if err != nil {
				errs <- err
				return
			}
			if string(out.Stdout) != in {
				errs <- fmt.Errorf("call %d got %q", i, out.Stdout)
			}
			if n := len(r.sem); n > maxInstances {
				errs <- fmt.Errorf("%d instances alive", n)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Callers beyond MaxInstances wait, and give up when their context ends.
func TestRunWaitsForASlot(t *testing.T) {
	r := newRuntime(t, Config{MaxInstances: 1})
	spin := compile(t, r, wat(t, "spin"))
	busy := make(chan error, 1)
	go func() {
		_, err := r.Run(context.Background(), spin, Input{Limits: Limits{Timeout: time.Second}})
		busy <- err
	}()
	for len(r.sem) == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := r.Run(ctx, spin, Input{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting caller: %v, want DeadlineExceeded", err)
	}
	if err := <-busy; !errors.Is(err, ErrTimeout) {
		t.Errorf("busy caller: %v, want ErrTimeout", err)
	}
}

// Close ends calls in flight with ErrClosed, waits for them, and refuses
// later calls.
func TestCloseDuringRun(t *testing.T) {
	r, err := New(context.Background(), Config{DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.Compile(context.Background(), wat(t, "spin"))
	if err != nil {
		t.Fatal(err)
	}
	var started atomic.Int32
	done := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() {
			started.Add(1)
			_, err := r.Run(context.Background(), m, Input{})
			done <- err
		}()
	}
	for started.Load() < 4 || len(r.sem) < 2 {
		time.Sleep(time.Millisecond)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Errorf("call in flight: %v, want ErrClosed", err)
		}
	}
	if _, err := r.Run(context.Background(), m, Input{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close: %v", err)
	}
	if _, err := r.Compile(context.Background(), wat(t, "spin")); !errors.Is(err, ErrClosed) {
		t.Errorf("Compile after Close: %v", err)
	}
}

// Calls leave no goroutines or file descriptors behind, network and mounts
// included.
func TestNoLeaks(t *testing.T) {
	r := newRuntime(t, Config{})
	m := compile(t, r, probe(t))
	dir := t.TempDir()
	os.WriteFile(dir+"/f", []byte("x"), 0o644)
	call := func() {
		r.Run(context.Background(), m, Input{Args: []string{"probe", "read", "/d/f"}, Mounts: []Mount{{Host: dir, Guest: "/d"}}})
		r.Run(context.Background(), m, Input{Args: []string{"probe", "http", get("http://127.0.0.1:1/")},
			Network: &NetworkGrant{AllowedHosts: []string{"127.0.0.1"}, AllowPrivate: true}})
		r.Run(context.Background(), m, Input{Args: []string{"probe", "spin"}, Limits: Limits{Timeout: 50 * time.Millisecond}})
	}
	call() // warm up lazily started goroutines
	g0, fd0 := runtime.NumGoroutine(), leak.OpenFDs(t)
	for i := 0; i < 5; i++ {
		call()
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > g0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > g0 {
		t.Errorf("goroutines: %d before, %d after", g0, g)
	}
	if fd := leak.OpenFDs(t); fd0 >= 0 && fd > fd0 {
		t.Errorf("open file descriptors: %d before, %d after", fd0, fd)
	}
}

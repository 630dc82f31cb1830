package runtime

import (
	"context"
	"errors"
	goruntime "runtime"
	"testing"
	"time"
)

// TestCompileBorrowsIdleSlots: a compile alone takes the free compile
// slots as wazero compilation workers (up to GOMAXPROCS), gives them back
// when it ends, and its machine code behaves as a compile on one worker
// does; with MaxCompiles 1 there is nothing to borrow, and a compile
// WithOneCompileSlot borrows nothing.
func TestCompileBorrowsIdleSlots(t *testing.T) {
	wasm := probe(t)
	ctx := context.Background()
	run := func(r *Runtime) string {
		t.Helper()
		m := compile(t, r, wasm)
		out, err := r.Run(ctx, m, Input{Args: []string{"probe", "echo"}, Stdin: []byte("same code")})
		if err != nil {
			t.Fatal(err)
		}
		return string(out.Stdout)
	}

	one := newRuntime(t, Config{DisableCache: true, MaxCompiles: 1})
	if got := run(one); got != "same code" {
		t.Fatalf("one worker: %q", got)
	}
	if w := one.Stats().CompileWorkers; w != 1 {
		t.Errorf("MaxCompiles 1: %d workers", w)
	}

	many := newRuntime(t, Config{DisableCache: true, MaxCompiles: 4})
	if got := run(many); got != "same code" {
		t.Fatalf("borrowed workers: %q", got)
	}
	want := int64(min(4, goruntime.GOMAXPROCS(0)))
	if w := many.Stats().CompileWorkers; w != want {
		t.Errorf("a compile alone: %d workers, want %d (GOMAXPROCS %d)", w, want, goruntime.GOMAXPROCS(0))
	}
	if n := len(many.compileSem); n != 0 {
		t.Errorf("%d compile slots still held after the compile", n)
	}

	// A server's clients' compiles borrow nothing.
	fair := newRuntime(t, Config{DisableCache: true, MaxCompiles: 4})
	if _, err := fair.Compile(WithOneCompileSlot(ctx), wasm); err != nil {
		t.Fatal(err)
	}
	if w := fair.Stats().CompileWorkers; w != 1 {
		t.Errorf("WithOneCompileSlot: %d workers", w)
	}

	// Slots held by other compiles are not borrowed: with all but one
	// taken, a compile runs on one worker.
	busy := newRuntime(t, Config{DisableCache: true, MaxCompiles: 4})
	for range 3 {
		busy.compileSem <- struct{}{}
	}
	run(busy)
	if w := busy.Stats().CompileWorkers; w != 1 {
		t.Errorf("three slots busy: %d workers", w)
	}
	for range 3 {
		<-busy.compileSem
	}

	// A module of one function has one to compile: no slot is borrowed
	// to sit idle.
	single := newRuntime(t, Config{DisableCache: true, MaxCompiles: 4})
	if _, err := single.Compile(ctx, wat(t, "hello")); err != nil {
		t.Fatal(err)
	}
	if w := single.Stats().CompileWorkers; w != 1 {
		t.Errorf("one function: %d workers", w)
	}
}

// TestCompileCancelledMidway: a compile on borrowed workers whose context
// ends while wazero compiles gives every slot back (wazero finishes with
// the context's cancellation removed: its parallel compile would
// otherwise leave what it mapped behind), and the Runtime compiles and
// runs the module afterwards.
func TestCompileCancelledMidway(t *testing.T) {
	if goruntime.GOMAXPROCS(0) < 2 {
		t.Skip("one CPU: no worker to borrow")
	}
	wasm := probe(t)
	r := newRuntime(t, Config{DisableCache: true, MaxCompiles: 4})
	ctx, cancel := context.WithCancel(context.Background())
	// Cancelled once the compile has borrowed its workers, i.e. while
	// wazero compiles (agrun's own steps before it hold one slot).
	go func() {
		for r.Stats().CompileWorkers == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	_, err := r.Compile(ctx, wasm)
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrCompile) {
		t.Fatalf("cancelled compile: %v", err)
	}
	if ctx.Err() == nil {
		t.Fatal("the compile ended before it was cancelled: the test proves nothing")
	}
	if n := len(r.compileSem); n != 0 {
		t.Fatalf("%d compile slots still held after a cancelled compile", n)
	}
	m := compile(t, r, wasm)
	out, err := r.Run(context.Background(), m, Input{Args: []string{"probe", "echo"}, Stdin: []byte("after")})
	if err != nil || string(out.Stdout) != "after" {
		t.Fatalf("after a cancelled compile: %q, %v", out.Stdout, err)
	}
}

package runtime

import (
	"context"
	goruntime "runtime"
	"testing"
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
}

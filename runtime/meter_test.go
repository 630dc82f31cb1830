package runtime

import (
	"context"
	"errors"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/wasmbin"
)

// TestStackBound: a runaway recursion ends when its estimated stack passes
// MaxStackBytes, whatever makes its frames large, and the host memory
// wazero allocated for the stack stays within a small multiple of the
// limit (wazero doubles the stack as it grows, and copies it). Without
// the bound each of these grew the stack to wazero's own ceiling, about
// 100 MiB allocated per call.
func TestStackBound(t *testing.T) {
	const limit = 1 << 20
	r := newRuntime(t, Config{MaxStackBytes: limit})
	m := compile(t, r, wat(t, "stackshapes"))
	for _, shape := range []struct{ name, in string }{
		{"plain", "a"}, {"live i64 locals", "l"}, {"operand stack", "s"}, {"live v128 locals", "v"}, {"40 parameters", "p"},
	} {
		t.Run(shape.name, func(t *testing.T) {
			var before, after goruntime.MemStats
			goruntime.GC()
			goruntime.ReadMemStats(&before)
			_, err := r.Run(context.Background(), m, Input{Stdin: []byte(shape.in)})
			goruntime.ReadMemStats(&after)
			if !errors.Is(err, ErrTrap) || !strings.Contains(err.Error(), "call stack exhausted") {
				t.Fatalf("err = %v, want ErrTrap (call stack exhausted)", err)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("allocated %d KiB during the call (limit %d KiB)", alloc>>10, limit>>10)
			if alloc > 8*limit {
				t.Errorf("the call allocated %d KiB, over 8× the %d KiB stack limit: the frame estimate is too low for this shape", alloc>>10, limit>>10)
			}
		})
	}
}

// TestStackDeepButBounded: recursion within the limit works; the same
// recursion ends under a smaller limit.
func TestStackDeepButBounded(t *testing.T) {
	small := newRuntime(t, Config{MaxStackBytes: 64 << 10})
	m := compile(t, small, wat(t, "recurse"))
	if _, err := small.Run(context.Background(), m, Input{}); !errors.Is(err, ErrTrap) {
		t.Fatalf("err = %v, want ErrTrap", err)
	}
	// The probe's Go code (runtime start-up, encoding/json) runs fine
	// under the default.
	r := newRuntime(t, Config{})
	p := compile(t, r, probe(t))
	out, err := r.Run(context.Background(), p, Input{Args: []string{"probe", "echo"}, Stdin: []byte(`{"a":[[[[[[1]]]]]]}`)})
	if err != nil || out.ExitCode != 0 {
		t.Fatalf("probe: exit %v, err %v, stderr %s", out.ExitCode, err, out.Stderr)
	}
}

// TestFuel: fuel is deterministic (the same call of a guest that reads
// no clock or random bytes spends the same fuel each time), a limit below
// what a call needs ends it with ErrFuelExhausted (which is also
// ErrTimeout), a limit at what it needs lets it finish, and fuel alone
// stops code that never ends.
func TestFuel(t *testing.T) {
	r := newRuntime(t, Config{})
	ctx := context.Background()
	t.Run("deterministic", func(t *testing.T) {
		m := compile(t, r, wat(t, "count"))
		first, err := r.Run(ctx, m, Input{})
		if err != nil || first.ExitCode != 0 {
			t.Fatalf("exit %d, err %v", first.ExitCode, err)
		}
		// 100,000 iterations of about ten instructions, and 1 MiB filled
		// at one unit per 16 bytes.
		if first.Fuel < 100_000*10+1<<16 || first.Fuel > 100_000*40+1<<16 {
			t.Errorf("spent %d fuel", first.Fuel)
		}
		for i := 0; i < 3; i++ {
			again, err := r.Run(ctx, m, Input{})
			if err != nil || again.Fuel != first.Fuel {
				t.Fatalf("run %d spent %d fuel (err %v), the first %d", i+2, again.Fuel, err, first.Fuel)
			}
		}
		if _, err := r.Run(ctx, m, Input{Limits: Limits{Fuel: first.Fuel}}); err != nil {
			t.Fatalf("with exactly the fuel it needs: %v", err)
		}
		if _, err := r.Run(ctx, m, Input{Limits: Limits{Fuel: first.Fuel - 1}}); !errors.Is(err, ErrFuelExhausted) || !errors.Is(err, ErrTimeout) {
			t.Fatalf("with one unit less: err = %v, want ErrFuelExhausted", err)
		}
	})
	t.Run("Go", func(t *testing.T) {
		m := compile(t, r, probe(t))
		in := Input{Args: []string{"probe", "echo"}, Stdin: []byte(`{"text":"the quick brown fox"}`)}
		first, err := r.Run(ctx, m, in)
		if err != nil || first.ExitCode != 0 || first.Fuel <= 0 {
			t.Fatalf("exit %d, err %v, fuel %d", first.ExitCode, err, first.Fuel)
		}
		in.Limits.Fuel = 2 * first.Fuel
		if out, err := r.Run(ctx, m, in); err != nil || string(out.Stdout) != string(first.Stdout) {
			t.Fatalf("with twice the fuel it needed: err %v, stdout %q", err, out.Stdout)
		}
		in.Limits.Fuel = first.Fuel / 2
		if _, err := r.Run(ctx, m, in); !errors.Is(err, ErrFuelExhausted) {
			t.Fatalf("with half the fuel: err = %v, want ErrFuelExhausted", err)
		}
	})
	t.Run("a tree of calls that never ends", func(t *testing.T) {
		m := compile(t, r, wat(t, "calltree"))
		out, err := r.Run(ctx, m, Input{Limits: Limits{Fuel: 5_000_000}})
		if !errors.Is(err, ErrFuelExhausted) {
			t.Fatalf("err = %v, want ErrFuelExhausted", err)
		}
		if out.Fuel < 5_000_000 || out.Fuel > 5_000_000+1000 {
			t.Errorf("spent %d fuel with a limit of 5,000,000", out.Fuel)
		}
	})
}

// TestTrapTextIgnoresNameSection: a module whose name section gives its
// functions 64 KiB names each (2 MiB) and that traps 40 frames deep gets a
// short error: the custom sections are not compiled, so wazero's stack
// trace names frames by index. Before, the error quoted up to 30 of the
// guest's names (about 2 MiB of attacker text per call).
func TestTrapTextIgnoresNameSection(t *testing.T) {
	wasm := wat(t, "deeptrap")
	var names []byte
	long := strings.Repeat("\x1b]0;pwned\x07", 64<<10/10)
	names = wasmbin.AppendU32(names, 2)
	for i := uint32(0); i < 2; i++ {
		names = wasmbin.AppendU32(names, i)
		names = wasmbin.AppendU32(names, uint32(len(long)))
		names = append(names, long...)
	}
	sub := append([]byte{1}, wasmbin.AppendU32(nil, uint32(len(names)))...)
	wasm = wasmbin.AppendCustomSection(wasm, "name", append(sub, names...))
	r := newRuntime(t, Config{})
	m := compile(t, r, wasm)
	_, err := r.Run(context.Background(), m, Input{})
	if !errors.Is(err, ErrTrap) {
		t.Fatalf("err = %v, want ErrTrap", err)
	}
	if n := len(err.Error()); n > 4096 || strings.Contains(err.Error(), "pwned") {
		t.Fatalf("error of %d bytes quotes the name section: %.300q", n, err.Error())
	}
}

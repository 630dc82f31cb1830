package runtime

import (
	"bytes"
	"context"
	"errors"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/wasmbin"
)

// The attacks of an independent review of the metering, each a module the
// sandbox must refuse or stop.

// module assembles a module from a type section body, function type
// indices, the code bodies (locals and instructions, without their size)
// and whether the last function is _start; it has one page of memory.
func module(types [][]byte, funcs []uint32, bodies [][]byte, imports []byte) []byte {
	b := []byte(wasmbin.Header)
	sec := func(id byte, payload []byte) {
		b = append(b, id)
		b = wasmbin.AppendU32(b, uint32(len(payload)))
		b = append(b, payload...)
	}
	var p []byte
	p = wasmbin.AppendU32(p, uint32(len(types)))
	for _, t := range types {
		p = append(p, t...)
	}
	sec(wasmbin.SecType, p)
	nImports := uint32(0)
	if imports != nil {
		sec(wasmbin.SecImport, imports)
		nImports = 1
	}
	p = wasmbin.AppendU32(nil, uint32(len(funcs)))
	for _, f := range funcs {
		p = wasmbin.AppendU32(p, f)
	}
	sec(wasmbin.SecFunction, p)
	sec(wasmbin.SecMemory, []byte{1, 0, 1})
	p = []byte{2, 6}
	p = append(p, "memory"...)
	p = append(p, wasmbin.KindMemory, 0, 6)
	p = append(p, "_start"...)
	p = append(p, wasmbin.KindFunc)
	p = wasmbin.AppendU32(p, nImports+uint32(len(funcs))-1)
	sec(wasmbin.SecExport, p)
	p = wasmbin.AppendU32(nil, uint32(len(bodies)))
	for _, body := range bodies {
		p = wasmbin.AppendU32(p, uint32(len(body)))
		p = append(p, body...)
	}
	sec(wasmbin.SecCode, p)
	return b
}

var (
	typeVoid   = []byte{0x60, 0, 0}
	typeI64I64 = []byte{0x60, 1, wasmbin.ValI64, 1, wasmbin.ValI64}
	typeRetI64 = []byte{0x60, 0, 1, wasmbin.ValI64}
)

// TestMeterCannotBeReached: a module that names the global or local just
// past its own (invalid as written, but valid once the meter's are
// appended) is refused at Compile: it would set its own fuel, or its own
// stack depth.
func TestMeterCannotBeReached(t *testing.T) {
	r := newRuntime(t, Config{Limits: Limits{Timeout: 200 * time.Millisecond}})
	maxI64 := []byte{0x42, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00}
	for _, c := range []struct {
		name string
		body []byte
	}{
		// global.set 0 (i64.const max); loop br 0 end: the fuel global.
		{"sets the fuel", append(append([]byte{0}, maxI64...), 0x24, 0, 0x03, 0x40, 0x0c, 0, 0x0b, 0x0b)},
		// i32.const 0; global.set 1: the depth global.
		{"sets the depth", []byte{0, 0x41, 0, 0x24, 1, 0x0b}},
		// i32.const 0; local.set 0 in a function without locals: sp.
		{"sets the frame's depth", []byte{0, 0x41, 0, 0x21, 0, 0x0b}},
		// global.get 0 with no globals.
		{"reads the fuel", []byte{0, 0x23, 0, 0x1a, 0x0b}},
	} {
		t.Run(c.name, func(t *testing.T) {
			wasm := module([][]byte{typeVoid}, []uint32{0}, [][]byte{c.body}, nil)
			if _, err := r.Compile(context.Background(), wasm); !errors.Is(err, ErrCompile) || !strings.Contains(err.Error(), "out of range") {
				t.Fatalf("Compile: %v, want ErrCompile (out of range)", err)
			}
		})
	}
}

// TestHostCallsEndAtTheDeadline: a loop of costly host calls (random_get
// of 32 MiB each) ends at its deadline: each host call checks the call's
// context before it works.
func TestHostCallsEndAtTheDeadline(t *testing.T) {
	r := newRuntime(t, Config{Limits: Limits{Timeout: 200 * time.Millisecond, MemoryBytes: 64 << 20}})
	m := compile(t, r, wat(t, "randomloop"))
	start := time.Now()
	_, err := r.Run(context.Background(), m, Input{})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("ended after %v with a limit of 200ms", d)
	}
}

// TestMeteredCompileBudget: a body without blocks of its own but with many
// memory.grow and many locals costs nothing to compile as written and
// minutes once every grow is followed by a charge (two blocks): the budget
// is checked on the metered module too. (Calls were such a shape until
// they stopped ending the meter's stretches.)
func TestMeteredCompileBudget(t *testing.T) {
	r := newRuntime(t, Config{})
	var body []byte
	body = append(body, 1)
	body = wasmbin.AppendU32(body, 10_000)
	body = append(body, wasmbin.ValI64)
	for i := 0; i < 1000; i++ {
		body = append(body, 0x41, 0, 0x40, 0, 0x1a) // (drop (memory.grow (i32.const 0)))
	}
	body = append(body, 0x0b)
	wasm := module([][]byte{typeVoid}, []uint32{0, 0, 0}, [][]byte{{0, 0x0b}, body, {0, 0x10, 1, 0x0b}}, nil)
	start := time.Now()
	_, err := r.Compile(context.Background(), wasm)
	if !errors.Is(err, ErrCompile) || !strings.Contains(err.Error(), "too costly") {
		t.Fatalf("Compile: %v, want ErrCompile (too costly)", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("refused after %v", d)
	}
}

// TestStackBoundManyValues: a frame that keeps many values across its
// calls (each (local.set 0 (i64.add (local.get 0) (call $g))) defines new
// ones) is estimated by the values it defines, not by its operand stack,
// so its runaway recursion stays within the bound.
func TestStackBoundManyValues(t *testing.T) {
	const limit = 1 << 20
	r := newRuntime(t, Config{MaxStackBytes: limit})
	var rec []byte
	rec = append(rec, 0)
	for i := 0; i < 3000; i++ {
		rec = append(rec, 0x20, 0, 0x10, 0, 0x7c, 0x21, 0) // local.get 0, call $g, i64.add, local.set 0
	}
	rec = append(rec, 0x20, 0, 0x20, 0, 0x10, 1, 0x7c, 0x0b) // local.get 0, (call $r (local.get 0)), i64.add
	wasm := module([][]byte{typeVoid, typeI64I64, typeRetI64}, []uint32{2, 1, 0},
		[][]byte{{0, 0x42, 1, 0x0b}, rec, {0, 0x42, 1, 0x10, 1, 0x1a, 0x0b}}, nil)
	m := compile(t, r, wasm)
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	_, err := r.Run(context.Background(), m, Input{})
	goruntime.ReadMemStats(&after)
	if !errors.Is(err, ErrTrap) || !strings.Contains(err.Error(), "call stack exhausted") {
		t.Fatalf("err = %v, want ErrTrap (call stack exhausted)", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8*limit {
		t.Errorf("the call allocated %d KiB, over 8× the %d KiB stack limit", alloc>>10, limit>>10)
	}
}

// TestFailedGrowIsFree: memory.grow and table.grow are charged by what
// they grew, after they succeeded: a probe that fails costs nothing more,
// so it passes under a small fuel limit as it does without one.
func TestFailedGrowIsFree(t *testing.T) {
	r := newRuntime(t, Config{})
	m := compile(t, r, wat(t, "growprobe"))
	out, err := r.Run(context.Background(), m, Input{Limits: Limits{Fuel: 1_000_000}})
	if err != nil || out.ExitCode != 0 {
		t.Fatalf("exit %d, err %v", out.ExitCode, err)
	}
	if out.Fuel > 1000 {
		t.Errorf("a failed grow cost %d fuel", out.Fuel)
	}
	if !bytes.Equal(out.Stdout, nil) {
		t.Errorf("stdout %q", out.Stdout)
	}
}

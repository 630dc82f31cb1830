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

// repeated returns a body (no locals) of n copies of unit, then end.
func repeated(unit []byte, n int) []byte {
	b := append([]byte{0}, bytes.Repeat(unit, n)...)
	return append(b, 0x0b)
}

// TestCompileRefusesBeforeMetering: modules whose metered code would
// pass a limit of Compile (metered blocks times locals included, which
// used to be checked on the metered module once built) are refused naming
// the function, the measure and the limit, having allocated about the
// module's size (Parse) and not what metering or wazero would have built.
// The amplifying shape is a run of memory.grow (each followed by a charge
// in an if); a run of calls was, until calls stopped ending the meter's
// stretches, and now grows by 4 bytes a call.
func TestCompileRefusesBeforeMetering(t *testing.T) {
	call0 := []byte{0x10, 0x00}
	grow := []byte{0x41, 0, 0x40, 0, 0x1a}
	ifs := []byte{0x41, 0, 0x04, 0x40, 0x0b}
	plain := []byte{0x41, 0, 0x1a}
	for _, c := range []struct {
		name   string
		cfg    Config
		bodies [][]byte
		want   string
	}{
		{"the amplification module (issue 27), of grows", Config{}, [][]byte{repeated(grow, 1_399_999), repeated(grow, 1_399_999)}, "over the limit of 10000 per function"},
		{"a metered body over 1 MiB", Config{}, [][]byte{repeated(plain, 400_000)}, "over the limit of 1048576 bytes per metered function body"},
		{"12,000 ifs", Config{}, [][]byte{repeated(ifs, 12_000)}, "over the limit of 10000 per function"},
		{"many functions of 9,000 blocks", Config{}, bytes.Split(bytes.Repeat(append(repeated(ifs, 9_000), '|'), 40), []byte{'|'})[:40], "compile cost up to it"},
		{"grows times locals", Config{}, [][]byte{append(append([]byte{1, 0x90, 0x4e, wasmbin.ValI64}, bytes.Repeat(grow, 2500)...), 0x0b)}, "compile cost up to it (nesting of blocks and loops, locals times blocks)"},
		{"metered code over Config.MaxMeteredCodeBytes", Config{MaxMeteredCodeBytes: 512 << 10}, bytes.Split(bytes.Repeat(append(repeated(grow, 1000), '|'), 20), []byte{'|'})[:20], "over the limit of 524288 bytes of metered code per module"},
	} {
		t.Run(c.name, func(t *testing.T) {
			funcs := make([]uint32, len(c.bodies))
			wasm := module([][]byte{typeVoid}, funcs, c.bodies, nil)
			c.cfg.DisableCache = true
			r := newRuntime(t, c.cfg)
			var before, after goruntime.MemStats
			goruntime.ReadMemStats(&before)
			_, err := r.Compile(context.Background(), wasm)
			goruntime.ReadMemStats(&after)
			var ve *ValidationError
			if !errors.Is(err, ErrCompile) || !errors.As(err, &ve) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "function ") {
				t.Fatalf("Compile: %v; want ErrCompile saying %q", err, c.want)
			}
			t.Log(err)
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(2*len(wasm))+16<<20 {
				t.Errorf("refusing a module of %d bytes allocated %d bytes", len(wasm), alloc)
			}
		})
	}
	// What is within the limits compiles: Go modules, and a body at
	// the block limit's edge.
	r := newRuntime(t, Config{DisableCache: true})
	for _, wasm := range [][]byte{wordcount(t), module([][]byte{typeVoid}, []uint32{0}, [][]byte{repeated(call0, 4000)}, nil)} {
		if _, err := r.Compile(context.Background(), wasm); err != nil {
			t.Errorf("Compile: %v", err)
		}
	}
}

// TestMaxCompiles: with one compile slot, a Compile waits while another
// module compiles, and returns its context's error when that ends first;
// a Compile of the same module waiting on that one then compiles it
// itself.
func TestMaxCompiles(t *testing.T) {
	r := newRuntime(t, Config{DisableCache: true, MaxCompiles: 1})
	slow := module([][]byte{typeVoid}, []uint32{0}, [][]byte{repeated([]byte{0x41, 0, 0x04, 0x40, 0x0b}, 9_000)}, nil) // seconds to compile
	done := make(chan error, 1)
	go func() {
		_, err := r.Compile(context.Background(), slow)
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // the first compile holds the slot
	small := module([][]byte{typeVoid}, []uint32{0}, [][]byte{{0, 0x0b}}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	second := make(chan error, 1)
	go func() {
		_, err := r.Compile(ctx, small)
		second <- err
	}()
	time.Sleep(100 * time.Millisecond) // the second waits for the slot
	third := make(chan error, 1)
	go func() {
		_, err := r.Compile(context.Background(), small) // waits on the second
		third <- err
	}()
	err := <-second
	select {
	case first := <-done:
		t.Skipf("the first compile ended (%v) before the second could wait: too fast a machine for this test", first)
	default:
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a Compile waiting for the slot: %v, want context.DeadlineExceeded", err)
	}
	if err := <-done; err != nil {
		t.Errorf("the slow compile: %v", err)
	}
	if err := <-third; err != nil {
		t.Errorf("a Compile of the same module, waiting on the one whose context ended: %v", err)
	}
}

// BenchmarkMeasureMeter: the walk Compile adds before metering, per
// byte of a Go module's code.
func BenchmarkMeasureMeter(b *testing.B) {
	wasm := wordcount(b)
	m, err := wasmbin.Parse(wasm)
	if err != nil {
		b.Fatal(err)
	}
	r := &Runtime{cfg: Config{MaxStackBytes: DefaultMaxStackBytes}}
	b.SetBytes(int64(len(wasm)))
	for b.Loop() {
		if _, err := wasmbin.MeasureMeter(m, r.meterOptions(), wasmbin.MeterLimits{}); err != nil {
			b.Fatal(err)
		}
	}
}

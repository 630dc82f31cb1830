package runtime

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/agcore/agrun/internal/wasmbin"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// fuelKey carries, in a call's context, a *fuelAccount that the metered
// runtime of diffRuntimes keeps: what the guest was charged.
type fuelKey struct{}

// fuelAccount adds up a metered call's charges as the runtime's refuel
// does: every grant less what the counter held when the next was asked
// for or the call ended.
type fuelAccount struct {
	granted, used int64
	refills       int
}

func (a *fuelAccount) refill(counter int64) {
	a.used += a.granted - counter
	a.granted = fuelQuantum
	a.refills++
}

func (a *fuelAccount) end(mod api.Module) {
	if g := mod.ExportedGlobal(wasmbin.MeterFuelExport); g != nil {
		a.used += a.granted - int64(g.Get())
		a.granted = int64(g.Get())
	}
}

// checkCovers runs wasm twice in the metered runtime: as Instrument meters
// it, and metered Exact (a charge before every instruction, no refill),
// and fails t if the meter charged less than the exact count of what ran
// — the property the CPU bound rests on: a guest is stopped once its
// charges pass its fuel, so it never runs more than its fuel. Runs that
// end on the time limit or pass 10 refills are not compared (the two
// would be cut at different points). It returns both counts, 0 and 0 if
// not compared.
func checkCovers(t testing.TB, ctx context.Context, rt wazero.Runtime, wasm []byte, stdin string, timeout time.Duration) (charged, ran int64) {
	t.Helper()
	var counts [2]int64
	var outs [2]string
	for i, exact := range []bool{false, true} {
		inst, err := wasmbin.Instrument(wasm, wasmbin.MeterOptions{ImportModule: meterModule, Exact: exact})
		if err != nil {
			t.Fatalf("Instrument (exact %v): %v", exact, err)
		}
		cm, err := rt.CompileModule(ctx, inst)
		if err != nil {
			t.Fatalf("the instrumented module (exact %v) does not compile: %v", exact, err)
		}
		a := &fuelAccount{}
		left := 10
		outs[i] = runPlain(context.WithValue(context.WithValue(ctx, fuelKey{}, a), refillsKey{}, &left), rt, cm, stdin, timeout)
		cm.Close(ctx)
		if left < 0 || strings.Contains(outs[i], "time limit") {
			t.Logf("not compared (exact %v): %d refills, %s", exact, 10-left, outs[i])
			return 0, 0
		}
		if exact && a.refills > 0 {
			t.Fatalf("the exact meter called refill")
		}
		counts[i] = a.used
	}
	if outs[0] != outs[1] {
		t.Fatalf("metered: %s\nexact: %s", outs[0], outs[1])
	}
	if counts[0] < counts[1] {
		t.Fatalf("the meter charged %d units for %d run", counts[0], counts[1])
	}
	return counts[0], counts[1]
}

// TestMeterCoversEveryInstruction: for every module of the test suites
// (the hand-written ones: Go modules metered Exact take minutes to
// compile) and the shapes of metershapes.wat — a long straight-line body
// of calls, deep recursion with work after each call, a br_table loop,
// calls through a table, small ifs around calls — the meter's charges
// cover every instruction that ran (checkCovers). How much more it
// charged is logged: that is what merging stretches costs in precision.
func TestMeterCoversEveryInstruction(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs some 70 modules twice, metered and Exact (10-20 s; more under -race), like TestInstrumentedBehavesAsOriginal")
	}
	ctx := context.Background()
	_, metered := diffRuntimes(t)
	compared := 0
	var charged, ran int64
	for _, dir := range []string{"testdata/wat", "../internal/testing/hostile/testdata/wat"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.wat"))
		for _, f := range files {
			wasm := testguest.WAT(t, f)
			if _, err := wasmbin.Parse(wasm); err != nil || filepath.Base(f) == "reactorimport.wat" {
				continue // malformed on purpose; or its _initialize is WASI's proc_exit, which closes the WASI module
			}
			if cm, err := metered.CompileModule(ctx, wasm); err != nil {
				continue // refused by wazero on purpose
			} else {
				cm.Close(ctx)
			}
			if _, err := wasmbin.Instrument(wasm, wasmbin.MeterOptions{ImportModule: meterModule}); err != nil {
				continue
			}
			t.Run(filepath.Base(f), func(t *testing.T) {
				c, r := checkCovers(t, ctx, metered, wasm, "a", 2*time.Second)
				if r > 0 {
					compared++
					charged += c
					ran += r
					t.Logf("charged %d for %d run (%.3fx)", c, r, float64(c)/float64(r))
				}
				if filepath.Base(f) == "metershapes.wat" && r < 10_000 {
					t.Errorf("metershapes: %d units run, want the whole module", r)
				}
			})
		}
	}
	if compared < 20 {
		t.Fatalf("only %d modules compared", compared)
	}
	t.Logf("%d modules: charged %d for %d run (%.3fx)", compared, charged, ran, float64(charged)/float64(ran))
}

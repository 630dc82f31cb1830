package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/agcore/agrun/internal/wasmbin"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

// TestInstrumentedBehavesAsOriginal is the differential test of metering:
// every module of the test suites and the example tools runs once as it
// is, in a plain wazero runtime (with wazero's own interruption), and once
// instrumented, with a meter that only refills; stdout, stderr, the exit
// code and how the call ended (a trap's message, without the stack trace,
// or the time limit) must be the same. It is long and single-threaded, so
// it skips under -short (the race step of .ci/run).
func TestInstrumentedBehavesAsOriginal(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs some 120 modules twice, Go ones with four inputs (about 10 s; more under -race); single-threaded, so .ci/run's race step skips it")
	}
	ctx := context.Background()
	plain, metered := diffRuntimes(t)
	var mods []struct {
		name string
		wasm []byte
	}
	seen := map[string]bool{} // a fixture both folders hold is one module
	add := func(name string, b []byte) {
		if seen[string(b)] {
			return
		}
		seen[string(b)] = true
		mods = append(mods, struct {
			name string
			wasm []byte
		}{name, b})
	}
	for _, dir := range []string{"testdata/wat", "../internal/testing/hostile/testdata/wat"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.wat"))
		for _, f := range files {
			if b := filepath.Base(f); b == "calltree.wat" || b == "straightline.wat" {
				continue // the original never ends: wazero cannot stop it
			}
			add(f, testguest.WAT(t, f))
		}
	}
	// One Go and one C example tool (compiling every Go tool twice would
	// take a minute); the probe is a Go command.
	for _, f := range []string{"../testdata/word_count.wasm", "../testdata/sum_c.wasm"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		add(f, b)
	}
	add("probe (Go command)", probe(t))
	if len(mods) < 40 {
		t.Fatalf("only %d modules found", len(mods))
	}
	inputs := []string{`{"text":"the quick brown fox","numbers":[1,2,3],"city":"Paris","path":"/x"}`, `a`, `l`, ``}
	compared := 0
	for _, mod := range mods {
		parsed, err := wasmbin.Parse(mod.wasm)
		if err != nil {
			continue // malformed on purpose
		}
		orig, err := plain.CompileModule(ctx, mod.wasm)
		if err != nil {
			continue // refused by wazero on purpose (threads, memory64, ...)
		}
		inst, err := wasmbin.Instrument(mod.wasm, wasmbin.MeterOptions{ImportModule: meterModule})
		if err != nil {
			t.Errorf("%s: Instrument: %v", mod.name, err)
			continue
		}
		cm, err := metered.CompileModule(ctx, inst)
		if err != nil {
			t.Errorf("%s: the instrumented module does not compile: %v", mod.name, err)
			continue
		}
		for _, in := range stdinInputs(parsed, inputs) {
			want := runPlain(ctx, plain, orig, in, 300*time.Millisecond)
			got := runPlain(ctx, metered, cm, in, 300*time.Millisecond)
			if want != got && strings.Contains(want+got, "time limit") {
				// Near the limit on a loaded machine: again, with time.
				want = runPlain(ctx, plain, orig, in, 20*time.Second)
				got = runPlain(ctx, metered, cm, in, 20*time.Second)
			}
			if want != got {
				t.Errorf("%s, stdin %q:\n original:     %s\n instrumented: %s", mod.name, in, want, got)
			}
			compared++
		}
	}
	t.Logf("%d module runs compared", compared)
}

// stdinInputs are the inputs worth running m with: all of them if it can
// read stdin (imports fd_read, or poll_oneoff, which sees stdin ready),
// else the first: a module that cannot read stdin does the same whatever
// it holds, so more runs would compare the same thing again (the most
// costly of them: the modules that spin until the time limit).
func stdinInputs(m *wasmbin.Module, inputs []string) []string {
	for _, im := range m.Imports {
		if im.Kind == wasmbin.KindFunc && im.Module == "wasi_snapshot_preview1" && (im.Name == "fd_read" || im.Name == "poll_oneoff") {
			return inputs
		}
	}
	return inputs[:1]
}

// runPlain runs cm once (a command's _start, or a reactor's _initialize
// then agrun_call) and describes the outcome.
func runPlain(ctx context.Context, rt wazero.Runtime, cm wazero.CompiledModule, stdin string, timeout time.Duration) string {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cfg := wazero.NewModuleConfig().WithName("").WithStdin(strings.NewReader(stdin)).
		WithStdout(&stdout).WithStderr(&stderr).WithArgs("probe", "echo")
	exps := cm.ExportedFunctions()
	_, reactor := exps["_initialize"]
	_, counted := ctx.Value(fuelKey{}).(*fuelAccount)
	if reactor || counted {
		cfg = cfg.WithStartFunctions()
	}
	mod, err := rt.InstantiateModule(ctx, cm, cfg)
	if err == nil && counted && !reactor {
		// _start called here, not by InstantiateModule: mod is kept, so
		// that fuelAccount.end reads its counter even after a trap.
		if f := mod.ExportedFunction("_start"); f != nil {
			_, err = f.Call(ctx)
		}
	}
	if err == nil && reactor {
		if _, err = mod.ExportedFunction("_initialize").Call(ctx); err == nil {
			if f := mod.ExportedFunction("agrun_call"); f != nil {
				_, err = f.Call(ctx)
			}
		}
	}
	if mod != nil {
		if a, ok := ctx.Value(fuelKey{}).(*fuelAccount); ok {
			a.end(mod)
		}
		mod.Close(ctx)
	}
	end := "ok"
	var exit *sys.ExitError
	switch {
	case err != nil && ctx.Err() != nil:
		// Interrupted. (A run that ended just after the deadline, e.g.
		// inside one long table.grow, is judged by its own result.)
		end = "time limit"
	case errors.As(err, &exit):
		end = fmt.Sprintf("exit %d", exit.ExitCode())
	case err != nil:
		end, _, _ = strings.Cut(err.Error(), "\nwasm stack trace")
		// The function that failed is named by index, which shifts.
		if _, after, ok := strings.Cut(end, "failed: "); ok {
			end = after
		}
		// Which missing import module wazero names is not stable.
		if strings.Contains(end, "not instantiated") {
			end = "an import module is missing"
		}
	}
	return fmt.Sprintf("%s, stdout %q, stderr %q", end, stdout.String(), stderr.String())
}

// refillsKey carries, in a call's context, how many more refills the
// metered runtime of diffRuntimes grants (*int); without it, any number.
type refillsKey struct{}

// diffRuntimes returns two wazero runtimes with WASI, a stand-in agrun
// module and a 16 MiB memory limit: plain, with wazero's own interruption,
// for original modules; metered, with a meter that only refills, for
// instrumented ones.
func diffRuntimes(t testing.TB) (plain, metered wazero.Runtime) {
	ctx := context.Background()
	cache, err := wazero.NewCompilationCacheWithDir(testguest.CompilationCacheDir(t))
	if err != nil {
		t.Fatal(err)
	}
	rc := wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2).WithMemoryLimitPages(256).WithCompilationCache(cache)
	plain = wazero.NewRuntimeWithConfig(ctx, rc.WithCloseOnContextDone(true))
	metered = wazero.NewRuntimeWithConfig(ctx, rc)
	t.Cleanup(func() { plain.Close(ctx); metered.Close(ctx) })
	for _, rt := range []wazero.Runtime{plain, metered} {
		wasi_snapshot_preview1.MustInstantiate(ctx, rt)
		h := rt.NewHostModuleBuilder("agrun")
		i32 := api.ValueTypeI32
		h.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(context.Context, api.Module, []uint64) {}), []api.ValueType{i32, i32, i32}, nil).Export("log")
		refuse := api.GoModuleFunc(func(_ context.Context, _ api.Module, s []uint64) { s[0] = api.EncodeI32(-1) })
		h.NewFunctionBuilder().WithGoModuleFunction(refuse, []api.ValueType{i32, i32}, []api.ValueType{i32}).Export("http_request")
		h.NewFunctionBuilder().WithGoModuleFunction(refuse, []api.ValueType{i32, i32}, []api.ValueType{i32}).Export("http_response")
		if _, err := h.Instantiate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	m := metered.NewHostModuleBuilder(meterModule)
	m.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, _ api.Module, s []uint64) {
		if ctx.Err() != nil {
			stopGuest(ctx)
		}
		if a, ok := ctx.Value(fuelKey{}).(*fuelAccount); ok {
			a.refill(int64(s[0]))
		}
		if left, ok := ctx.Value(refillsKey{}).(*int); ok {
			if *left--; *left < 0 {
				stopGuest(ctx)
			}
		}
		s[0] = fuelQuantum
	}), []api.ValueType{api.ValueTypeI64}, []api.ValueType{api.ValueTypeI64}).Export(wasmbin.MeterRefill)
	m.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, _ api.Module, _ []uint64) {
		panic(errors.New("stack"))
	}), nil, nil).Export(wasmbin.MeterStack)
	if _, err := m.Instantiate(ctx); err != nil {
		t.Fatal(err)
	}

	return plain, metered
}

// FuzzInstrumentedBehavesAsOriginal: modules the fuzzer derives from the
// test fixtures that wazero accepts run the same, instrumented or not
// (outcomes that depend on the time limit are not compared), and the
// meter charges at least what they run (checkCovers).
func FuzzInstrumentedBehavesAsOriginal(f *testing.F) {
	files, _ := filepath.Glob("testdata/wat/*.wat")
	for _, file := range files {
		if b := filepath.Base(file); b == "calltree.wat" || b == "straightline.wat" {
			continue
		}
		f.Add(testguest.WAT(f, file), "a")
	}
	plain, metered := diffRuntimes(f)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, wasm []byte, stdin string) {
		if m, err := wasmbin.Parse(wasm); err != nil || m.CompileCost > compileBudget(len(wasm)) {
			return // Compile refuses what would take wazero long to compile
		}
		orig, err := plain.CompileModule(ctx, wasm)
		if err != nil {
			return
		}
		defer orig.Close(ctx)
		inst, err := wasmbin.Instrument(wasm, wasmbin.MeterOptions{ImportModule: meterModule})
		if err != nil {
			t.Fatalf("Instrument refused a module wazero compiles: %v", err)
		}
		cm, err := metered.CompileModule(ctx, inst)
		if err != nil {
			t.Fatalf("the instrumented module does not compile: %v", err)
		}
		defer cm.Close(ctx)
		// The instrumented module first, with a budget of about 10M
		// instructions: a module that needs more may be one the original
		// runtime could never stop (no loop), so it is not compared.
		left := 10
		got := runPlain(context.WithValue(ctx, refillsKey{}, &left), metered, cm, stdin, 100*time.Millisecond)
		if left < 0 || strings.Contains(got, "time limit") {
			return
		}
		want := runPlain(ctx, plain, orig, stdin, 100*time.Millisecond)
		if want != got && !strings.Contains(want, "time limit") {
			t.Fatalf("original: %s\ninstrumented: %s", want, got)
		}
		checkCovers(t, ctx, metered, wasm, stdin, 100*time.Millisecond)
	})
}

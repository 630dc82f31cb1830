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
		t.Skip("-short: runs some 250 modules twice (about a minute; several under -race); single-threaded, so .ci/run's race step skips it")
	}
	ctx := context.Background()
	cache, err := wazero.NewCompilationCacheWithDir(testguest.CompilationCacheDir(t))
	if err != nil {
		t.Fatal(err)
	}
	rc := wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2).WithMemoryLimitPages(256).WithCompilationCache(cache)
	plain := wazero.NewRuntimeWithConfig(ctx, rc.WithCloseOnContextDone(true))
	metered := wazero.NewRuntimeWithConfig(ctx, rc)
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
		s[0] = fuelQuantum
	}), []api.ValueType{api.ValueTypeI64}, []api.ValueType{api.ValueTypeI64}).Export(wasmbin.MeterRefill)
	m.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, _ api.Module, _ []uint64) {
		panic(errors.New("stack"))
	}), nil, nil).Export(wasmbin.MeterStack)
	if _, err := m.Instantiate(ctx); err != nil {
		t.Fatal(err)
	}

	var mods []struct {
		name string
		wasm []byte
	}
	add := func(name string, b []byte) {
		mods = append(mods, struct {
			name string
			wasm []byte
		}{name, b})
	}
	for _, dir := range []string{"testdata/wat", "../internal/hostile/testdata/wat"} {
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
		if _, err := wasmbin.Parse(mod.wasm); err != nil {
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
		for _, in := range inputs {
			want := runPlain(ctx, plain, orig, in, 300*time.Millisecond)
			got := runPlain(ctx, metered, cm, in, 300*time.Millisecond)
			if want != got && strings.Contains(want+got, "time limit") {
				// Near the limit on a loaded machine: again, with time.
				want = runPlain(ctx, plain, orig, in, 5*time.Second)
				got = runPlain(ctx, metered, cm, in, 5*time.Second)
			}
			if want != got {
				t.Errorf("%s, stdin %q:\n original:     %s\n instrumented: %s", mod.name, in, want, got)
			}
			compared++
		}
	}
	t.Logf("%d module runs compared", compared)
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
	if reactor {
		cfg = cfg.WithStartFunctions()
	}
	mod, err := rt.InstantiateModule(ctx, cm, cfg)
	if err == nil && reactor {
		if _, err = mod.ExportedFunction("_initialize").Call(ctx); err == nil {
			if f := mod.ExportedFunction("agrun_call"); f != nil {
				_, err = f.Call(ctx)
			}
		}
	}
	if mod != nil {
		mod.Close(ctx)
	}
	end := "ok"
	var exit *sys.ExitError
	switch {
	case ctx.Err() != nil:
		end = "time limit"
	case errors.As(err, &exit):
		end = fmt.Sprintf("exit %d", exit.ExitCode())
	case err != nil:
		end, _, _ = strings.Cut(err.Error(), "\nwasm stack trace")
		// The function that failed is named by index, which shifts.
		if _, after, ok := strings.Cut(end, "failed: "); ok {
			end = after
		}
	}
	return fmt.Sprintf("%s, stdout %q, stderr %q", end, stdout.String(), stderr.String())
}

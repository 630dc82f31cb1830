package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// The benchmarks behind docs/PERFORMANCE.md (section "runtime"):
//
//	go test -run '^$' -bench . -benchtime 2s ./runtime/
//
// Besides wall time per call they report cpu-ns/op, the CPU time (user +
// system, child processes included) per call, which stays meaningful on a
// machine shared with other work.

var wordcountIn = []byte(`{"text":"the quick brown fox jumps over the lazy dog"}`)

const wordcountOut = "{\"words\":9}\n"

func wordcount(b testing.TB) []byte { return testguest.Build(b, "testdata/guests/wordcount") }

// BenchmarkCompileCold compiles a Go guest with no cache at all.
func BenchmarkCompileCold(b *testing.B) {
	wasm := wordcount(b)
	ctx := context.Background()
	for b.Loop() {
		r, err := New(ctx, Config{DisableCache: true})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Compile(ctx, wasm); err != nil {
			b.Fatal(err)
		}
		r.Close(ctx)
	}
}

// BenchmarkCompileDiskCache is what a second process pays: a new Runtime
// loading the module from a warm on-disk cache (wazero's compiled code and
// agrun's prepared module, prepared.go).
func BenchmarkCompileDiskCache(b *testing.B) { benchDiskCache(b, false) }

// BenchmarkCompileDiskCacheUnprepared is BenchmarkCompileDiskCache with
// prepared modules off: the parse, checks and metering rewrite run again,
// as they did before prepared.go.
func BenchmarkCompileDiskCacheUnprepared(b *testing.B) { benchDiskCache(b, true) }

func benchDiskCache(b *testing.B, unprepared bool) {
	wasm := wordcount(b)
	ctx := context.Background()
	dir := b.TempDir()
	warm, err := New(ctx, Config{CacheDir: dir})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := warm.Compile(ctx, wasm); err != nil {
		b.Fatal(err)
	}
	warm.Close(ctx)
	b.ResetTimer()
	defer reportCPU(b)()
	for b.Loop() {
		r, err := New(ctx, Config{CacheDir: dir})
		if err != nil {
			b.Fatal(err)
		}
		if unprepared {
			r.preparedDir = ""
		}
		if _, err := r.Compile(ctx, wasm); err != nil {
			b.Fatal(err)
		}
		r.Close(ctx)
	}
}

// BenchmarkRun is one call of a small Go tool in a fresh instance.
func BenchmarkRun(b *testing.B) {
	r := newRuntime(b, Config{})
	benchCalls(b, r, compile(b, r, wordcount(b)))
}

// benchCalls times calls of wordcount in a row.
func benchCalls(b *testing.B, r *Runtime, m *Module) {
	ctx := context.Background()
	in := Input{Args: []string{"wordcount"}, Stdin: wordcountIn}
	defer reportCPU(b)()
	for b.Loop() {
		out, err := r.Run(ctx, m, in)
		if err != nil || string(out.Stdout) != wordcountOut {
			b.Fatalf("%v %+v", err, out)
		}
	}
}

// BenchmarkRunSnapshot is BenchmarkRun with the tool built as a reactor
// (-buildmode=c-shared): each call's fresh instance starts from the
// snapshot taken after _initialize, and the next one is prepared while a
// call runs.
func BenchmarkRunSnapshot(b *testing.B) { benchSnapshot(b, Config{}) }

// BenchmarkRunSnapshotNoPrepare is BenchmarkRunSnapshot with
// DisablePrepare: each call makes its instance first, on its own
// goroutine.
func BenchmarkRunSnapshotNoPrepare(b *testing.B) { benchSnapshot(b, Config{DisablePrepare: true}) }

func benchSnapshot(b *testing.B, cfg Config) {
	r := newRuntime(b, cfg)
	m := compile(b, r, testguest.Build(b, "testdata/guests/wordcount", "-buildmode=c-shared"))
	if m.c.info.snap == nil {
		b.Fatal("not snapshotted")
	}
	before := r.Stats().InstancesReused
	benchCalls(b, r, m)
	b.ReportMetric(float64(r.Stats().InstancesReused-before)/float64(b.N), "reused/op")
}

// BenchmarkRunParallel is calls from many goroutines at once.
func BenchmarkRunParallel(b *testing.B) {
	r := newRuntime(b, Config{})
	m := compile(b, r, wordcount(b))
	ctx := context.Background()
	in := Input{Args: []string{"wordcount"}, Stdin: wordcountIn}
	b.ResetTimer()
	defer reportCPU(b)()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			out, err := r.Run(ctx, m, in)
			if err != nil || string(out.Stdout) != wordcountOut {
				b.Errorf("%v %+v", err, out)
				return
			}
		}
	})
}

// BenchmarkRawWazero is the baseline: the unmodified module instantiated
// with wazero's defaults, as a plain embedding would.
func BenchmarkRawWazero(b *testing.B) {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().
		WithCompilationCache(mustCache(b, testguest.CompilationCacheDir(b))))
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	cm, err := rt.CompileModule(ctx, wordcount(b))
	if err != nil {
		b.Fatal(err)
	}
	defer reportCPU(b)()
	for b.Loop() {
		var stdout bytes.Buffer
		mod, err := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName("").
			WithArgs("wordcount").WithStdin(bytes.NewReader(wordcountIn)).WithStdout(&stdout))
		if err != nil {
			b.Fatal(err)
		}
		mod.Close(ctx)
		if stdout.String() != wordcountOut {
			b.Fatalf("%q", stdout.String())
		}
	}
}

// BenchmarkNativeProcess is the same tool built for the host and run with
// fork/exec.
func BenchmarkNativeProcess(b *testing.B) {
	bin := testguest.BuildNative(b, "testdata/guests/wordcount")
	defer reportCPU(b)()
	for b.Loop() {
		cmd := exec.Command(bin)
		cmd.Stdin = bytes.NewReader(wordcountIn)
		out, err := cmd.Output()
		if err != nil || string(out) != wordcountOut {
			b.Fatalf("%v %q", err, out)
		}
	}
}

func mustCache(b testing.TB, dir string) wazero.CompilationCache {
	c, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// reportCPU starts measuring CPU time; the returned function reports it
// per operation as "cpu-ns/op".
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() {
		if b.N > 0 && start >= 0 {
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

// BenchmarkRunSnapshotLarge is BenchmarkRunSnapshotNoPrepare on a 20 KB
// input, where the guest's own work (decoding JSON, counting) dominates:
// what the time limit's checks cost the guest (docs/PERFORMANCE.md).
func BenchmarkRunSnapshotLarge(b *testing.B) {
	r := newRuntime(b, Config{DisablePrepare: true})
	m := compile(b, r, testguest.Build(b, "testdata/guests/wordcount", "-buildmode=c-shared"))
	text := strings.Repeat("the quick brown fox jumps over the lazy dog\n", 460)
	stdin, _ := json.Marshal(map[string]string{"text": text})
	in := Input{Args: []string{"wordcount"}, Stdin: stdin}
	ctx := context.Background()
	first, err := r.Run(ctx, m, in)
	if err != nil {
		b.Fatal(err)
	}
	defer reportCPU(b)()
	for b.Loop() {
		out, err := r.Run(ctx, m, in)
		if err != nil || string(out.Stdout) != string(first.Stdout) {
			b.Fatalf("%v %+v", err, out)
		}
	}
}

// BenchmarkAuditCPUWindow is what the audit adds to every call besides
// its counters: locking the goroutine to its thread and reading the
// thread's CPU time twice (docs/PERFORMANCE.md, "Audit").
func BenchmarkAuditCPUWindow(b *testing.B) {
	for b.Loop() {
		startThreadCPU().stop()
	}
}

// BenchmarkRunSnapshotLargeReuse is BenchmarkRunSnapshotLarge with the
// default configuration (instances prepared ahead and reused when the
// rules allow): the 20 KB row of the peer bench. On this input Go's heap
// grows the memory (52 to 64 pages); the reset shrinks it back, so
// reused/op is 1 (docs/PERFORMANCE.md, "The 20 KB call is reused").
func BenchmarkRunSnapshotLargeReuse(b *testing.B) {
	r := newRuntime(b, Config{})
	m := compile(b, r, testguest.Build(b, "testdata/guests/wordcount", "-buildmode=c-shared"))
	text := strings.Repeat("the quick brown fox jumps over the lazy dog\n", 460)
	stdin, _ := json.Marshal(map[string]string{"text": text})
	in := Input{Args: []string{"wordcount"}, Stdin: stdin}
	ctx := context.Background()
	first, err := r.Run(ctx, m, in)
	if err != nil {
		b.Fatal(err)
	}
	before := r.Stats().InstancesReused
	defer reportCPU(b)()
	for b.Loop() {
		out, err := r.Run(ctx, m, in)
		if err != nil || string(out.Stdout) != string(first.Stdout) {
			b.Fatalf("%v %+v", err, out)
		}
	}
	b.ReportMetric(float64(r.Stats().InstancesReused-before)/float64(b.N), "reused/op")
}

package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/hostile"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// TestCPU: guests that never stop end with timeout, wherever they are.
func TestCPU(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	lim := wasmtools.Grant{Limits: runtime.Limits{Timeout: hostile.CallTimeout}}
	f.Register(t, f.Load(t, hostile.Pack(t, hostile.WAT(t, "spin"), "wat_spin"), lim))
	// Overflowing the stack takes a while on a busy machine: a longer
	// deadline, so that the trap, not the deadline, ends it.
	f.Register(t, f.Load(t, hostile.Pack(t, hostile.WAT(t, "recurse"), "wat_recurse"), wasmtools.Grant{Limits: runtime.Limits{Timeout: 10 * time.Second}}))
	f.Hostile(t, "spin", lim)

	// A guest stuck inside a host call: an HTTP peer that never answers.
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(hang) })
	host := strings.TrimPrefix(srv.URL, "http://")
	f.Hostile(t, "stuck", wasmtools.Grant{AllowedHosts: []string{host}, AllowPrivate: true, Limits: lim.Limits}, "network")

	for _, c := range []struct {
		name, tool, args string
		want             registry.Kind
	}{
		{"infinite loop (wat, no calls)", "wat_spin", `{}`, registry.Timeout},
		{"infinite loop (Go guest)", "spin", `{"op":"spin"}`, registry.Timeout},
		{"stuck in a host call", "stuck", `{"op":"http","url":"` + srv.URL + `/"}`, registry.Timeout},
		{"runaway recursion", "wat_recurse", `{}`, registry.ExecutionFailed},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := f.Snapshot(t)
			f.After(t, before, hostile.Inv(f.Reg.Invoke(context.Background(), c.tool, json.RawMessage(c.args))), c.want)
		})
	}

	t.Run("many at once", func(t *testing.T) {
		before := f.Snapshot(t)
		var calls []registry.Call
		for i := range 24 {
			tool, args := "wat_spin", `{}`
			if i%2 == 1 {
				tool, args = "spin", `{"op":"spin"}`
			}
			calls = append(calls, registry.Call{ID: strconv.Itoa(i), Name: tool, Args: json.RawMessage(args)})
		}
		invs := f.Reg.InvokeAll(context.Background(), calls)
		for _, i := range invs[:len(invs)-1] {
			hostile.CheckKind(t, i.Err, registry.Timeout)
		}
		f.After(t, before, hostile.Inv(invs[len(invs)-1]), registry.Timeout)
	})

	t.Run("caller cancels", func(t *testing.T) {
		before := f.Snapshot(t)
		ctx, cancel := context.WithTimeout(context.Background(), hostile.CallTimeout/4)
		defer cancel()
		f.After(t, before, hostile.Inv(f.Reg.Invoke(ctx, "wat_spin", json.RawMessage(`{}`))), registry.Timeout)
	})
}

// TestMemory: growing past the limit ends the call with memory_limit;
// modules that would need too much up front are refused at load.
func TestMemory(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	lim := wasmtools.Grant{Limits: runtime.Limits{Timeout: 5 * time.Second, MemoryBytes: hostile.SmallMemory}}
	f.Register(t, f.Load(t, hostile.Pack(t, hostile.WAT(t, "growmem"), "wat_grow"), lim))
	f.Register(t, f.Load(t, hostile.Pack(t, hostile.WAT(t, "growhuge"), "wat_growhuge"), lim))
	f.Register(t, f.Load(t, hostile.Pack(t, hostile.WAT(t, "tablecapped"), "wat_tablecapped"), lim))
	f.Hostile(t, "alloc", lim)

	for _, c := range []struct {
		name, tool, args string
		want             registry.Kind
	}{
		{"memory.grow loop past the limit", "wat_grow", `{}`, registry.MemoryLimit},
		{"one memory.grow of 4 GiB", "wat_growhuge", `{}`, registry.MemoryLimit},
		{"Go guest allocating forever", "alloc", `{"op":"alloc"}`, registry.MemoryLimit},
		{"table.grow past a declared maximum is refused in the guest", "wat_tablecapped", `{}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := f.Snapshot(t)
			f.After(t, before, hostile.Inv(f.Reg.Invoke(context.Background(), c.tool, json.RawMessage(c.args))), c.want)
		})
	}

	// Refused at load: the module never runs. The error is runtime.ErrCompile
	// with a ValidationError naming the reason (the CLI shows it in `agrun
	// tools` and fails calls to the tool; see TestCLIBrokenTool).
	for _, c := range []struct{ name, file, reason string }{
		{"declared minimum over the limit", "bigmin", "initial memory"},
		{"table growth bomb (no maximum, table.grow)", "tablegrow", "table 0"},
		{"table maximum far over the cap, grown", "tablemaxgrow", "table 0"},
		{"initial table of ten million", "tablebig", "table 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := f.Snapshot(t)
			_, err := wasmtools.Load(context.Background(), f.Rt, hostile.Pack(t, hostile.WAT(t, c.file), "bomb"), lim)
			checkRefused(t, err, c.reason)
			f.After(t, before, hostile.Outcome{}, "")
		})
	}
}

// checkRefused asserts a load-time refusal by the sandbox naming reason.
func checkRefused(t testing.TB, err error, reason string) {
	t.Helper()
	var ve *runtime.ValidationError
	switch {
	case err == nil:
		t.Errorf("loaded; want a refusal (%s)", reason)
	case !errors.Is(err, runtime.ErrCompile):
		t.Errorf("error %v; want runtime.ErrCompile", err)
	case reason != "" && (!errors.As(err, &ve) || !strings.Contains(ve.Reason, reason)):
		t.Errorf("error %v; want a ValidationError naming %q", err, reason)
	}
	if err != nil {
		hostile.CheckModelText(t, err.Error())
	}
}

// TestParallelInstancesBoundedRSS runs 3*MaxInstances calls of a guest that
// touches 48 MiB each, in a child process, and checks the child's peak RSS
// (VmHWM) stays within MaxInstances instances' worth: calls over the limit
// wait for a slot instead of all holding memory at once.
func TestParallelInstancesBoundedRSS(t *testing.T) {
	r := memoryChild(t, "parallel-rss", hostile.Pack(t, hostile.WAT(t, "touchmem"), "touch"))
	t.Logf("baseline RSS %d MiB, peak %d MiB, %d calls: %v", r.Base>>20, r.Peak>>20, r.Calls, r.Kinds)
	if r.Kinds[string(registry.Timeout)] != r.Calls {
		t.Errorf("outcomes %v; want %d timeouts", r.Kinds, r.Calls)
	}
	// Two instances may run at once (MaxInstances 2); 48 MiB each plus
	// slack. All twelve at once would be 576 MiB.
	if limit := r.Base + 2*48<<20 + 96<<20; r.Peak > limit {
		t.Errorf("peak RSS %d MiB over %d MiB: instances beyond MaxInstances held memory", r.Peak>>20, limit>>20)
	}
}

var _ = hostile.RegisterChild("parallel-rss", func() (string, error) {
	wasm, err := os.ReadFile(os.Getenv("HOSTILE_WASM"))
	if err != nil {
		return "", err
	}
	ctx := context.Background()
	rt, err := runtime.New(ctx, runtime.Config{CacheDir: os.Getenv("HOSTILE_CACHE"), MaxInstances: 2, Logger: hostile.QuietLogger})
	if err != nil {
		return "", err
	}
	defer rt.Close(ctx)
	tool, err := wasmtools.Load(ctx, rt, wasm, wasmtools.Grant{Limits: runtime.Limits{Timeout: 300 * time.Millisecond}})
	if err != nil {
		return "", err
	}
	base, err := hostile.ReadProcStatus("VmRSS")
	if err != nil {
		return "", err
	}
	reg := registry.New(registry.WithMaxParallel(64))
	if err := reg.Register(tool); err != nil {
		return "", err
	}
	const n = 12
	var mu sync.Mutex
	kinds := map[string]int{}
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := reg.Invoke(ctx, "touch", json.RawMessage(`{}`))
			mu.Lock()
			kinds[string(registry.KindOf(i.Err))]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	peak, err := hostile.ReadProcStatus("VmHWM")
	if err != nil {
		return "", err
	}
	b, _ := json.Marshal(map[string]any{"Base": base, "Peak": peak, "Calls": n, "Kinds": kinds})
	return string(b), nil
})

// TestRecursionStackMemory runs 4 runaway recursions at once in a child
// process and reads its peak RSS. wazero grows a guest's call stack on the
// Go heap, outside Limits.MemoryBytes, up to its own ceiling (it cost
// about 126 MiB per call); the guest's estimated stack is now bounded by
// Config.MaxStackBytes (16 MiB by default), which wazero's doubling turns
// into at most about three times that of host memory.
func TestRecursionStackMemory(t *testing.T) {
	r := memoryChild(t, "parallel-recurse", hostile.Pack(t, hostile.WAT(t, "recurse"), "recurse"))
	perCall := (r.Peak - r.Base) / 4
	t.Logf("baseline RSS %d MiB, peak %d MiB with 4 recursions at once (memory limit 1 MiB each): about %d MiB per call; %v", r.Base>>20, r.Peak>>20, perCall>>20, r.Kinds)
	if r.Kinds[string(registry.ExecutionFailed)] != r.Calls {
		t.Errorf("outcomes %v; want %d execution_failed (stack overflow)", r.Kinds, r.Calls)
	}
	if perCall > 3*runtime.DefaultMaxStackBytes {
		t.Errorf("a runaway recursion costs about %d MiB of host memory per call, over 3× the stack limit of %d MiB", perCall>>20, runtime.DefaultMaxStackBytes>>20)
	}
}

var _ = hostile.RegisterChild("parallel-recurse", func() (string, error) {
	wasm, err := os.ReadFile(os.Getenv("HOSTILE_WASM"))
	if err != nil {
		return "", err
	}
	ctx := context.Background()
	rt, err := runtime.New(ctx, runtime.Config{CacheDir: os.Getenv("HOSTILE_CACHE"), MaxInstances: 4, Logger: hostile.QuietLogger})
	if err != nil {
		return "", err
	}
	defer rt.Close(ctx)
	tool, err := wasmtools.Load(ctx, rt, wasm, wasmtools.Grant{Limits: runtime.Limits{Timeout: time.Minute, MemoryBytes: 1 << 20}})
	if err != nil {
		return "", err
	}
	reg := registry.New()
	if err := reg.Register(tool); err != nil {
		return "", err
	}
	base, err := hostile.ReadProcStatus("VmRSS")
	if err != nil {
		return "", err
	}
	const n = 4
	kinds := map[string]int{}
	var calls []registry.Call
	for i := range n {
		calls = append(calls, registry.Call{ID: strconv.Itoa(i), Name: "recurse", Args: json.RawMessage(`{}`)})
	}
	for _, i := range reg.InvokeAll(ctx, calls) {
		kinds[string(registry.KindOf(i.Err))]++
	}
	peak, err := hostile.ReadProcStatus("VmHWM")
	if err != nil {
		return "", err
	}
	b, _ := json.Marshal(map[string]any{"Base": base, "Peak": peak, "Calls": n, "Kinds": kinds})
	return string(b), nil
})

// reactorAttacks are the tests whose attacks run again against the
// attacker built as a reactor (instances started from a snapshot,
// prepared before and closed after their call).
const reactorAttacks = "^(TestCPU|TestMemory|TestFilesEscapes|TestFilesReadOnly|TestFilesResources|TestFilesPlantedHardLink|TestNetworkRefusals|TestNetworkResponses|TestOutput|TestLogFlood|TestManifests|TestHostFunctionAbuse)$"

// TestReactorAttacks runs the attacks of the tests above once more, with
// the attacker built with -buildmode=c-shared: this test binary again, in
// a child process with AGRUN_HOSTILE_REACTOR=1 (see testguest.Hostile).
//
// TestMain starts that child before the other tests (startReactor), so
// that it runs while they do rather than after them (a fifth of the
// package's time, issue 31); this test is parallel only so that it runs
// after every other test of the package, alone, and waits for the child.
// The child's leak checks are its own process's; in this one the run is a
// process handle and a log file held from before the first case to after
// the last (the cases check that their counts do not grow).
func TestReactorAttacks(t *testing.T) {
	if os.Getenv("AGRUN_HOSTILE_REACTOR") == "1" {
		t.Skip("already the reactor run")
	}
	t.Parallel()
	r := reactor
	reactor = nil
	if r == nil { // not started by TestMain (-count above 1)
		r = startReactor()
	}
	out, err := r.wait()
	if err != nil {
		t.Fatalf("the attacks against the reactor build failed: %v\n%s", err, out)
	}
	for _, name := range []string{"TestCPU", "TestMemory", "TestFilesEscapes", "TestNetworkRefusals", "TestOutput"} {
		if !strings.Contains(string(out), "--- PASS: "+name+" ") {
			t.Errorf("%s did not run and pass against the reactor build:\n%s", name, out)
		}
	}
}

// TestMain starts the reactor run before the other tests, so that it runs
// beside them (TestReactorAttacks).
func TestMain(m *testing.M) {
	hostile.Main(m, func() func() {
		if os.Getenv("AGRUN_HOSTILE_REACTOR") != "1" && selected("TestReactorAttacks") {
			reactor = startReactor()
		}
		return func() {
			if reactor != nil {
				reactor.stop()
			}
		}
	})
}

// reactor is the reactor run TestMain started (nil: none, or taken).
var reactor *reactorRun

// reactorRun is a child running the attacks against the reactor build,
// its output (stdout and stderr) in an unlinked temporary file.
type reactorRun struct {
	cmd *exec.Cmd
	out *os.File
	err error // the start's
}

// startReactor starts the reactor run.
func startReactor() *reactorRun {
	out, err := os.CreateTemp("", "agrun-hostile-reactor-*.log")
	if err != nil {
		return &reactorRun{err: err}
	}
	os.Remove(out.Name())
	cmd := exec.Command(os.Args[0], "-test.run", reactorAttacks, "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "AGRUN_HOSTILE_REACTOR=1")
	cmd.Stdout, cmd.Stderr = out, out // files: no copying goroutine in this process
	r := &reactorRun{cmd: cmd, out: out, err: cmd.Start()}
	return r
}

// wait waits for the run's end and returns its output.
func (r *reactorRun) wait() ([]byte, error) {
	if r.out == nil {
		return nil, r.err
	}
	defer r.out.Close()
	err := r.err
	if err == nil {
		err = r.cmd.Wait()
	}
	if _, serr := r.out.Seek(0, io.SeekStart); serr != nil {
		return nil, serr
	}
	out, rerr := io.ReadAll(r.out)
	if err == nil {
		err = rerr
	}
	return out, err
}

// stop ends a run nobody waits for.
func (r *reactorRun) stop() {
	if r.err == nil && r.cmd.Process != nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
	}
	if r.out != nil {
		r.out.Close()
	}
}

// selected reports whether go test's -test.run and -test.skip select the
// top-level test name (a pattern's part before the first "/"), and this
// is not -test.list.
func selected(name string) bool {
	value := func(f string) string {
		if fl := flag.Lookup(f); fl != nil {
			return fl.Value.String()
		}
		return ""
	}
	top := func(p string) string { p, _, _ = strings.Cut(p, "/"); return p }
	if run := top(value("test.run")); run != "" {
		if ok, _ := regexp.MatchString(run, name); !ok {
			return false
		}
	}
	if skip := top(value("test.skip")); skip != "" {
		if ok, _ := regexp.MatchString(skip, name); ok {
			return false
		}
	}
	return value("test.list") == ""
}

// memoryResult is what a memory-measuring child reports: its RSS before
// and at its peak, the calls it made and their kinds.
type memoryResult struct {
	Base, Peak int64
	Calls      int
	Kinds      map[string]int
}

// memoryChild runs child name on the module wasm and returns its report.
func memoryChild(t *testing.T, name string, wasm []byte) memoryResult {
	t.Helper()
	wasmPath := hostile.WriteTemp(t, name+".wasm", wasm)
	line, st := hostile.Child(t, name, 2*time.Minute, "HOSTILE_WASM="+wasmPath, "HOSTILE_CACHE="+hostile.CacheDirFor(t))
	if !st.Success() {
		t.Fatalf("child failed: %s", line)
	}
	var r memoryResult
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("child result %q: %v", line, err)
	}
	return r
}

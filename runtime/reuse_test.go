package runtime

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/testguest"
)

// result is what a call shows its caller: what a reused instance must
// give exactly as a fresh one does.
type result struct {
	Stdout, Stderr string
	ExitCode       uint32
	Fuel           int64
	Err            string
}

func resultOf(out *Output, err error, fuel bool) result {
	var res result
	if out != nil {
		res = result{Stdout: string(out.Stdout), Stderr: string(out.Stderr), ExitCode: out.ExitCode}
		if fuel {
			res.Fuel = out.Fuel
		}
	}
	if err != nil {
		res.Err = err.Error()
	}
	return res
}

// reuseInput is a call of testdata/wat/reactorreuse.wat.
func reuseInput(mode byte, depth uint16, marker string) Input {
	b := append([]byte{mode}, binary.LittleEndian.AppendUint16(nil, depth)...)
	return Input{Stdin: append(b, marker...)}
}

// Every call of an instance reused after a clean call sees exactly what a
// fresh instance's call sees (stdout, stderr, exit code, error, fuel),
// against a guest that looks for what earlier calls left in memory, in
// globals, in its table, in the stack-depth and fuel counters and in its
// file table, in calls that return, trap, time out, are cancelled, exit,
// close stderr, open files, grow memory (and look in the pages an earlier
// call grew, wrote and had taken away when its instance was reset) and
// read random bytes and clocks, in a random order. The oracle is the same calls with DisablePrepare (a
// new instance for every call).
func TestReuseDifferential(t *testing.T) {
	const maxStack = 64 << 10
	wasm := wat(t, "reactorreuse")
	fresh := newRuntime(t, Config{DisablePrepare: true, MaxStackBytes: maxStack})
	reuse := newRuntime(t, Config{MaxStackBytes: maxStack})
	fm, rm := compile(t, fresh, wasm), compile(t, reuse, wasm)
	if rm.c.info.snap == nil {
		t.Fatal("not snapshotted")
	}
	ctx := context.Background()

	// The deepest recursion a fresh instance completes: a call of a
	// reused instance whose depth counter were not back at zero would
	// stop short of it.
	lo, hi := uint16(1), uint16(4000) // lo completes, hi does not
	if out, err := fresh.Run(ctx, fm, reuseInput('n', hi, "calibrate-000000")); err == nil {
		t.Fatalf("depth %d completes under %d bytes of stack: %q", hi, maxStack, out.Stdout)
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if _, err := fresh.Run(ctx, fm, reuseInput('n', mid, "calibrate-000000")); err == nil {
			lo = mid
		} else {
			hi = mid
		}
	}
	depth := lo

	rng := rand.New(rand.NewPCG(29, 1))
	modes := "nnnnnnnnnrrrttlLxycoggghhw"
	before := reuse.Stats().InstancesReused
	for i := range 300 {
		mode := modes[rng.IntN(len(modes))]
		d := depth
		if rng.IntN(4) == 0 {
			d = uint16(rng.IntN(int(depth)))
		}
		if mode == 'w' { // a call past the depth: a trap in both
			mode, d = 'n', depth+1
		}
		marker := fmt.Sprintf("marker-%09d", i)
		in := reuseInput(mode, d, marker)
		if mode == 'L' { // cancelled while it loops
			in.Stdin[0] = 'l'
		}
		if mode == 'l' {
			in.Limits.Timeout = 50 * time.Millisecond
		}
		run := func(r *Runtime, m *Module) result {
			ctx := ctx
			if mode == 'L' {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				time.AfterFunc(20*time.Millisecond, cancel)
				defer cancel()
			}
			out, err := r.Run(ctx, m, in)
			// A loop stopped by its deadline or cancelled spent fuel
			// by the clock: compare the rest.
			return resultOf(out, err, mode != 'l' && mode != 'L')
		}
		want, got := run(fresh, fm), run(reuse, rm)
		if got != want {
			t.Fatalf("call %d (mode %c, depth %d): reused %+v\nfresh %+v", i, mode, d, got, want)
		}
		size := "\x02" // memory.size as the call sees it first
		if mode == 'h' {
			size = "\x03"
		}
		if want.Err == "" && !strings.HasPrefix(want.Stdout, "CH\x0212"+size+"I") {
			t.Fatalf("call %d (mode %c): a fresh instance saw %q", i, mode, want.Stdout)
		}
	}
	if n := reuse.Stats().InstancesReused - before; n < 100 {
		t.Errorf("%d of 300 calls reused their instance; want most of the clean ones", n)
	}
	if n := fresh.Stats().InstancesReused; n != 0 {
		t.Errorf("%d instances reused with DisablePrepare", n)
	}
}

// runBoth makes the same call on a Runtime that makes a fresh instance
// per call and on one that reuses instances; the test fails if either
// errs.
func runBoth(t *testing.T, fresh *Runtime, fm *Module, reuse *Runtime, rm *Module, in Input) (want, got *Output) {
	t.Helper()
	want, err := fresh.Run(context.Background(), fm, in)
	if err != nil {
		t.Fatal(err)
	}
	got, err = reuse.Run(context.Background(), rm, in)
	if err != nil {
		t.Fatal(err)
	}
	return want, got
}

// A Go tool's calls give the same output and spend the same fuel whether
// its instance is reused or fresh (the fuel says the guest took the same
// path: Go's runtime found the same state), and a reactor's instance
// serves one call as far as the guest can tell.
func TestReuseGoGuest(t *testing.T) {
	wasm := probeReactor(t)
	fresh := newRuntime(t, Config{DisablePrepare: true})
	reuse := newRuntime(t, Config{})
	fm, rm := compile(t, fresh, wasm), compile(t, reuse, wasm)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(29, 2))
	// math/rand and map order come from each Runtime's own snapshot: the
	// same in every call of one Runtime, not across the two.
	first := map[*Runtime]result{}
	for i := range 40 {
		var in Input
		switch rng.IntN(4) {
		case 0:
			in = Input{Args: []string{"probe", "calls"}}
		case 1:
			for _, rt := range []struct {
				r *Runtime
				m *Module
			}{{fresh, fm}, {reuse, rm}} {
				out, err := rt.r.Run(ctx, rt.m, Input{Args: []string{"probe", "mathrand"}})
				if err != nil {
					t.Fatal(err)
				}
				res := resultOf(out, nil, true)
				if f, ok := first[rt.r]; !ok {
					first[rt.r] = res
				} else if f != res {
					t.Fatalf("call %d: mathrand %+v, first %+v", i, res, f)
				}
			}
			continue
		default:
			msg, _ := json.Marshal(strings.Repeat(fmt.Sprint(i, " "), rng.IntN(2000)))
			in = Input{Args: []string{"probe", "echo"}, Stdin: msg}
		}
		want, got := runBoth(t, fresh, fm, reuse, rm, in)
		if a, b := resultOf(got, nil, true), resultOf(want, nil, true); a != b {
			t.Fatalf("call %d %v: reused %+v\nfresh %+v", i, in.Args, a, b)
		}
	}
	if reuse.Stats().InstancesReused == 0 {
		t.Error("no instance was reused")
	}
}

// A Go tool's call that grows its memory (word_count on 20 KB: Go's heap
// takes the rest of its first arena) leaves an instance that is shrunk
// back and reused, and the calls after it, large or small, give the same
// output as on fresh instances and spend the same fuel as the same call
// on the Runtime's first, fresh instance: Go's runtime finds the memory
// size it recorded at start-up, and zeros wherever it grows again. (Fuel
// is compared within one Runtime: word_count's map hashes with the seed
// in each Runtime's own snapshot.)
func TestReuseGrownGoGuest(t *testing.T) {
	wasm := testguest.Build(t, "testdata/guests/wordcount", "-buildmode=c-shared")
	fresh := newRuntime(t, Config{DisablePrepare: true})
	reuse := newRuntime(t, Config{})
	fm, rm := compile(t, fresh, wasm), compile(t, reuse, wasm)
	ctx := context.Background()
	input := func(words int) Input {
		stdin, _ := json.Marshal(map[string]string{"text": strings.Repeat("the quick brown fox jumps over the lazy dog\n", words/9)})
		return Input{Args: []string{"wordcount"}, Stdin: stdin}
	}
	small, err := fresh.Run(ctx, fm, input(9))
	if err != nil {
		t.Fatal(err)
	}
	fuel := map[int]int64{} // words: the fuel of its first call on reuse
	grown := 0
	for i := range 12 {
		words := []int{4140, 9000, 9}[i%3] // 20 KB, 44 KB, 45 bytes
		in := input(words)
		want, got := runBoth(t, fresh, fm, reuse, rm, in)
		if string(got.Stdout) != string(want.Stdout) || got.ExitCode != 0 || len(got.Stderr) != 0 {
			t.Fatalf("call %d (%d words): reused %+v\nfresh %+v", i, words, resultOf(got, nil, false), resultOf(want, nil, false))
		}
		if f, ok := fuel[words]; !ok {
			fuel[words] = got.Fuel
		} else if got.Fuel != f {
			t.Fatalf("call %d (%d words) spent %d fuel on a reused instance, %d the first time", i, words, got.Fuel, f)
		}
		if got.Audit.MemoryPeak > small.Audit.MemoryPeak {
			grown++
		}
		waitIdle(t, reuse)
	}
	if grown < 8 {
		t.Fatalf("%d of 12 calls grew the memory; want the 8 large ones", grown)
	}
	if n := reuse.Stats().InstancesReused; n < 11 {
		t.Errorf("%d of 12 instances reused; want every one (%d calls grew the memory)", n, grown)
	}
}

// A call with mounts never hands its instance on (wazero's file table
// holds what it opened, on its own mount), nor does one that crossed a
// limit; a clean call without mounts does.
func TestReuseOnlyClean(t *testing.T) {
	// Room for the instances prepared for each configuration below
	// besides the one reused (MaxInstances bounds them all).
	r := newRuntime(t, Config{MaxInstances: 16})
	m := compile(t, r, probeReactor(t))
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	reused := func() int64 { return r.Stats().InstancesReused }
	for _, in := range []Input{
		{Args: []string{"probe", "read", "/data/f"}, Mounts: []Mount{{Host: dir, Guest: "/data"}}},
		{Args: []string{"probe", "floodout"}, Limits: Limits{MaxStdout: 100}},
		{Args: []string{"probe", "spin"}, Limits: Limits{Timeout: 50 * time.Millisecond}},
		{Args: []string{"probe", "exit"}},
	} {
		n := reused()
		for range 3 {
			r.Run(ctx, m, in)
		}
		waitIdle(t, r)
		if reused() != n {
			t.Errorf("%v: an instance was reused", in.Args)
		}
	}
	echo := Input{Args: []string{"probe", "echo"}, Stdin: []byte("x")}
	n := reused()
	for range 3 {
		if out, err := r.Run(ctx, m, echo); err != nil || string(out.Stdout) != "x" {
			t.Fatalf("echo: %q, %v", out.Stdout, err)
		}
	}
	waitIdle(t, r)
	if reused() == n {
		t.Error("a clean call's instance was not reused")
	}
}

// waitIdle waits until no instance is held (instances closed or
// recycled behind their call are done).
func waitIdle(t *testing.T, r *Runtime) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for r.Stats().InstancesInUse != 0 {
		if time.Now().After(deadline) {
			t.Fatal("instances still in use")
		}
		time.Sleep(time.Millisecond)
	}
}

// A call that waits for an instance being reset for reuse stops waiting
// when its context ends (and then makes its own).
func TestReuseWaitCancelled(t *testing.T) {
	e := &snapEntry{recycling: 1}
	r := &Runtime{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if p := r.takePrepared(ctx, e, 0); p != nil {
		t.Fatal("an instance out of nothing")
	}
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatal(ctx.Err())
	}
}
